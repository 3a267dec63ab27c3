"""The trainer role: consumes experience groups (or an SFT dataset) and improves the policy.

One process per GPU (or one CPU process), under torchrun or srun; FSDP2 shards the models. The
modules, in the order a step touches them:

| module        | does                                                                       |
| ------------- | -------------------------------------------------------------------------- |
| `dist`        | process group from torchrun / srun / nothing; small collectives            |
| `fsdp`        | sharded models from an HF dir; weights gathered tensor by tensor, published |
| `lora`        | the adapter's trainable names and its PEFT state                           |
| `experience`  | rank 0's batches of experience groups from the store (or "no more")        |
| `samples`     | experience groups -> checked `Sample`s                                     |
| `sft_data`    | an SFT dataset -> `Sample`s, with a resumable position                     |
| `batching`    | mini-batches, a share per rank, micro-batches (fixed or by token budget)   |
| `sequence_parallel`, `packed_attention` | sequences split across ranks; packed rows' attention |
| `forward`     | per-token log-probs, entropy, critic values of a micro-batch               |
| `rl_batch`    | the batch as tensors: KL-shaped rewards, advantages, batch metrics         |
| `losses`      | the configured algorithm bound to `rfthpc.algorithms`                      |
| `optim`       | AdamW and the warm-up / decay learning-rate schedule                       |
| `update`      | one optimizer update of a sharded model (policy or critic)                 |
| `checkpoint`  | resumable sharded checkpoints (`global_step_N/`)                           |
| `checkpoint_meta` | a checkpoint's record (`CheckpointMeta`: stage, reader state, SFT position) |
| `stages`      | which stage and step to run, from the config and the newest checkpoint     |
| `loop`        | the training loop tying it together                                        |

Weight publishing for explorers lives in `rfthpc.weights`, the trainer's report
(`trainer_meta/`) in `rfthpc.rundir.trainer_meta`: other roles read both.
"""

"""Run under torchrun (gloo, CPU): the trainer's passes on an FSDP2 model, its sequences split over
`SP` ranks (Ulysses) or, with SP 1, whole.

Usage: python -m torch.distributed.run --standalone --nproc-per-node N tests/trainer/sequence_parallel_worker.py \
    MODEL OUT SP

Every rank runs the same work; rank 0 writes what came out (torch.save) to OUT for
tests/trainer/test_sequence_parallel.py, which compares SP 2 on 2 ranks with SP 1 on 1 rank:
- "forward": log-probs and entropy with their gradients (the loss scaled by the world size, as
  `update` does, so FSDP2's average is the gradient), then log-probs with sum_v pi_v^2, for each
  micro-batch of `cases` (the LM head in chunks of a few positions);
- "update": one SGD step (learning rate 1: the parameters move by the gradient) of `ShardedUpdater`
  on micro-batches of a token budget, then `sharded_forward` of the log-probs after it;
- "checkpointed": the "all" micro-batch's log-probs and gradients under gradient checkpointing (the
  backward pass recomputes each layer, exchanges included);
- "values": a critic's values through `sharded_forward`, and the gradients of its values on "all".
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch

from rfthpc.trainer import forward
from rfthpc.trainer.batching import collate, pad_rows, plan_micro_batches
from rfthpc.trainer.dist import init_distributed
from rfthpc.trainer.fsdp import build_sharded_model
from rfthpc.trainer.sequence_parallel import sequence_group
from rfthpc.trainer.update import ShardedUpdater
from tests.trainer.test_sequence_parallel import CHUNK_POSITIONS, TOKEN_BUDGET, cases, samples


def _full(params: dict[str, torch.Tensor], grads: bool) -> dict[str, torch.Tensor]:
    """Every parameter (or its gradient), unsharded."""
    # One rank's model is unwrapped (plain tensors); the sharded ones hold DTensors.
    whole = {n: p.grad if grads else p for n, p in params.items()}
    return {n: (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().clone() for n, t in whole.items()}


def main(model_dir: str, out: str, sp: str) -> None:
    """Run every pass; rank 0 saves the results."""
    env = init_distributed()
    if int(sp) > 1:
        env = dataclasses.replace(env, sequence=sequence_group(env.world_size, env.device.type, int(sp)))
    model = build_sharded_model(Path(model_dir), env)
    # The sharded parameters, which the optimizer holds: on one rank, FSDP2 registers whole ones in
    # the model between passes.
    params = dict(model.named_parameters())
    vocab = model.config.vocab_size
    forward.HEAD_CHUNK_LOGITS = CHUNK_POSITIONS * vocab
    results: dict = {"forward": {}}
    for name, indices in cases().items():
        mb = collate(samples(vocab), indices, env.device, packed=True, sequence=env.sequence)
        for p in params.values():
            p.grad = None
        lp, entropy = forward.token_logprobs(model, mb, with_entropy=True, entropy_grad=True)
        (((lp + 0.1 * entropy) * mb.response_mask).sum() * env.world_size).backward()
        results["forward"][name] = {"lp": lp.detach(), "entropy": entropy.detach(), "grads": _full(params, True),
                                    "both": forward.token_logprobs_and_stats(model, mb, ("sum_pi_squared",))}

    batch = samples(vocab)

    def planner(s, idx):
        # The same budget for both runs: the same micro-batches, whole or split.
        return plan_micro_batches(s, idx, env.dp_size, token_budget=TOKEN_BUDGET, micro_batch_size=4,
                                  padding_free=True)

    def micro_loss(m, mb, idx):
        lp, entropy = forward.token_logprobs(m, mb, with_entropy=True)
        mask = mb.response_mask.float()
        loss = -(lp * mask).sum() / mask.sum()
        return loss, {"loss": loss.item(), "entropy": float((entropy * mask).sum() / mask.sum())}

    mask = torch.from_numpy(pad_rows([s.loss_mask for s in batch], max(len(s.loss_mask) for s in batch), bool))
    updater = ShardedUpdater(model, torch.optim.SGD(params.values(), lr=1.0), env, planner,
                             lambda m: float(m.sum()), 0.0, lambda m, mb: forward.token_logprobs(m, mb)[0])
    micro = planner(batch, list(range(len(batch)))).n_micro
    before = _full(params, False)
    res = updater.update(batch, list(range(len(batch))), mask, micro_loss)
    after = _full(params, False)
    logprobs = forward.sharded_forward(lambda mb: forward.token_logprobs(model, mb)[0], batch, env, planner)
    results["update"] = {"metrics": res.metrics, "grad_norm": res.grad_norm, "n_micro": micro,
                         "step": {n: before[n] - after[n] for n in before}, "logprobs": logprobs}

    everything = collate(batch, cases()["all"], env.device, packed=True, sequence=env.sequence)
    checkpointed = build_sharded_model(Path(model_dir), env, gradient_checkpointing=True)
    params = dict(checkpointed.named_parameters())
    lp, _ = forward.token_logprobs(checkpointed, everything)
    ((lp * everything.response_mask).sum() * env.world_size).backward()
    results["checkpointed"] = {"lp": lp.detach(), "grads": _full(params, True)}

    critic = build_sharded_model(Path(model_dir), env, kind="value")
    params = dict(critic.named_parameters())
    values = forward.token_values(critic, everything)
    ((values * everything.response_mask).sum() * env.world_size).backward()
    results["critic"] = {"values": values.detach(), "grads": _full(params, True)}
    with torch.no_grad():
        results["values"] = forward.sharded_forward(lambda mb: forward.token_values(critic, mb), batch, env,
                                                    planner)
    if env.is_main:
        torch.save(results, out)
    env.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])

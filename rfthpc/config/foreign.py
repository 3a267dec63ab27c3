"""Keys of Trinity-RFT, veRL and ROLL that rfthpc does not take as its own: ignored or refused.

Every such key gets one of three answers:
- mapped: read as an rfthpc key (compat.py: `RENAMED_KEYS`, `VERL_MAP`, `ROLL_MAP`); `rfthpc config
  show` lists where each mapped value came from;
- ignored: it has no meaning here (Ray, a Trinity-RFT internal, a speed switch): loading says why in
  one note on stderr;
- refused: it would change results in a way rfthpc cannot follow: an error names why and the
  alternative. A refused key whose value changes nothing (empty, off, or the other framework's
  default) is ignored instead, with a note; so a dumped config, which spells out every default, loads.

A key with none of the three answers is an unknown key (typed.py, compat.py).

Tables map a key, or a pattern with `*` (any characters, dots included), to its answer; a key's
exact entry wins over patterns, which are tried in table order.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Given = Mapping[str, Any]
"""The other settings of the same framework in the config: dotted key -> value (some answers read two keys)."""


def _never(_value: Any, _given: Given) -> bool:
    return False


@dataclass(frozen=True)
class Ignored:
    """The key has no meaning in rfthpc; `why` says so in a note."""

    why: str


@dataclass(frozen=True)
class Refused:
    """The key would change results and rfthpc cannot follow it; `why` says so and names the alternative.
    A value for which `harmless(value, given)` holds changes nothing: the key is then ignored, with
    `note` (or a generic note) saying so."""

    why: str
    harmless: Callable[[Any, Given], bool] = _never
    note: str = ""


Answer = Ignored | Refused

HARMLESS = "left empty, off or at its default, where it changes nothing in rfthpc either"


def _off(value: Any, _given: Given) -> bool:
    """Empty, null, false or zero."""
    return not value


def _is(*values: Any) -> Callable[[Any, Given], bool]:
    """One of `values` (text compared without case)."""
    folded = {v.lower() if isinstance(v, str) else v for v in values}

    def check(value: Any, _given: Given) -> bool:
        v = value.lower() if isinstance(value, str) else value
        try:
            return v in folded
        except TypeError:  # an unhashable value (a list, a mapping) is none of them
            return False
    return check


def _unless(switch: str) -> Callable[[Any, Given], bool]:
    """Harmless while the setting `switch` (another key of the same framework) is off."""
    return lambda _value, given: not given.get(switch)


def _same_as(key: str, default: Any) -> Callable[[Any, Given], bool]:
    """Harmless when equal to the setting `key` (`default` where it is not given)."""
    return lambda value, given: value is None or value == given.get(key, default)


def _nothing_enabled(value: Any, _given: Given) -> bool:
    """A section whose every `enable` / `enabled` switch is off (or that is empty)."""
    if isinstance(value, Mapping):
        return all(not v if k in ("enable", "enabled") else _nothing_enabled(v, _given) for k, v in value.items())
    if isinstance(value, list):
        return all(_nothing_enabled(v, _given) for v in value)
    return True


def lookup(table: Mapping[str, Answer], key: str) -> Answer | None:
    """The table's answer for `key`: its exact entry, else the first pattern it matches."""
    if key in table:
        return table[key]
    for pattern, answer in table.items():
        if "*" in pattern and fnmatch.fnmatchcase(key, pattern):
            return answer
    return None


def answer(table: Mapping[str, Answer], key: str, value: Any, given: Given) -> Answer | None:
    """`lookup`, with a refusal of a value that changes nothing turned into an Ignored (its note)."""
    found = lookup(table, key)
    if isinstance(found, Refused) and found.harmless(value, given):
        return Ignored(found.note or HARMLESS)
    return found


def close_name(name: str, names: Iterable[str]) -> str | None:
    """The one of `names` that `name` is likely a misspelling of: close, and beginning alike unless
    very close (ROLL's `pretrain` is not a misspelt `trainer`); None rather than a far-fetched guess."""
    for candidate in difflib.get_close_matches(name, list(names), n=3, cutoff=0.6):
        if candidate[:2] == name[:2] or difflib.SequenceMatcher(None, name, candidate).ratio() >= 0.85:
            return candidate
    return None


def close_key(key: str, known: Iterable[str]) -> str | None:
    """A known dotted key `key` is likely a misspelling of: one under the same parent whose last part
    is close (`close_name`), else one very close as a whole."""
    known = [k for k in known if "*" not in k]
    parent, _, leaf = key.rpartition(".")
    siblings = {k.rpartition(".")[2]: k for k in known if k.rpartition(".")[0] == parent}
    close = close_name(leaf, siblings)
    if close:
        return siblings[close]
    whole = difflib.get_close_matches(key, known, n=1, cutoff=0.9)
    return whole[0] if whole else None


# ---- Trinity-RFT --------------------------------------------------------------------------------

NO_RAY = "rfthpc runs on Slurm and a shared filesystem, without Ray"
SET_BY_TRINITY = "set by Trinity-RFT itself (its config says \"DO NOT SET\")"
RUN_DIR = "rfthpc's run directory is <checkpoint_root_dir>/<project>/<name>"
NO_SQL = ("Trinity-RFT's retries of SQL buffer access; rfthpc's buffers are files on the shared filesystem (a failed "
          "task is retried explorer.max_retry_times times, explorer.max_retry_interval s apart)")
MULTIMODAL = "images and videos (multimodal data) are not supported: rfthpc trains text-only models; remove it"
OPENAI_SERVER = ("an option of the OpenAI API server: rfthpc starts none for the policy (explorers call its engine in "
                 "process, ctx.engine), and serves a shared auxiliary model (placement: shared) from vLLM's "
                 "OpenAI-compatible server with its own settings, reached as ctx.auxiliary[name]")
SERVE = "Trinity-RFT's serve mode; rfthpc has no serve mode"
CRITIC_LORA = ("rfthpc trains every weight of the critic; a LoRA adapter is trained for the policy only (model.lora): "
               "remove it")
OLD_REPLAY = ("Trinity-RFT's older replay settings: use experience_buffer.replay_buffer (enable, "
              "reuse_cooldown_time, priority_fn, priority_fn_args), their current form")

NO_EXTERNAL_MODEL = ("an external model behind an OpenAI-compatible API (what Trinity-RFT's `mode: bench` can evaluate) "
                     "is not run by rfthpc, whose explorers run the policy themselves with vLLM from model.model_path: "
                     "evaluate a local copy of the model instead")
TINKER = ("Trinity-RFT's Tinker backend (training and sampling through Thinking Machines' hosted Tinker service, with "
          "LoRA adapters) is not in rfthpc, which trains every weight on the cluster's GPUs with FSDP2 and rolls out "
          "with vLLM: remove it (the model trains where the run's Slurm jobs run)")
OLD_LOGPROBS = (
    "Trinity-RFT's choice, for any policy loss, of the behaviour policy's log-probabilities (true) or ones recomputed "
    "at the start of the step (false) as the loss's old policy; in rfthpc each policy loss reads the ones it declares "
    "(the off-policy losses, m2po, tis, topr, cispo, kimi15, opmd, rec, pg, gpg: the behaviour policy's; ppo, gspo and "
    "veRL's other losses: the step's), and ppo against the behaviour policy is algorithm.rollout_correction."
    "bypass_mode: true (which true is read as, with ppo): choose a policy loss that reads what you want, and remove it")


def policy_loss_of(algorithm: Given) -> str | None:
    """The policy loss an `algorithm` section names, else its algorithm_type's preset's (ppo's by default)."""
    from rfthpc.algorithms.presets import ALGORITHM_PRESETS

    preset = ALGORITHM_PRESETS.get(str(algorithm.get("algorithm_type") or "ppo")) or {}
    return algorithm.get("policy_loss_fn") or preset.get("policy_loss_fn")


def _old_logprobs_as_the_loss_reads(value: Any, given: Given) -> bool:
    """`bypass_old_logprobs` asks for what the policy loss reads anyway: the behaviour policy's
    log-probabilities (true) for a loss declaring them, recomputed ones (false) for one that does not."""
    from rfthpc import algorithms as algos
    from rfthpc.errors import ConfigError

    loss = policy_loss_of(given)
    try:
        reads = algos.POLICY_LOSS_FNS.needs(loss).old_log_prob if loss else None
    except ConfigError:
        return False  # an unknown loss (reported on its own) cannot be told
    return reads == ("behaviour" if value else "proximal")


_TASKSET = "buffer.explorer_input.taskset."
_EXPERIENCE = "buffer.trainer_input.experience_buffer."
_ROLLOUT = "explorer.rollout_model."


def _no_pipeline(value: Any, _given: Given) -> bool:
    """Trinity-RFT's data_processor as its dumped configs hold it: no task pipeline, no operators."""
    if not isinstance(value, Mapping):
        return not value
    experience = value.get("experience_pipeline") or {}
    return not value.get("task_pipeline") and not (isinstance(experience, Mapping) and experience.get("operators"))


_STORAGE_KEYS: dict[str, Answer] = {
    "wrap_in_ray": Ignored(NO_RAY),
    "ray_namespace": Ignored(NO_RAY),
    "max_retry_times": Ignored(NO_SQL),
    "max_retry_interval": Ignored(NO_SQL),
    **{k: Ignored(SET_BY_TRINITY + "; rfthpc derives what it needs") for k in (
        "schema_type", "is_eval", "batch_size", "tokenizer_path", "total_steps")},
    "mm_data_kwargs": Refused(MULTIMODAL, _off),
    "format.image_key": Refused(MULTIMODAL, _off),
    "format.video_key": Refused(MULTIMODAL, _off),
    "format.tools_key": Refused(
        "rfthpc passes no tool definitions to the chat template (toolcall_workflow reads its `tools` column itself); "
        "remove it", _is("tools"),
        "Trinity-RFT's default column of tool definitions; rfthpc passes none to the chat template "
        "(toolcall_workflow reads `tools` itself)"),
    "format.enable_concatenated_multi_turn": Ignored(
        "rfthpc trains on every assistant turn of a chat (Trinity-RFT's `true`); with one assistant turn per row, "
        "as in most SFT data, both values are the same"),
}

TRINITY_KEYS: dict[str, Answer] = {
    "ray_namespace": Ignored(NO_RAY),
    "cluster.ray_address": Ignored(NO_RAY),
    "synchronizer.ray_namespace": Ignored(NO_RAY),
    "monitor.enable_ray_timeline": Ignored(NO_RAY),
    "group": Refused(f"Trinity-RFT's run directory is <checkpoint_root_dir>/<project>/<group>/<name>, but {RUN_DIR}: "
                     "fold the group into `project` or `name`", _off),
    "checkpoint_job_dir": Ignored(f"{SET_BY_TRINITY}; {RUN_DIR}"),
    "log": Ignored("rfthpc writes each role's log to <run dir>/log/ (Slurm stdout/stderr); the level is not "
                   "configurable"),
    "data_processor": Refused("Trinity-RFT's data pipelines (task and experience operators, Data-Juicer) are not "
                              "part of rfthpc: prepare the dataset beforehand", _no_pipeline),
    "service": Refused("Trinity-RFT's Data-Juicer service is not part of rfthpc: prepare the dataset beforehand",
                       lambda v, g: not v or (isinstance(v, Mapping) and not v.get("data_juicer"))),
    "model.lora_configs.base_model_name": Ignored(
        "the base model's name in Trinity-RFT's OpenAI API server; rfthpc serves the adapter to its own explorers"),
    "model.lora_configs.is_dummy": Ignored(SET_BY_TRINITY),
    **{f"model.{k}": Ignored("how vLLM serves many adapters; rfthpc's explorers serve the one adapter being trained")
       for k in ("fully_sharded_loras", "max_cpu_loras")},
    "algorithm.sample_strategy_args": Refused(
        "arguments of Trinity-RFT's experience sample strategies; rfthpc trains on experience in commit order within "
        "the staleness bound (synchronizer.max_staleness): remove it", _off),
    "algorithm.use_token_level_loss": Refused(
        "an older Trinity-RFT switch of the SFT loss: set algorithm.loss_agg_mode (token-mean for true, "
        "seq-mean-token-mean for false)", _is(True),
        "an older Trinity-RFT switch of the SFT loss; true is token-mean, the default of algorithm.loss_agg_mode"),
    **{f"buffer.{k}": Ignored(SET_BY_TRINITY + "; rfthpc derives what it needs") for k in (
        "explorer_output", "tokenizer_path", "pad_token_id", "cache_dir")},
    "buffer.max_retry_times": Ignored(NO_SQL),
    "buffer.max_retry_interval": Ignored(NO_SQL),
    "buffer.trainer_input.sft_warmup_dataset": Refused(
        "use `stages:` with an sft_warmup stage (Trinity-RFT's current form)", _off),
    "buffer.trainer_input.sft_warmup_steps": Refused(
        "use `stages:` with an sft_warmup stage (Trinity-RFT's current form)", _off),
    "buffer.trainer_input.auxiliary_buffers": Refused(
        "rfthpc trains each stage on one experience buffer; to train on an SFT dataset too, run it as a stage of its "
        "own (`stages:`)", _off),
    **{_TASKSET + k: v for k, v in _STORAGE_KEYS.items()},
    _TASKSET + "index": Refused("Trinity-RFT's resume position in the taskset; rfthpc resumes task claims from the "
                                "run directory: remove it (to skip tasks, drop them from the dataset)", _off),
    **{_TASKSET + k: Ignored("a setting of experience queues, which a taskset is not") for k in (
        "capacity", "max_read_timeout", "use_priority_queue", "reuse_cooldown_time", "replay_buffer",
        "replay_buffer_kwargs")},
    _TASKSET + "rollout_args.n": Ignored("the responses per task are algorithm.repeat_times (Trinity-RFT overrides n "
                                         "with it too)"),
    **{_EXPERIENCE + k: v for k, v in _STORAGE_KEYS.items()},
    _EXPERIENCE + "index": Ignored(SET_BY_TRINITY + "; rfthpc derives what it needs"),
    _EXPERIENCE + "total_epochs": Ignored(f"{SET_BY_TRINITY} from buffer.total_epochs"),
    _EXPERIENCE + "enable_progress_bar": Ignored("a progress bar of Trinity-RFT's dataset reader"),
    **{_EXPERIENCE + k: Refused(OLD_REPLAY, _off) for k in ("use_priority_queue", "reuse_cooldown_time")},
    _EXPERIENCE + "replay_buffer_kwargs": Refused(OLD_REPLAY, _unless("use_priority_queue")),
    "explorer.runner_num": Ignored("deprecated in Trinity-RFT, which warns and uses explorer.runner_per_model"),
    **{f"explorer.{k}": Ignored(SERVE) for k in (
        "api_port", "listen_address", "service_status_check_interval", "min_running_model_num")},
    _ROLLOUT + "enable_openai_api": Ignored(OPENAI_SERVER),
    _ROLLOUT + "enable_auto_tool_choice": Ignored(OPENAI_SERVER),
    _ROLLOUT + "tool_call_parser": Ignored(OPENAI_SERVER),
    _ROLLOUT + "reasoning_parser": Ignored(OPENAI_SERVER),
    _ROLLOUT + "enable_history": Ignored("workflows receive their completions directly; there is no history to "
                                         "record"),
    _ROLLOUT + "ignore_eos": Refused("generation past the end-of-sequence token (Trinity-RFT: for testing long "
                                     "responses) is not available; remove it", _off),
    _ROLLOUT + "bundle_indices": Ignored(SET_BY_TRINITY + "; rfthpc derives what it needs"),
    **{_ROLLOUT + k: Ignored(f"{SET_BY_TRINITY} from model.lora_configs") for k in (
        "enable_lora", "lora_modules", "lora_kwargs")},
    **{_ROLLOUT + k: Ignored(f"{SET_BY_TRINITY} from model.*; sampling is model.temperature / top_p / top_k / "
                             "logprobs and each taskset's rollout_args")
       for k in ("temperature", "top_p", "top_k", "logprobs")},
    _ROLLOUT + "min_response_tokens": Ignored(f"{SET_BY_TRINITY} from model.min_response_tokens, which rfthpc reads"),
    "trainer.enable_preview": Ignored("a rollout preview in wandb; rfthpc keeps every rollout in its experience "
                                      "store (`rfthpc store inspect|export`)"),
    "trainer.fix_actor_microbatch_loss_scale": Refused(
        "Trinity-RFT's experimental loss scaling; rfthpc aggregates the loss over each whole mini-batch "
        "(algorithm.loss_agg_mode), however it is cut into micro-batches: remove it", _off),
    "trainer.save_strategy": Ignored("how Trinity-RFT's processes take turns at saving; each rfthpc role writes its "
                                     "own files"),
    "synchronizer.wait_for_checkpoint": Ignored("unused in Trinity-RFT; rfthpc's explorers always wait for a complete "
                                                "published policy"),
    "synchronizer.explorer_world_size": Ignored(f"{SET_BY_TRINITY}; explorers never join the trainer's process group "
                                                "in rfthpc"),
    "monitor.cache_dir": Ignored(f"{SET_BY_TRINITY}; metrics go to <run dir>/monitor/"),
    _ROLLOUT + "enable_log_requests": Ignored("vLLM's log line for every request it receives; rfthpc's explorers log "
                                              "each batch (log/, monitor/) and keep every rollout in the experience "
                                              "store (`rfthpc store inspect|export`)"),
    "model.tinker": Refused(TINKER, _nothing_enabled),
    "model.external_model": Refused(NO_EXTERNAL_MODEL, _nothing_enabled),
    "algorithm.bypass_old_logprobs": Refused(
        OLD_LOGPROBS, _old_logprobs_as_the_loss_reads,
        "the policy loss already reads the log-probabilities it asks for (the behaviour policy's for true, ones "
        "recomputed at the start of the step for false)"),
}
"""Trinity-RFT keys rfthpc does not have, by their path in a config (a taskset's as `taskset`'s, an
auxiliary model's as `rollout_model`'s, a stage's as the run's)."""


TRINITY_MODES: dict[str, Refused] = {
    "bench": Refused(
        "Trinity-RFT's benchmark mode (evaluating a model, or each saved checkpoint, on the eval tasksets without "
        "training) is not in rfthpc, which evaluates inside a run: rank 0 of the explorers evaluates "
        "buffer.explorer_input.eval_tasksets on start-up (explorer.eval_on_startup), every explorer.eval_interval "
        "policy versions and on the final policy; to score a model, start a run from it (model.model_path, a "
        "training taskset) and read eval/* at policy version 0"),
    "serve": Refused(f"{SERVE} (Trinity-RFT's explorer serving the policy to outside agents through an OpenAI API); "
                     "rfthpc's workflows run inside its explorers (module:function workflows for agents)"),
}
"""Trinity-RFT's values of `mode` that rfthpc does not have (its modes: both, explore, train)."""


def trinity_key(path: str) -> str:
    """The key under which TRINITY_KEYS holds the config key at `path`."""
    path = re.sub(r"^stages\[\d+\]\.", "", path)
    path = re.sub(r"^buffer\.explorer_input\.(eval_)?tasksets\[\d+\]", "buffer.explorer_input.taskset", path)
    return re.sub(r"^explorer\.auxiliary_models\[\d+\]", "explorer.rollout_model", path)


# ---- veRL (under trainer.trainer_config) ----------------------------------------------------------

MEGATRON = "rfthpc trains with FSDP2 only (no Megatron-LM parallelism): remove it, or set fsdp / fsdp2"
FSDP2 = "rfthpc always trains with FSDP2 (veRL's fsdp and fsdp2 strategies give the same results)"
SPEED = "a speed or memory switch of veRL's; rfthpc computes the same values its own way"
FSDP_MECHANICS = "how veRL wraps and shards the model with FSDP; rfthpc shards with FSDP2 its own way, to the same results"
MEGATRON_OPTIM = ("a Megatron-LM optimizer setting; rfthpc's schedule is algorithm.optimizer (lr_scheduler_type "
                  "constant or cosine, lr_warmup_steps, min_lr_ratio)")
CRITIC_OPTIM = ("the critic's optimizer takes algorithm.optimizer's settings; only its learning rate "
                "(trainer.critic_lr) and warm-up ratio (trainer.critic_lr_warmup_steps_ratio) are its own")
SP_OF_ACTOR = ("every model the trainer runs splits its sequences as the actor does "
               "(trainer.ulysses_sequence_parallel_size); the split changes no number, only memory and speed")
SET_BY_TRINITY_VERL = "Trinity-RFT sets it from its own sections; rfthpc reads those"
MTP = ("multi-token prediction (MTP layers trained and used for speculative decoding) is not in rfthpc; remove "
       "it")
REWARD_MANAGER = ("veRL's reward managers: rfthpc scores each response with the taskset's reward function "
                  "(default_reward_fn_type; math_dapo_reward for veRL's dapo)")
_FSDP_STRATEGY = _is("fsdp", "fsdp2")
_MODEL_SECTIONS = ("actor_rollout_ref.model", "critic.model")


def _model_keys(prefix: str) -> dict[str, Answer]:
    return {
        f"{prefix}.external_lib": Refused("a module veRL imports to register model classes; rfthpc loads models with "
                                          "transformers' Auto classes: remove it", _off),
        **{f"{prefix}.{key}": Refused("changes the model's Hugging Face config before training; rfthpc trains the "
                                      "model as its config.json says: edit a copy of the model instead", _off)
           for key in ("override_config", "override_config.*")},
        f"{prefix}.trust_remote_code": Refused("rfthpc loads models without remote code (transformers' own model "
                                               "classes): remove it", _off),
        f"{prefix}.use_shm": Ignored("veRL copies the model to /dev/shm first; rfthpc reads it from its path"),
        f"{prefix}.enable_activation_offload": Refused(
            "activation offload is not in rfthpc: use trainer.enable_gradient_checkpointing, trainer.param_offload / "
            "optimizer_offload, or a smaller trainer.max_token_len_per_gpu", _off),
        f"{prefix}.lora.rank": Refused(
            "veRL's LoRA settings of its Megatron workers; rfthpc trains with FSDP2, where veRL's keys are "
            "lora_rank, lora_alpha and target_modules (read as model.lora): set those instead", _off),
        f"{prefix}.lora.*": Ignored("a setting of veRL's Megatron LoRA, read only with lora.rank > 0"),
        f"{prefix}.hf_config_path": Refused("rfthpc reads the model's config from its path: copy it there", _off),
        f"{prefix}.use_fused_kernels": Ignored(SPEED),
        f"{prefix}.fused_kernel_options.*": Ignored(SPEED),
        f"{prefix}.use_liger": Ignored(SPEED),
        f"{prefix}.tiled_mlp.*": Ignored(SPEED),
        f"{prefix}.mtp.enable": Refused(MTP, _off),
        f"{prefix}.mtp.*": Ignored("read only with mtp.enable"),
    }


def _fsdp_keys(prefix: str) -> dict[str, Answer]:
    return {
        **{f"{prefix}.fsdp_config.{k}": Ignored(FSDP_MECHANICS) for k in (
            "wrap_policy.*", "fsdp_size", "forward_prefetch", "reshard_after_forward", "use_orig_params", "seed",
            "forward_only", "use_torch_compile", "entropy_from_logits_with_chunking", "entropy_checkpointing")},
        f"{prefix}.fsdp_config.strategy": Refused(MEGATRON, _FSDP_STRATEGY, FSDP2),
        f"{prefix}.fsdp_config.offload_policy": Refused("FSDP2's CPU offload policy: set trainer.param_offload / "
                                                        "optimizer_offload", _off),
        f"{prefix}.fsdp_config.model_dtype": Refused("rfthpc keeps float32 master weights (veRL's fp32)",
                                                     _is("fp32", "float32")),
        f"{prefix}.fsdp_config.dtype": Refused("rfthpc computes in model.dtype (bfloat16 on GPUs by default): set "
                                               "model.dtype", _is("bfloat16", "bf16")),
        f"{prefix}.fsdp_config.mixed_precision.param_dtype": Refused(
            "rfthpc computes in model.dtype (bfloat16 on GPUs by default): set model.dtype", _is("bfloat16", "bf16")),
        **{f"{prefix}.fsdp_config.mixed_precision.{k}": Refused(
            "rfthpc reduces gradients and keeps buffers in float32 (veRL's default)", _is("float32", "fp32"))
           for k in ("reduce_dtype", "buffer_dtype")},
        f"{prefix}.fsdp_config.full_determinism": Refused("rfthpc does not force deterministic kernels; remove it",
                                                          _off),
    }


def _optim_keys(prefix: str) -> dict[str, Answer]:
    return {
        f"{prefix}.optim.total_training_steps": Ignored("set by veRL and Trinity-RFT at run time; rfthpc's schedule "
                                                        "spans buffer.total_steps"),
        f"{prefix}.optim.optimizer": Refused("rfthpc's optimizer is AdamW: remove it", _is("adamw", "adam")),
        f"{prefix}.optim.optimizer_impl": Refused("rfthpc's optimizer is torch's AdamW: remove it", _is("torch.optim")),
        f"{prefix}.optim.num_cycles": Refused("rfthpc's cosine schedule decays once (veRL's num_cycles 0.5)", _is(0.5)),
        f"{prefix}.optim.override_optimizer_config": Refused("rfthpc's AdamW takes algorithm.optimizer's settings "
                                                             "only", _off),
        **{f"{prefix}.optim.{k}": Refused(MEGATRON_OPTIM, _is(*ok)) for k, ok in (
            ("lr_warmup_init", (0, 0.0)), ("lr_decay_steps", (None,)), ("lr_decay_style", ("constant",)),
            ("min_lr", (0, 0.0)), ("weight_decay_incr_style", ("constant",)),
            ("lr_wsd_decay_style", ("exponential",)), ("lr_wsd_decay_steps", (None,)),
            ("use_checkpoint_opt_param_scheduler", (False,)))},
    }


_A = "actor_rollout_ref.actor."
_C = "critic."

VERL_KEYS: dict[str, Answer] = {
    "actor_rollout_ref.hybrid_engine": Ignored("veRL colocates rollout and training; rfthpc's explorers and trainer "
                                               "are separate Slurm jobs by design"),
    "actor_rollout_ref.nccl_timeout": Ignored("the timeout of veRL's process groups; rfthpc's trainer and explorers "
                                              "share none"),
    "actor_rollout_ref.synchronizer*": Ignored(SET_BY_TRINITY_VERL),
    "actor_rollout_ref.explorer_name": Ignored(SET_BY_TRINITY_VERL),
    "actor_rollout_ref.rollout.*": Ignored("rollouts are configured under explorer.rollout_model and each taskset's "
                                           "rollout_args (as in Trinity-RFT)"),
    "actor_rollout_ref.ref.strategy": Ignored(FSDP2),
    "actor_rollout_ref.ref.*": Ignored("the reference model runs inside rfthpc's trainer, sharded and batched like "
                                       "the actor (trainer.*)"),
    "actor_rollout_ref.model.tokenizer_path": Refused("rfthpc reads the tokenizer from model.model_path: copy it "
                                                      "there", _off),
    **_model_keys("actor_rollout_ref.model"),
    **_model_keys("critic.model"),
    "critic.model.lora_rank": Refused(CRITIC_LORA, _off),
    "critic.model.lora_adapter_path": Refused(CRITIC_LORA, _off),
    **{f"critic.model.{k}": Ignored("a LoRA setting, read only with lora_rank > 0") for k in (
        "lora_alpha", "target_modules", "exclude_modules")},
    _A + "strategy": Refused(MEGATRON, _FSDP_STRATEGY, FSDP2),
    _A + "ppo_micro_batch_size": Refused("veRL's deprecated global micro-batch size: set "
                                         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu (rfthpc's "
                                         "trainer.ppo_micro_batch_size_per_gpu)", _off),
    _A + "shuffle": Refused("veRL shuffles a batch before cutting it into mini-batches; rfthpc keeps the order "
                            "experience was committed in: remove it", _off),
    _A + "data_loader_seed": Ignored("the seed of veRL's mini-batch shuffle (actor.shuffle), which rfthpc does not do"),
    _A + "use_torch_compile": Ignored(SPEED),
    _A + "use_fused_kernels": Ignored(SPEED),
    _A + "entropy_from_logits_with_chunking": Ignored(SPEED),
    _A + "entropy_checkpointing": Ignored(SPEED),
    _A + "calculate_entropy": Ignored("a switch of veRL's entropy metric; it changes no update"),
    _A + "calculate_sum_pi_squared": Ignored("a switch of one of veRL's metrics; it changes no update"),
    _A + "sum_pi_squared_checkpointing": Ignored(SPEED),
    _A + "use_prefix_grouper": Ignored("rfthpc shares each prompt's forward pass among its responses with "
                                       "trainer.share_prompt_forward (on by default), to the same results"),
    _A + "rollout_n": Ignored("the responses per task are algorithm.repeat_times"),
    _A + "freeze_vision_tower": Refused(MULTIMODAL, _off),
    _A + "router_replay.*": Refused("MoE router replay is not in rfthpc; remove it", _is(None, "disabled", False)),
    _A + "load_weight": Refused("rfthpc always starts from the weights in model.model_path; remove it", _is(True)),
    _A + "checkpoint.*": Ignored("rfthpc's checkpoints always hold model, optimizer and extra state; a merged Hugging "
                                 "Face copy is trainer.save_hf_checkpoint"),
    _A + "megatron.*": Ignored("Megatron-LM settings, read only with strategy megatron, which rfthpc refuses"),
    _A + "profile*": Ignored("profiling of veRL's workers"),
    **_fsdp_keys("actor_rollout_ref.actor"),
    **_optim_keys("actor_rollout_ref.actor"),
    _C + "strategy": Refused(MEGATRON, _FSDP_STRATEGY, FSDP2),
    _C + "enable": Ignored("rfthpc trains a critic when algorithm.advantage_fn needs one (gae, ppo)"),
    _C + "rollout_n": Ignored("the responses per task are algorithm.repeat_times"),
    _C + "model.tokenizer_path": Ignored(f"{SET_BY_TRINITY_VERL}: the critic's tokenizer is read from "
                                         "model.critic_model_path"),
    **_fsdp_keys("critic.model"),
    **_optim_keys("critic"),
    _C + "optim.lr_scheduler_type": Refused("the critic's learning rate is constant after its warm-up "
                                            "(trainer.critic_lr, trainer.critic_lr_warmup_steps_ratio)",
                                            _is(None, "constant")),
    _C + "optim.warmup_style": Refused("the critic's learning rate is constant after its warm-up (trainer.critic_lr, "
                                       "trainer.critic_lr_warmup_steps_ratio)", _is(None, "constant")),
    _C + "optim.min_lr_ratio": Ignored("read only by a cosine schedule; the critic's is constant"),
    _C + "optim.lr_warmup_steps": Refused("the critic's warm-up is trainer.critic_lr_warmup_steps_ratio",
                                          _is(None, -1)),
    _C + "optim.weight_decay": Refused(CRITIC_OPTIM, _same_as(_A + "optim.weight_decay", 0.01)),
    _C + "optim.betas": Refused(CRITIC_OPTIM, _same_as(_A + "optim.betas", [0.9, 0.999])),
    _C + "optim.clip_grad": Refused(CRITIC_OPTIM, _same_as(_A + "grad_clip", 1.0)),
    _C + "grad_clip": Refused("the critic's gradient clip is the actor's (trainer.grad_clip)",
                              _same_as(_A + "grad_clip", 1.0)),
    _C + "ppo_micro_batch_size": Refused("veRL's deprecated global micro-batch size: set "
                                         "critic.ppo_micro_batch_size_per_gpu", _off),
    _C + "ppo_mini_batch_size": Ignored("the critic is updated on the actor's mini-batches "
                                        "(trainer.ppo_mini_batch_size); Trinity-RFT sets it so too"),
    _C + "ppo_epochs": Refused("the critic makes as many passes as the actor (trainer.ppo_epochs)",
                               _same_as(_A + "ppo_epochs", 1)),
    _C + "loss_agg_mode": Refused("the critic's loss is aggregated like the actor's (algorithm.loss_agg_mode)",
                                  _same_as(_A + "loss_agg_mode", "token-mean")),
    _C + "cliprange_value": Refused("rfthpc's value loss clips at 0.5 (veRL's default)", _is(0.5)),
    _C + "ulysses_sequence_parallel_size": Ignored(SP_OF_ACTOR),
    _C + "model.fsdp_config.ulysses_sequence_parallel_size": Ignored(SP_OF_ACTOR),
    _C + "shuffle": Refused("veRL shuffles a batch before cutting it into mini-batches; rfthpc keeps the order "
                            "experience was committed in: remove it", _off),
    _C + "data_loader_seed": Ignored("the seed of veRL's mini-batch shuffle, which rfthpc does not do"),
    **{_C + k: Ignored("the critic is trained in the actor's micro-batches (trainer.ppo_micro_batch_size_per_gpu, "
                       "use_dynamic_bsz, max_token_len_per_gpu)") for k in (
        "use_dynamic_bsz", "ppo_max_token_len_per_gpu", "forward_max_token_len_per_gpu", "forward_micro_batch_size",
        "forward_micro_batch_size_per_gpu")},
    _C + "checkpoint.*": Ignored("rfthpc's checkpoints always hold model, optimizer and extra state"),
    _C + "megatron.*": Ignored("Megatron-LM settings, read only with strategy megatron, which rfthpc refuses"),
    _C + "load_weight": Refused("rfthpc always starts the critic from model.critic_model_path; remove it", _is(True)),
    _C + "profile*": Ignored("profiling of veRL's workers"),
    "algorithm.use_pf_ppo": Refused("veRL's preference-feedback PPO reweighting is not in rfthpc; remove it", _off),
    "algorithm.pf_ppo.*": Ignored("read only with algorithm.use_pf_ppo"),
    "algorithm.filter_groups.max_inflight_gen_batches": Ignored("rfthpc's explorers generate asynchronously anyway"),
    "reward_model.enable": Refused(
        "veRL's reward-model worker: rfthpc scores in the explorer; serve the reward model as an auxiliary model "
        "(explorer.auxiliary_models) and score with math_rm_workflow or a reward function", _off),
    "reward_model.reward_manager": Refused(REWARD_MANAGER, _is("naive")),
    "reward_manager.name": Refused(REWARD_MANAGER, _is("naive")),
    "reward_manager.source": Ignored("where veRL looks up its reward manager (its registry or a module)"),
    "reward_manager.module.path": Refused(REWARD_MANAGER + "; to score your own way, name your reward function "
                                                           "(module:function)", _off),
    "reward_manager.module.name": Ignored("read only with reward_manager.module.path"),
    "reward_model.overlong_buffer.log": Ignored("rfthpc always records the overlong penalty"),
    "reward_model.reward_kwargs.overlong_buffer_cfg.log": Ignored("rfthpc always records the overlong penalty"),
    "reward.reward_kwargs.overlong_buffer_cfg.log": Ignored("rfthpc always records the overlong penalty"),
    "reward_model.*": Ignored("a setting of veRL's reward-model worker, read only with reward_model.enable"),
    **{f"custom_reward_function.{k}": Refused(
        "a reward function is the taskset's default_reward_fn_type in rfthpc; a veRL function of yours is "
        "verl_reward with reward_fn_args {compute_score: file.py:name} (rfthpc config import --from verl sets it)",
        harmless) for k, harmless in (("path", _off), ("name", _unless("custom_reward_function.path")))},
    "data.*": Ignored("veRL's data section (Trinity-RFT ignores it too); tasks come from "
                      "buffer.explorer_input.tasksets (data.train_files: tasksets[i].path; data.max_prompt_length: "
                      "model.max_prompt_tokens; data.train_batch_size: buffer.batch_size prompts per step)"),
    "trainer.balance_batch": Ignored("veRL reorders a batch to even out tokens across GPUs; rfthpc packs "
                                     "micro-batches by token count (trainer.use_dynamic_bsz), to the same update"),
    "trainer.total_epochs": Ignored("Trinity-RFT sets it too; epochs are buffer.total_epochs"),
    "trainer.total_training_steps": Ignored("Trinity-RFT sets it too; steps are buffer.total_steps"),
    "trainer.project_name": Ignored(f"Trinity-RFT sets it from `project`; {RUN_DIR}"),
    "trainer.experiment_name": Ignored(f"Trinity-RFT sets it from `name`; {RUN_DIR}"),
    "trainer.group_name": Ignored(f"Trinity-RFT sets it from `group`; {RUN_DIR}"),
    "trainer.default_local_dir": Ignored(f"Trinity-RFT sets it to its run directory; {RUN_DIR}"),
    "trainer.logger": Ignored("metrics sinks are monitor.monitor_type (console, wandb, tensorboard)"),
    **{f"trainer.{k}": Ignored("rfthpc keeps every generation in its experience store (`rfthpc store export`)")
       for k in ("log_val_generations", "val_generations_to_log_to_wandb", "rollout_data_dir", "validation_data_dir")},
    "trainer.nnodes": Ignored("Trinity-RFT sets it from `cluster`; the trainer's GPUs follow cluster and "
                              "slurm.trainer"),
    "trainer.n_gpus_per_node": Ignored("Trinity-RFT sets it from `cluster`; the trainer's GPUs follow cluster and "
                                       "slurm.trainer"),
    "trainer.save_freq": Ignored("Trinity-RFT sets it from trainer.save_interval, which rfthpc reads"),
    "trainer.test_freq": Ignored("evaluation runs every explorer.eval_interval policy versions"),
    "trainer.val_before_train": Ignored("evaluation on start-up is explorer.eval_on_startup"),
    "trainer.val_only": Refused("rfthpc has no evaluation-only mode; remove it", _off),
    "trainer.resume_mode": Ignored("Trinity-RFT sets it from continue_from_checkpoint, which rfthpc reads"),
    "trainer.resume_from_path": Refused("rfthpc resumes from the newest checkpoint in its run directory "
                                        "(continue_from_checkpoint); to start from another model, set "
                                        "model.model_path",
                                        lambda v, g: not v or g.get("trainer.resume_mode", "auto") != "resume_path",
                                        "read only with trainer.resume_mode: resume_path"),
    "trainer.default_hdfs_dir": Refused("rfthpc writes checkpoints to the run directory only; copy them elsewhere "
                                        "after the run", _off),
    "trainer.del_local_ckpt_after_load": Refused("rfthpc never deletes a checkpoint it resumes from; remove it", _off),
    "trainer.max_critic_ckpt_to_keep": Refused(
        "rfthpc saves actor and critic in one checkpoint (global_step_N/), kept by trainer.max_checkpoints_to_keep "
        "(veRL's max_actor_ckpt_to_keep)", _same_as("trainer.max_actor_ckpt_to_keep", None)),
    "trainer.esi_redundant_time": Ignored("an elastic-instance setting; rfthpc saves when Slurm signals the end of a "
                                          "job (slurm.signal_delay_s)"),
    "trainer.ray_wait_register_center_timeout": Ignored(NO_RAY),
    "trainer.device": Ignored("the trainer runs on the GPUs Slurm gives it (or the CPU, in `rfthpc run`'s demo)"),
    "trainer.use_legacy_worker_impl": Ignored("chooses between veRL's worker implementations"),
    **{f"trainer.{k}": Ignored(SET_BY_TRINITY_VERL) for k in ("training_rollout_mode", "enable_exp_buffer",
                                                              "sync_freq")},
    "global_profiler.*": Ignored("profiling of veRL's workers"),
    "transfer_queue.*": Ignored("veRL's transfer queue; rfthpc's roles exchange data through the run directory"),
    "ray_kwargs.*": Ignored(NO_RAY),
    "synchronizer*": Ignored(SET_BY_TRINITY_VERL),
    "buffer*": Ignored(SET_BY_TRINITY_VERL),
    "enable_preview": Ignored(SET_BY_TRINITY_VERL),
}
"""veRL keys (their paths under trainer.trainer_config) that VERL_MAP does not map. Trinity-RFT's own
veRL config adds some (`synchronizer`, `buffer`, `enable_preview`, Megatron-style optimizer keys)."""


# ---- ROLL (top level, and its role sections) ------------------------------------------------------

ROLL_PLACEMENT = ("ROLL's placement of roles on GPUs; rfthpc's roles are Slurm jobs sized by cluster, "
                  "explorer.rollout_model.engine_num and slurm.*")
ROLL_REWARDS = ("ROLL's reward workers: rfthpc scores in the explorer with the taskset's reward function "
                "(default_reward_fn_type; module:function for your own) and, for a model judge, an auxiliary model "
                "(explorer.auxiliary_models)")
ROLL_DATA = ("ROLL's dataset settings: give the data as buffer.explorer_input.tasksets (path, split, format.prompt_key "
             "or messages_key)")
ROLL_TEMPLATE = ("rfthpc formats prompts with the model's own chat template (model.custom_chat_template or "
                 "chat_template_path to change it)")
ROLL_SEED = ("ROLL's global seed; rfthpc seeds the rollout engine (explorer.rollout_model.seed) and the task order "
             "(task_selector.seed), both 42 by default")
ROLL_ADVANTAGE_NORM = ("rfthpc's advantage functions normalise their own way; ROLL's reward and advantage normalisation "
                       "is algorithm.advantage_fn: lite_ppo with advantage_fn_args norm_mean_type / norm_std_type "
                       "(group, batch or null)")
ROLL_RLVR = "a sample weighting or mask of ROLL's RLVR pipeline, not in rfthpc; remove it"
ROLL_LOSS = ("a policy-loss variant of ROLL's RLVR pipeline: choose rfthpc's with algorithm.policy_loss_fn (ppo, topr, "
             "tis, cispo, ...)")
ROLL_OPD = "ROLL's on-policy distillation is not in rfthpc; remove it"
ROLL_TRAIN_STRATEGY = ("rfthpc trains with FSDP2 (ROLL's fsdp2_train; DeepSpeed gives the same results); Megatron-LM's "
                       "parallelism is not in rfthpc: remove it")
ROLL_SPEED = "a speed or memory switch of ROLL's; rfthpc computes the same values its own way"
ROLL_OUTPUT = f"{RUN_DIR}, with checkpoints, logs (log/) and metrics (monitor/) in it"
ROLL_SCHEDULING = ("scheduling of ROLL's generation; rfthpc's explorers batch their engine requests themselves "
                   "(explorer.runner_per_model)")

ROLL_SECTIONS = ("actor_train", "actor_infer", "critic", "reference")
"""ROLL's role sections read key by key; every other ROLL key is answered as a whole."""

ROLL_KEYS: dict[str, Answer] = {
    "hydra": Ignored("Hydra's own settings (ROLL starts through Hydra)"),
    "seed": Refused(ROLL_SEED + ": set those instead", _is(42), ROLL_SEED),
    "rpc_timeout": Ignored(NO_RAY),
    "local_rank": Ignored("set by ROLL's launcher"),
    **{k: Ignored(ROLL_OUTPUT) for k in ("output_dir", "base_dir", "logging_dir", "checkpoint_config")},
    **{k: Ignored("profiling and dumps of ROLL's; rfthpc keeps every generation in its experience store") for k in (
        "rollout_dump_dir", "save_logging_board_dir", "length_profiler_dir", "profiler_output_dir", "otlp_output_dir",
        "profiler_timeline", "profiler_memory", "report_length_and_rewards")},
    "tracker_kwargs": Ignored("arguments of ROLL's tracker; rfthpc's wandb arguments are monitor.monitor_args"),
    "logging_steps": Ignored("every rfthpc role records its metrics every step"),
    "val_batch_size": Ignored("an evaluation runs each eval taskset whole"),
    "val_prompt_length": Ignored("evaluation uses the model's limits (model.max_prompt_tokens, max_model_len)"),
    "val_sequence_length": Ignored("evaluation uses the model's limits (model.max_prompt_tokens, max_model_len)"),
    "is_offload_states": Ignored("ROLL offloads a role's state when roles share GPUs; rfthpc's roles are separate "
                                 "Slurm jobs"),
    "is_offload_optimizer_states_in_train_step": Ignored("ROLL offloads a role's state when roles share GPUs; "
                                                         "rfthpc's roles are separate Slurm jobs"),
    "model_update_buffer_size_mb": Ignored("weights reach the explorers through <run dir>/weights/"),
    "transfer_backend": Ignored("weights reach the explorers through <run dir>/weights/"),
    "model_download_type": Ignored("rfthpc reads models from local paths (compute nodes have no internet)"),
    **{k: Ignored(ROLL_SCHEDULING) for k in ("generate_opt_level", "is_num_return_sequences_expand",
                                             "max_running_requests", "max_additional_running_prompts",
                                             "router_args")},
    "is_use_additional_prompts": Refused("ROLL fills a batch with extra prompts when filtering drops some; rfthpc's "
                                         "dynamic sampling is algorithm.filter_groups", _off),
    "user_defined_rollout_loop_cls": Refused(
        "rfthpc's rollout of a task is the taskset's workflow (default_workflow_type, or module:function)",
        lambda v, g: not v or str(v).startswith("roll.distributed.scheduler.user_defined_rollout_loop")),
    "rollout_mock": Refused("ROLL's mocked rollouts are not in rfthpc; remove it", _nothing_enabled),
    "reward_pretrain": Refused(ROLL_REWARDS, _off),
    **{k: Refused(ROLL_REWARDS, _off) for k in ("reward", "rewards", "reward_model")},
    "validation": Refused("evaluation data are buffer.explorer_input.eval_tasksets", _off),
    "dataset_filter": Refused("ROLL's difficulty filter of the dataset: filter the dataset beforehand",
                              lambda v, g: not v or (isinstance(v, Mapping) and not v.get("source")
                                                     and not v.get("num_samples"))),
    "system_envs": Refused("environment variables: export them in the shell that submits (the roles inherit it), or "
                           "set explorer.env_vars for the explorers", _off),
    "global_template": Refused(ROLL_TEMPLATE, _off),
    "tag_to_template": Refused(ROLL_TEMPLATE, _off),
    "l2": Refused("ROLL's L2 penalty is not in rfthpc (AdamW's weight decay is algorithm.optimizer.weight_decay)",
                  _off),
    "use_pg_clip_range": Refused("set algorithm.policy_loss_fn_args clip_range_low / clip_range_high", _off),
    "pg_clip_low": Refused("set algorithm.policy_loss_fn_args.clip_range_low", _unless("use_pg_clip_range"),
                           "read only with use_pg_clip_range: true"),
    "pg_clip_high": Refused("set algorithm.policy_loss_fn_args.clip_range_high", _unless("use_pg_clip_range"),
                            "read only with use_pg_clip_range: true"),
    "value_clip": Refused("rfthpc's value loss clips at 0.5", _is(None, 0.5)),
    "target_kl": Refused("ROLL's adaptive KL controller: set algorithm.kl_penalty_fn_args adaptive: true, target_kl "
                         "and horizon", _off),
    "kl_horizon": Ignored("read only by ROLL's adaptive KL controller (target_kl)"),
    "dual_clip_loss": Refused(
        "ROLL's dual clip bounds the loss at 1 + 2 x pg_clip: set algorithm.policy_loss_fn_args.clip_ratio_c to that",
        _is(False), "rfthpc's ppo loss dual-clips negative advantages at policy_loss_fn_args.clip_ratio_c (3, "
                    "veRL's rule)"),
    **{k: Refused("rfthpc passes rewards to the advantage function as the reward function gives them; remove it",
                  _off) for k in ("use_reward_scaling", "use_reward_norm", "whiten_rewards", "add_len_reward",
                                  "reward_clip")},
    "advantage_clip": Refused("rfthpc does not clip advantages; remove it", _off),
    "whiten_advantages": Refused(ROLL_ADVANTAGE_NORM, _off),
    "norm_mean_type": Refused(ROLL_ADVANTAGE_NORM, _off),
    "norm_std_type": Refused(ROLL_ADVANTAGE_NORM, _off),
    "enable_reference": Ignored("rfthpc runs the reference model whenever a KL term needs it"),
    "enable_old_logprobs_recompute": Ignored("rfthpc's policy loss decides which log-probabilities it reads "
                                             "(algorithm.policy_loss_fn)"),
    "force_disable_old_logprobs_recompute": Ignored("rfthpc's policy loss decides which log-probabilities it reads "
                                                    "(algorithm.policy_loss_fn)"),
    "train_infer_correction": Refused("ROLL's train-inference correction: rfthpc's is algorithm.rollout_correction "
                                      "(veRL's keys)", _nothing_enabled),
    **{k: Refused(ROLL_RLVR, _off) for k in ("difficulty_loss_weight", "length_loss_weight", "difficulty_mask",
                                             "balance_length", "error_max_len_clip")},
    "max_len_mask": Refused("rfthpc trains on truncated responses too; algorithm.overlong_buffer penalises long ones",
                            _off),
    "difficulty_low_threshold": Refused(ROLL_RLVR, _unless("difficulty_mask"), "read only with difficulty_mask"),
    "difficulty_high_threshold": Refused(ROLL_RLVR, _unless("difficulty_mask"), "read only with difficulty_mask"),
    "error_max_len_threshold": Refused(ROLL_RLVR, _unless("error_max_len_clip"), "read only with error_max_len_clip"),
    "mask_type": Ignored("read only with max_len_mask / difficulty_mask"),
    "minibatch_data_iter_num": Refused(ROLL_RLVR, _is(1)),
    "postive_loss_coef": Refused(ROLL_LOSS, _off),
    "use_topr_neg_loss_coef": Refused(ROLL_LOSS, _off),
    "use_topr_loss": Refused(ROLL_LOSS, _off),
    "use_policy_loss_type": Refused(ROLL_LOSS, _is("PPO")),
    "rl_loss_coef": Refused(ROLL_LOSS, _is(1, 1.0)),
    "importance_sampling": Refused(ROLL_LOSS + " (gspo weights whole sequences)", _is("token")),
    "val_greedy": Refused("set temperature 0 in the eval taskset's rollout_args", _off),
    "val_n_sample": Refused("set the eval taskset's repeat_times", _is(1)),
    **{k: Refused(ROLL_OPD, _off) for k in ("teacher", "student_train", "student_infer", "is_pure_opd", "use_opd")},
    "pure_opd_pipeline_type": Ignored("read only with is_pure_opd"),
    # The role sections, key by key: what every role has, then each role's own.
    **{f"*.{k}": Ignored(ROLL_PLACEMENT) for k in (
        "device_mapping", "world_size", "infer_batch_size", "num_gpus_per_worker", "max_concurrency", "backend_timeout",
        "offload_nccl", "name", "worker_cls", "model_update_frequency")},
    "*.system_envs*": Refused("environment variables: export them in the shell that submits (the roles inherit it), "
                              "or set explorer.env_vars for the explorers", _off),
    **{f"*.{k}": Ignored(ROLL_SPEED) for k in (
        "use_sequence_packing", "sequence_packing_args.*", "use_dynamic_batching_in_infer",
        "max_tokens_per_microbatch_in_infer", "sequence_length_round_in_*", "model_args.attn_implementation",
        "model_args.gradient_checkpointing_use_reentrant", "model_args.device_map")},
    "*.router_replay.*": Refused("MoE router replay is not in rfthpc; remove it", _is(None, "disable", False)),
    "critic.model_args.lora_target": Refused(CRITIC_LORA, _off),
    "critic.model_args.adapter_name_or_path": Refused(CRITIC_LORA, _off),
    "*.model_args.additional_target": Refused("rfthpc's adapter trains no other layer than the ones it adapts (it "
                                              "hands explorers the adapter alone): remove it", _off),
    "*.model_args.autocast_adapter_dtype": Ignored("rfthpc keeps the adapter in float32 while training"),
    **{f"*.model_args.{k}": Ignored("a LoRA setting read with actor_train's (model.lora), or only with lora_target")
       for k in ("lora_rank", "lora_alpha", "lora_dropout", "lora_target", "adapter_name_or_path")},
    "*.model_args.moe_aux_loss_coef": Refused("rfthpc adds no MoE load-balancing loss; remove it", _off),
    "*.model_args.model_config_kwargs": Refused("changes the model's config before training; rfthpc trains the model "
                                                "as its config.json says: edit a copy of the model instead", _off),
    "*.model_args.freeze_module_prefix": Refused("rfthpc trains every weight; remove it", _off),
    "*.model_args.ulysses_size": Ignored(SP_OF_ACTOR.replace("the actor does", "actor_train does")),
    "*.model_args.model_type": Refused("ROLL's model kind (value head, reward model, VLM); rfthpc picks the head by "
                                       "role", _off),
    "*.model_args.num_labels": Ignored("rfthpc's critic has one value head"),
    "*.data_args.template": Ignored(ROLL_TEMPLATE),
    "*.data_args.preprocessing_num_workers": Ignored(ROLL_SPEED),
    "actor_train.data_args.*": Refused(ROLL_DATA),
    "*.data_args.*": Ignored("only actor_train's data_args name the training data"),
    "actor_train.strategy_args.strategy_name": Refused(ROLL_TRAIN_STRATEGY, _is("fsdp2_train", "deepspeed_train"),
                                                       "rfthpc trains with FSDP2"),
    "actor_train.strategy_args.strategy_config.*": Ignored(
        "settings of ROLL's training strategy; rfthpc shards with FSDP2 (trainer.param_offload, optimizer_offload, "
        "enable_gradient_checkpointing)"),
    "actor_train.training_args.gradient_accumulation_steps": Refused(
        "ROLL's optimizer update takes per_device_train_batch_size x gradient_accumulation_steps x data-parallel size "
        "responses; rfthpc's takes trainer.ppo_mini_batch_size groups (default: one update per step): set that"),
    **{f"actor_train.training_args.{k}": Ignored("set by ROLL itself, or not read by its RL pipelines") for k in (
        "num_train_epochs", "max_steps", "output_dir", "data_seed", "dataloader_num_workers")},
    "actor_train.training_args.seed": Refused(ROLL_SEED + ": set those instead", _is(42), ROLL_SEED),
    "actor_infer.strategy_args.strategy_name": Refused("rfthpc's rollout engine is vLLM (or transformers); SGLang and "
                                                       "Hugging Face generation are not: remove it", _is("vllm"),
                                                       "rfthpc's rollout engine is vLLM"),
    "actor_infer.strategy_args.strategy_config.*": Ignored(
        "engine settings rfthpc chooses itself; the ones it takes are under explorer.rollout_model "
        "(gpu_memory_utilization, tensor_parallel_size, enforce_eager, enable_prefix_caching, enable_chunked_prefill)"),
    "actor_infer.model_args.model_name_or_path": Ignored("the rollout engine runs the trained policy, model.model_path"),
    "actor_infer.generating_args.do_sample": Refused("greedy rollouts: set temperature 0 in the taskset's "
                                                     "rollout_args", _is(None, True)),
    "actor_infer.generating_args.num_beams": Refused("rfthpc samples; beam search is not available", _is(None, 1)),
    "actor_infer.generating_args.repetition_penalty": Refused("a repetition penalty is not available in rfthpc",
                                                              _is(None, 1, 1.0)),
    "actor_infer.generating_args.length_penalty": Ignored("read only by beam search"),
    "actor_infer.generating_args.max_length": Ignored("the limit is model.max_model_len"),
    "actor_infer.generating_args.stop_strings": Refused("generation stops at the end-of-sequence token; stop strings "
                                                        "are not available in rfthpc", _off),
    "actor_infer.generating_args.include_stop_str_in_output": Ignored("read only with stop_strings"),
    "reference.*": Ignored("the reference model runs inside rfthpc's trainer, sharded like the actor; its KL terms are "
                           "algorithm.kl_loss_fn / kl_penalty_fn"),
    "critic.model_args.dtype": Ignored("the critic computes in model.dtype, like the actor"),
    "critic.model_args.disable_gradient_checkpointing": Ignored("the critic follows the actor's "
                                                                "trainer.enable_gradient_checkpointing"),
    "critic.strategy_args.strategy_name": Refused(ROLL_TRAIN_STRATEGY, _is("fsdp2_train", "deepspeed_train"),
                                                  "rfthpc trains with FSDP2"),
    "critic.strategy_args.strategy_config.*": Ignored("settings of ROLL's training strategy; rfthpc shards with FSDP2"),
    "actor_train.*": Refused("a setting of ROLL's actor_train worker with no rfthpc counterpart (the ones rfthpc reads "
                             "are in docs/migration.md); remove it"),
    "actor_infer.*": Refused("a setting of ROLL's actor_infer worker with no rfthpc counterpart (the ones rfthpc reads "
                             "are in docs/migration.md); remove it"),
    "critic.*": Refused("a setting of ROLL's critic worker with no rfthpc counterpart; rfthpc's critic is "
                        "model.critic_model_path, trainer.critic_lr, critic_lr_warmup_steps_ratio and critic_warmup"),
}
"""ROLL keys that ROLL_MAP does not map: a top-level key, or a key of a role section (ROLL_SECTIONS) by its
dotted path. A role section's last entry answers its keys that no other entry does."""

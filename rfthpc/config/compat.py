"""Where rfthpc differs from Trinity-RFT and veRL, said out loud.

Four kinds of difference:
- keys Trinity-RFT has that rfthpc deliberately does not support: an error naming the reason;
- values of accepted keys that rfthpc cannot honour (e.g. `bench_on_latest_checkpoint: true`): an
  error naming the reason and the fix, when the config is validated (`unsupported_values`);
- values rfthpc accepts but reads differently (e.g. `sync_method: nccl`): a note on stderr;
- veRL settings under `trainer.trainer_config`: mapped onto rfthpc's typed fields, or named as
  having no effect, or rejected as unknown.
"""

from __future__ import annotations

import difflib
import os
from typing import TYPE_CHECKING, Any

from rfthpc.errors import ConfigError

if TYPE_CHECKING:
    from rfthpc.config.schema import Config

_NO_RAY = "rfthpc runs on Slurm and a shared filesystem, without Ray"
_NO_SQL = "Trinity-RFT's retries of SQL buffer access; rfthpc's buffers are files on the shared filesystem"

UNSUPPORTED_KEYS: dict[str, str] = {
    "ray_namespace": _NO_RAY,
    "data_processor": "Trinity's data pipelines are not part of rfthpc; prepare datasets beforehand",
    "service": "Trinity's data-juicer service is not part of rfthpc",
    "log": "rfthpc writes role logs to <run dir>/log/ (Slurm stdout/stderr)",
    "explorer.runner_num": "deprecated in Trinity-RFT; use explorer.runner_per_model",
    "explorer.max_repeat_times_per_runner": "each engine generates a task's repeat_times responses in one request",
    "explorer.rollout_model.enable_openai_api": "rfthpc's explorers call vLLM in process; no OpenAI server is started",
    "explorer.rollout_model.enable_history": "workflows receive completions directly; no history recording is needed",
    "buffer.explorer_input.taskset.wrap_in_ray": _NO_RAY,
    "buffer.trainer_input.experience_buffer.wrap_in_ray": _NO_RAY,
    "buffer.trainer_input.sft_warmup_dataset": "use `stages:` with an sft_warmup stage (Trinity-RFT's current form)",
    "buffer.trainer_input.sft_warmup_steps": "use `stages:` with an sft_warmup stage (Trinity-RFT's current form)",
    "synchronizer.explorer_world_size": "explorers never join the trainer's process group in rfthpc",
    "trainer.enable_preview": "no preview in rfthpc",
    "monitor.enable_ray_timeline": _NO_RAY,
    "buffer.max_retry_times": _NO_SQL + "; a failed or timed-out task is retried explorer.max_retry_times times",
    "buffer.max_retry_interval": _NO_SQL + "; the pause between retries of a task is explorer.max_retry_interval",
}


def unsupported_reason(path: str) -> str | None:
    """The reason a Trinity-RFT key is not supported, or None if rfthpc does not know the key."""
    generic = path
    for prefix in ("buffer.explorer_input.tasksets[", "buffer.explorer_input.eval_tasksets["):
        if path.startswith(prefix):
            generic = "buffer.explorer_input.taskset." + path.split("].", 1)[-1]
    return UNSUPPORTED_KEYS.get(generic)


def value_notes(raw: dict[str, Any]) -> list[str]:
    """Notes for values rfthpc accepts but reads differently from Trinity-RFT."""
    notes = []
    sync = raw.get("synchronizer") or {}
    if sync.get("sync_method") in ("nccl", "memory"):
        notes.append(
            f"synchronizer.sync_method: {sync['sync_method']!r} is read as 'checkpoint': trainer and "
            "explorers are separate Slurm jobs and exchange weights through <run dir>/weights/"
        )
    buf = ((raw.get("buffer") or {}).get("trainer_input") or {}).get("experience_buffer") or {}
    path = buf.get("path")
    if isinstance(path, str) and path.startswith(("sqlite:", "postgresql:", "mysql:")):
        notes.append(
            f"buffer.trainer_input.experience_buffer.path: {path!r} is not used: rfthpc keeps "
            "experience in its HDF5 store under <run dir>/experiences/"
        )
    return notes


def _same_path(a: str, b: str) -> bool:
    return os.path.normpath(os.path.expanduser(a)) == os.path.normpath(os.path.expanduser(b))


def unsupported_values(cfg: Config) -> list[str]:
    """Problems with values of accepted keys that rfthpc cannot honour, each naming the key, why, and the fix.

    `cfg` is a finalized stage config (derived values filled in).
    """
    problems = []
    ex, m = cfg.explorer, cfg.model
    if ex.bench_on_latest_checkpoint:
        problems.append(
            "explorer.bench_on_latest_checkpoint: true is Trinity-RFT's `mode: bench` switch and rfthpc has no "
            "bench mode; remove it (rank 0 of the explorers evaluates eval_tasksets on start-up, every "
            "explorer.eval_interval policy versions and on the final policy)"
        )
    rm = ex.rollout_model
    models = [("explorer.rollout_model", rm)] + [
        (f"explorer.auxiliary_models[{i}]", aux) for i, aux in enumerate(ex.auxiliary_models)
    ]
    for key, model in models:
        if not model.use_v1:
            problems.append(
                f"{key}.use_v1: false asks for vLLM's V0 engine, which current vLLM no longer has; remove it"
            )
    for i, aux in enumerate(ex.auxiliary_models):
        # 1 is also the default: a config that does not say gets one engine per explorer too.
        if aux.engine_num not in (1, rm.engine_num):
            problems.append(
                f"explorer.auxiliary_models[{i}].engine_num: {aux.engine_num}; every explorer starts one engine of "
                f"each auxiliary model next to its rollout engine, so there are as many as explorers "
                f"(explorer.rollout_model.engine_num = {rm.engine_num}); remove it or set {rm.engine_num}"
            )
    if rm.name:
        problems.append(
            f"explorer.rollout_model.name: {rm.name!r} is not used: only auxiliary models are addressed by name "
            "(workflows reach the policy as ctx.engine); remove it"
        )
    if rm.model_path and m.model_path and not _same_path(rm.model_path, m.model_path):
        problems.append(
            f"explorer.rollout_model.model_path: {rm.model_path!r} differs from model.model_path "
            f"{m.model_path!r}; the rollout engine runs the policy the trainer trains, so it starts from "
            "model.model_path; remove explorer.rollout_model.model_path"
        )
    for name in ("max_prompt_tokens", "max_response_tokens"):
        value, policy = getattr(rm, name), getattr(m, name)
        if value is not None and value != policy:
            problems.append(
                f"explorer.rollout_model.{name}: {value} differs from model.{name} ({policy}); the policy's "
                f"token limits are shared with the trainer: set model.{name} instead"
            )
    inp = cfg.buffer.explorer_input
    for i, ts in enumerate(inp.eval_tasksets):
        key = f"buffer.explorer_input.eval_tasksets[{i}]"
        if ts.total_epochs is not None and ts.total_epochs != cfg.buffer.total_epochs:
            problems.append(
                f"{key}.total_epochs: {ts.total_epochs} has no effect: every evaluation runs each task of an eval "
                "taskset once (repeat_times responses); remove it, or raise repeat_times for more samples"
            )
        if ts.task_selector.selector_type != "sequential":
            problems.append(
                f"{key}.task_selector: {ts.task_selector.selector_type!r} has no effect: every evaluation runs "
                "all tasks of an eval taskset; remove it"
            )
    f = cfg.buffer.trainer_input.experience_buffer.format
    for name in ("reply_prefix", "workflow_key", "reward_fn_key"):
        if getattr(f, name):
            problems.append(
                f"buffer.trainer_input.experience_buffer.format.{name}: applies to explorer tasksets only; "
                "an SFT dataset is trained on as written; remove it"
            )
    return problems


# veRL path under trainer.trainer_config -> rfthpc dotted path (None: accepted, no effect, with why).
VERL_MAP: dict[str, str | None] = {
    "actor_rollout_ref.model.enable_gradient_checkpointing": "trainer.enable_gradient_checkpointing",
    "actor_rollout_ref.model.use_remove_padding": None,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "trainer.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "trainer.ppo_mini_batch_size",
    "actor_rollout_ref.actor.ppo_epochs": "trainer.ppo_epochs",
    "actor_rollout_ref.actor.use_dynamic_bsz": "trainer.use_dynamic_bsz",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": "trainer.max_token_len_per_gpu",
    "actor_rollout_ref.actor.grad_clip": "trainer.grad_clip",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": "trainer.ulysses_sequence_parallel_size",
    "actor_rollout_ref.actor.fsdp_config.param_offload": "trainer.param_offload",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": "trainer.optimizer_offload",
    "actor_rollout_ref.actor.optim.lr": "algorithm.optimizer.lr",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": "algorithm.optimizer.lr_warmup_steps_ratio",
    "actor_rollout_ref.actor.optim.weight_decay": "algorithm.optimizer.weight_decay",
    "actor_rollout_ref.actor.entropy_coeff": "algorithm.entropy_loss_fn_args.entropy_coef",
    "actor_rollout_ref.actor.clip_ratio": "algorithm.policy_loss_fn_args.clip_range",
    "actor_rollout_ref.actor.loss_agg_mode": "algorithm.loss_agg_mode",
    "actor_rollout_ref.ref.fsdp_config.param_offload": None,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": None,
    "critic.model.enable_gradient_checkpointing": "trainer.enable_gradient_checkpointing",
    "critic.model.use_remove_padding": None,
    "critic.model.fsdp_config.param_offload": "trainer.param_offload",
    "critic.model.fsdp_config.optimizer_offload": "trainer.optimizer_offload",
    "critic.optim.lr": "trainer.critic_lr",
    "critic.optim.lr_warmup_steps_ratio": "trainer.critic_lr_warmup_steps_ratio",
    "critic.ppo_micro_batch_size_per_gpu": "trainer.ppo_micro_batch_size_per_gpu",
    "trainer.critic_warmup": "trainer.critic_warmup",
    **{f"algorithm.rollout_correction.{k}": f"algorithm.rollout_correction.{k}" for k in (
        "rollout_is", "rollout_is_threshold", "rollout_is_batch_normalize", "rollout_rs", "rollout_rs_threshold",
        "bypass_mode", "loss_type")},
}


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


def _set_default(raw: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = raw
    for p in parents:
        child = node.get(p)
        if not isinstance(child, dict):
            child = node[p] = {}
        node = child
    node.setdefault(leaf, value)


def _verl_targets(flat: dict[str, Any], source: str) -> dict[str, Any]:
    """The rfthpc settings (dotted path -> value) that veRL settings (dotted `trainer_config` paths ->
    value) stand for. Keys without effect are left out; unknown keys are an error, since rfthpc
    would otherwise ignore them silently."""
    unknown = []
    targets: dict[str, Any] = {}
    for key, value in flat.items():
        if key.startswith("actor_rollout_ref.rollout."):
            continue  # Trinity-RFT ignores these too: the explorer section configures rollouts.
        if key not in VERL_MAP:
            close = difflib.get_close_matches(key, list(VERL_MAP), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            unknown.append(f"trainer.trainer_config.{key}{hint}")
            continue
        target = VERL_MAP[key]
        if target is not None:
            targets.setdefault(target, value)  # the actor's value over the critic's that maps alike
    if unknown:
        raise ConfigError(
            f"{source}: veRL settings rfthpc does not use: {', '.join(unknown)}. "
            f"rfthpc maps these veRL keys: {', '.join(sorted(VERL_MAP))}; "
            "remove the others or set the matching rfthpc key (see docs/migration.md)"
        )
    return targets


def apply_verl_trainer_config(raw: dict[str, Any], source: str) -> None:
    """Map veRL keys in the raw config's `trainer.trainer_config` onto rfthpc fields (explicit rfthpc
    keys win). Used for the YAML and for each stage's sections."""
    verl = (raw.get("trainer") or {}).get("trainer_config") or {}
    if not isinstance(verl, dict):
        raise ConfigError(f"{source}: trainer.trainer_config must be a mapping of veRL settings")
    for target, value in _verl_targets(_flatten(verl), source).items():
        _set_default(raw, target, value)


def apply_verl_overrides(cfg: Config, before: dict[str, Any], args: list[str]) -> bool:
    """Map the veRL settings that command-line overrides changed in `cfg.trainer.trainer_config`
    (`before`: its value from the YAML) onto rfthpc fields, unless the same override list sets
    that rfthpc field itself. True if a field was set."""
    old = _flatten(before)
    changed = {k: v for k, v in _flatten(cfg.trainer.trainer_config).items() if k not in old or old[k] != v}
    given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    targets = {t: v for t, v in _verl_targets(changed, "command line").items() if f"--{t}" not in given}
    for target, value in targets.items():
        _set_path(cfg, target, value)
    return bool(targets)


def _set_path(cfg: Config, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node: Any = cfg
    for p in parents:
        node = node[p] if isinstance(node, dict) else getattr(node, p)
    if isinstance(node, dict):
        node[leaf] = value
    else:
        setattr(node, leaf, value)

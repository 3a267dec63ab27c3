"""Where rfthpc differs from Trinity-RFT and veRL, said out loud.

Five kinds of difference:
- keys Trinity-RFT or veRL renamed: both names are read as rfthpc's one key (`apply_renamed_keys`);
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rfthpc.errors import ConfigError

if TYPE_CHECKING:
    from rfthpc.config.schema import Config
    from rfthpc.config.typed import Problems

_NO_RAY = "rfthpc runs on Slurm and a shared filesystem, without Ray"
_NO_SQL = "Trinity-RFT's retries of SQL buffer access; rfthpc's buffers are files on the shared filesystem"

UNSUPPORTED_KEYS: dict[str, str] = {
    "ray_namespace": _NO_RAY,
    "data_processor": "Trinity's data pipelines are not part of rfthpc; prepare datasets beforehand",
    "service": "Trinity's data-juicer service is not part of rfthpc",
    "log": "rfthpc writes role logs to <run dir>/log/ (Slurm stdout/stderr)",
    "explorer.runner_num": "deprecated in Trinity-RFT; use explorer.runner_per_model",
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


TRINITY_OVERLONG_KEYS = ("enable_overlong_penalty", "penalty_factor", "max_response_length", "cache_length")
"""Trinity-RFT's settings of DAPO's overlong penalty, in the `reward_fn_args` of `math_dapo_reward` or the
`workflow_args` of `math_dapo_workflow` (its DAPO example also puts them in `math_boxed_workflow`'s)."""


def trinity_overlong_problem(key: str, args: Mapping[str, Any]) -> str | None:
    """The error for Trinity-RFT's overlong-penalty settings in `args` (the mapping at config key `key`),
    naming the `algorithm.overlong_buffer` that replaces them; None if there are none."""
    given = [k for k in TRINITY_OVERLONG_KEYS if k in args]
    if not given:
        return None
    message = (f"{key}: {', '.join(given)} set Trinity-RFT's DAPO overlong penalty, which rfthpc's explorer "
               f"adds to every reward as algorithm.overlong_buffer; remove {'them' if len(given) > 1 else 'it'}")
    if not args.get("enable_overlong_penalty"):
        return message + " (the penalty is off)"
    buffer = {"enable": True, **{ours: args[theirs] for theirs, ours in
                                 (("cache_length", "len"), ("penalty_factor", "penalty_factor")) if theirs in args}}
    message += f" and set algorithm.overlong_buffer: {buffer}"
    if "max_response_length" in args:
        message += (f"; the penalty's limit is model.max_response_tokens (Trinity's max_response_length: "
                    f"{args['max_response_length']})")
    return message


def unsupported_reason(path: str) -> str | None:
    """The reason a Trinity-RFT key is not supported, or None if rfthpc does not know the key."""
    generic = path
    for prefix in ("buffer.explorer_input.tasksets[", "buffer.explorer_input.eval_tasksets["):
        if path.startswith(prefix):
            generic = "buffer.explorer_input.taskset." + path.split("].", 1)[-1]
    return UNSUPPORTED_KEYS.get(generic)


ROLL_PG_VARIANTS = ("vanilla", "tis", "topr", "cispo", "kimi15", "ppo")
"""ROLL's `pg_variant` values; each is the rfthpc policy loss of the same name (ROLL's `vanilla` is the
plain policy gradient, as rfthpc's)."""


def apply_roll_keys(raw: dict[str, Any], source: str) -> None:
    """Read ROLL's top-level keys rfthpc understands into its own (in place):

    - `async_generation_ratio: N` (ROLL: generation runs N batches ahead of training; 0 is
      synchronous) is `synchronizer.sync_interval: 1, sync_offset: N`; a synchronizer section that
      says otherwise is an error, since the two would disagree on the staleness bound;
    - `pg_variant: name` is `algorithm.policy_loss_fn: name` (an explicit policy_loss_fn wins).
    """
    if "async_generation_ratio" in raw:
        ratio = raw.pop("async_generation_ratio")
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio < 0 or ratio != int(ratio):
            raise ConfigError(f"{source}: async_generation_ratio: {ratio!r}; use a whole number >= 0 (ROLL: batches "
                              "generated ahead of training; rfthpc's synchronizer.sync_offset)")
        sync = raw.setdefault("synchronizer", {})
        if not isinstance(sync, dict):
            raise ConfigError(f"{source}: synchronizer must be a mapping")
        wanted = {"sync_interval": 1, "sync_offset": int(ratio)}
        clash = {k: sync[k] for k, v in wanted.items() if sync.get(k) is not None and sync[k] != v}
        if clash:
            given = ", ".join(f"synchronizer.{k}: {v}" for k, v in clash.items())
            raise ConfigError(f"{source}: async_generation_ratio: {int(ratio)} means synchronizer.sync_interval: 1 "
                              f"and sync_offset: {int(ratio)}, but the config sets {given}; keep one of the two")
        sync.update(wanted)
    if "pg_variant" in raw:
        variant = raw.pop("pg_variant")
        if variant not in ROLL_PG_VARIANTS:
            raise ConfigError(f"{source}: pg_variant: {variant!r}; ROLL's variants rfthpc has: "
                              f"{', '.join(ROLL_PG_VARIANTS)} (or set algorithm.policy_loss_fn)")
        alg = raw.setdefault("algorithm", {})
        if not isinstance(alg, dict):
            raise ConfigError(f"{source}: algorithm must be a mapping")
        alg.setdefault("policy_loss_fn", variant)


SELECTORS_ELSEWHERE = {
    "random": "Trinity-RFT's `random` draws each batch independently, so a task may come again before the "
              "epoch has handed out every task; use selector_type: shuffle (a new seeded order each epoch, "
              "every task once per epoch)",
    "offline_easy2hard": "rfthpc has no curriculum selector; sort the dataset by your difficulty columns "
                         "(feature_keys) beforehand, easiest first, and use selector_type: sequential",
    "difficulty_based": "rfthpc's explorers feed no pass rates back to a selector; use selector_type: shuffle "
                        "(algorithm.filter_groups drops groups whose responses all score the same)",
}
"""Trinity-RFT's task selectors that rfthpc does not have, and the alternative each error names."""

_SELECTOR_DEFAULTS = {"selector_type": "sequential", "seed": 42}


def _selector_problems(selector: Any, key: str) -> list[str]:
    """What rfthpc cannot honour in one task selector mapping; Trinity's estimator keys, left empty
    (as in its dumped configs), are dropped."""
    if not isinstance(selector, dict):
        return []  # typed conversion reports the type
    problems = []
    kind = selector.get("selector_type")
    if isinstance(kind, str) and kind.lower() in SELECTORS_ELSEWHERE:
        problems.append(f"{key}.selector_type: {kind!r} is not one of rfthpc's selectors (sequential, shuffle): "
                        f"{SELECTORS_ELSEWHERE[kind.lower()]}")
    for name in ("feature_keys", "kwargs"):
        if name in selector and not selector[name]:
            del selector[name]
        elif name in selector:
            problems.append(f"{key}.{name}: read by Trinity-RFT's offline_easy2hard and difficulty_based selectors, "
                            "which rfthpc does not have; sequential and shuffle take only `seed`: remove it")
    return problems


def _same_selector(a: Any, b: Any) -> bool:
    return isinstance(a, dict) and isinstance(b, dict) and {**_SELECTOR_DEFAULTS, **a} == {**_SELECTOR_DEFAULTS, **b}


def _same_text(a: Any, b: Any) -> bool:
    return str(a).lower() == str(b).lower()


def _rename(section: dict[str, Any], old: str, new: str, key: str, problems: Problems,
            same: Callable[[Any, Any], bool]) -> None:
    """Move `section[old]` to `section[new]`; both given and not `same` is a problem (a null is not given)."""
    if section.get(old) is None:
        section.pop(old, None)
        return
    value = section.pop(old)
    if section.get(new) is None:
        section[new] = value
    elif not same(section[new], value):
        problems.add(f"{key}: {new} ({section[new]}) and {old} ({value}) differ; they are one key under two "
                     "names: keep one")


RENAMED_FLAGS = {"--algorithm.optimizer.warmup_style": "--algorithm.optimizer.lr_scheduler_type"}
"""Command-line overrides under an older name, and rfthpc's flag for each."""


def renamed_flags(args: list[str]) -> list[str]:
    """Command-line overrides with older flag names (`--algorithm.optimizer.warmup_style`) renamed."""
    out = []
    for arg in args:
        flag, eq, value = arg.partition("=")
        out.append(RENAMED_FLAGS.get(flag, flag) + eq + value)
    return out


def apply_renamed_keys(raw: dict[str, Any], source: str) -> None:
    """Read the keys Trinity-RFT or veRL renamed under rfthpc's one name for each, in `raw` (a config,
    or a stage's sections), in place:

    - `algorithm.optimizer.warmup_style` (their older name) is `lr_scheduler_type`;
    - a taskset's `data_selector` (Trinity-RFT's current name) is its `task_selector`; a Trinity
      selector rfthpc does not have is an error that names the alternative.

    Both names given with different values is an error.
    """
    from rfthpc.config.typed import Problems

    problems = Problems(source)
    alg = raw.get("algorithm")
    opt = alg.get("optimizer") if isinstance(alg, dict) else None
    if isinstance(opt, dict):
        _rename(opt, "warmup_style", "lr_scheduler_type", "algorithm.optimizer", problems, _same_text)
    buffer = raw.get("buffer")
    inp = buffer.get("explorer_input") if isinstance(buffer, dict) else None
    tasksets = []
    if isinstance(inp, dict):
        tasksets.append(("buffer.explorer_input.taskset", inp.get("taskset")))
        for group in ("tasksets", "eval_tasksets"):
            if isinstance(inp.get(group), list):
                tasksets += [(f"buffer.explorer_input.{group}[{i}]", ts) for i, ts in enumerate(inp[group])]
    for key, ts in tasksets:
        if not isinstance(ts, dict):
            continue
        for name in ("task_selector", "data_selector"):
            for message in _selector_problems(ts.get(name), f"{key}.{name}"):
                problems.add(message)
        if ts.get("data_selector") is not None and not isinstance(ts["data_selector"], dict):
            problems.add(f"{key}.data_selector: expected a mapping, got {ts.pop('data_selector')!r}")
            continue
        _rename(ts, "data_selector", "task_selector", key, problems, _same_selector)
    problems.raise_if_any()


def apply_sync_style_names(raw: dict[str, Any], source: str) -> None:
    """Read Trinity-RFT's former sync_style names (`dynamic_by_explorer`, `dynamic_by_trainer`, which
    Trinity-RFT still accepts, in any case) as the current ones, in the run's and each stage's
    synchronizer section (in place). `fully_async`, Trinity-RFT's newest style, is an error naming the
    closest rfthpc style."""
    from rfthpc.config.synchronizer import SYNC_STYLE_ALIASES

    sections = [("synchronizer", raw.get("synchronizer"))]
    stages = raw.get("stages")
    if isinstance(stages, list):
        sections += [(f"stages[{i}].synchronizer", st.get("synchronizer")) for i, st in enumerate(stages)
                     if isinstance(st, dict)]
    for key, sync in sections:
        if not isinstance(sync, dict) or not isinstance(sync.get("sync_style"), str):
            continue
        style = sync["sync_style"].lower()
        if style == "fully_async":
            raise ConfigError(
                f"{source}: {key}.sync_style: 'fully_async' (Trinity-RFT's explorer that loads every publication "
                "as it appears and never waits) is not an rfthpc style; 'fixed' comes closest: explorers load the "
                "newest publication before each batch and wait only as synchronizer.max_staleness requires"
            )
        sync["sync_style"] = SYNC_STYLE_ALIASES.get(style, sync["sync_style"])


_EXPLORER_DRIVEN_NOTE = (
    "synchronizer.sync_style: explorer_driven: explorers ask for weights through files under "
    "<run dir>/weights/.requests/ (no Synchronizer actor); a request the trainer does not answer within "
    "sync_timeout lets the explorer go on with its weights; synchronizer.max_staleness still bounds staleness"
)
_TRAINER_DRIVEN_NOTE = (
    "synchronizer.sync_style: trainer_driven: the trainer publishes every sync_interval steps without waiting "
    "for explorers (no NCCL rendezvous); explorers take the newest publication at their sync points without "
    "waiting; synchronizer.max_staleness still bounds staleness"
)
SYNC_STYLE_NOTES = {"explorer_driven": _EXPLORER_DRIVEN_NOTE, "dynamic_by_explorer": _EXPLORER_DRIVEN_NOTE,
                    "trainer_driven": _TRAINER_DRIVEN_NOTE, "dynamic_by_trainer": _TRAINER_DRIVEN_NOTE}
"""What a Trinity-RFT user of each style should know about rfthpc's (docs/configuration.md)."""


def value_notes(raw: dict[str, Any]) -> list[str]:
    """Notes for values rfthpc accepts but reads differently from Trinity-RFT."""
    notes = []
    sync = raw.get("synchronizer") or {}
    if sync.get("sync_method") in ("nccl", "memory"):
        notes.append(
            f"synchronizer.sync_method: {sync['sync_method']!r} is read as 'checkpoint': trainer and "
            "explorers are separate Slurm jobs and exchange weights through <run dir>/weights/"
        )
    stages = raw.get("stages") if isinstance(raw.get("stages"), list) else []
    styles = [sync.get("sync_style")] + [(st.get("synchronizer") or {}).get("sync_style") for st in stages
                                         if isinstance(st, dict) and isinstance(st.get("synchronizer"), dict)]
    for note in dict.fromkeys(SYNC_STYLE_NOTES.get(s.lower()) for s in styles if isinstance(s, str)):
        if note is not None:
            notes.append(note)
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
    for group in ("tasksets", "eval_tasksets"):
        for i, ts in enumerate(getattr(inp, group)):
            key = f"buffer.explorer_input.{group}[{i}]"
            problem = trinity_overlong_problem(f"{key}.reward_fn_args", ts.reward_fn_args)
            if problem:
                problems.append(problem)
            if ts.default_reward_fn_type == "rm_gallery_reward":
                problems.append(
                    f"{key}.default_reward_fn_type: 'rm_gallery_reward' calls RM-Gallery, which is not part of "
                    "rfthpc; score with a reward model served as an auxiliary model (math_rm_workflow) or an "
                    "LLM judge (rubric_judge_workflow), or name your own function as module:function"
                )
    f = cfg.buffer.trainer_input.experience_buffer.format
    for name in ("reply_prefix", "workflow_key", "reward_fn_key"):
        if getattr(f, name):
            problems.append(
                f"buffer.trainer_input.experience_buffer.format.{name}: applies to explorer tasksets only; "
                "an SFT dataset is trained on as written; remove it"
            )
    return problems


@dataclass(frozen=True)
class VerlChoice:
    """A veRL setting that chooses a function: `algorithm.<fn_key>` = translate(value, settings),
    where settings are all the veRL settings given (some choices read two keys)."""

    fn_key: str
    translate: Callable[[Any, Mapping[str, Any]], str]


@dataclass(frozen=True)
class VerlFnArg:
    """A veRL setting that only some functions read: it becomes `algorithm.<fn_key>_args.<arg>`
    when the function chosen for `algorithm.<fn_key>` takes `arg`, and has no effect otherwise
    (as in veRL, where each function reads its own settings from a shared config)."""

    fn_key: str
    arg: str


_ACTOR = "actor_rollout_ref.actor."
_USE_KL_LOSS, _KL_LOSS_TYPE = _ACTOR + "use_kl_loss", _ACTOR + "kl_loss_type"
_USE_KL_IN_REWARD, _KL_PENALTY = "algorithm.use_kl_in_reward", "algorithm.kl_penalty"

VERL_POLICY_LOSSES = {"vanilla": "ppo"}
"""veRL `policy_loss.loss_mode` -> rfthpc `policy_loss_fn` where the names differ: veRL's `vanilla`
is PPO's clipped loss (rfthpc's own `vanilla` is ROLL's plain policy gradient). Every other veRL
loss (gspo, sapo, geo_mean, clip_cov, kl_cov, dppo_tv, dppo_kl, dro, gpg, cispo) has its veRL name."""

VERL_ADVANTAGES = {"grpo_vectorized": "grpo", "rloo_vectorized": "rloo"}
"""veRL `algorithm.adv_estimator` -> rfthpc `advantage_fn` where the names differ (veRL's vectorized
variants compute the same advantages); the others (gae, grpo, rloo, reinforce_plus_plus, ...) keep theirs."""


def _kl_ctrl_type(value: Any, _given: Mapping[str, Any]) -> bool:
    if value not in ("fixed", "adaptive"):
        raise ConfigError(f"trainer.trainer_config.algorithm.kl_ctrl.type: {value!r}; veRL's controllers are "
                          "'fixed' and 'adaptive'")
    return value == "adaptive"


# veRL switches a KL term with a flag and names its estimator in another key. The flag false means
# no term; true, the named estimator or veRL's default; an estimator named without the flag turns
# the term on. Either key gives the same answer, read with the other from `given`.
def _kl_loss_from_flag(use: Any, given: Mapping[str, Any]) -> str:
    return str(given.get(_KL_LOSS_TYPE) or "low_var_kl") if use else "none"


def _kl_loss_from_type(name: Any, given: Mapping[str, Any]) -> str:
    return "none" if given.get(_USE_KL_LOSS) is False else str(name)


def _kl_penalty_from_flag(use: Any, given: Mapping[str, Any]) -> str:
    return str(given.get(_KL_PENALTY) or "kl") if use else "none"


def _kl_penalty_from_type(name: Any, given: Mapping[str, Any]) -> str:
    return "none" if given.get(_USE_KL_IN_REWARD) is False else str(name)


# veRL path under trainer.trainer_config -> rfthpc dotted path, a function choice or argument
# (VerlChoice, VerlFnArg), or None: accepted, no effect, with why. A null value is veRL's "unset".
VERL_MAP: dict[str, str | VerlChoice | VerlFnArg | None] = {
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
    "actor_rollout_ref.actor.optim.lr_warmup_steps": "algorithm.optimizer.lr_warmup_steps",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": "algorithm.optimizer.lr_warmup_steps_ratio",
    "actor_rollout_ref.actor.optim.lr_scheduler_type": "algorithm.optimizer.lr_scheduler_type",
    "actor_rollout_ref.actor.optim.warmup_style": "algorithm.optimizer.lr_scheduler_type",
    "actor_rollout_ref.actor.optim.min_lr_ratio": "algorithm.optimizer.min_lr_ratio",
    "actor_rollout_ref.actor.optim.weight_decay": "algorithm.optimizer.weight_decay",
    "actor_rollout_ref.actor.entropy_coeff": "algorithm.entropy_loss_fn_args.entropy_coef",
    "actor_rollout_ref.actor.loss_agg_mode": "algorithm.loss_agg_mode",
    "actor_rollout_ref.actor.loss_scale_factor": "algorithm.loss_scale_factor",
    "actor_rollout_ref.actor.policy_loss.loss_mode": VerlChoice(
        "policy_loss_fn", lambda name, _given: VERL_POLICY_LOSSES.get(str(name), str(name))),
    "actor_rollout_ref.actor.clip_ratio": VerlFnArg("policy_loss_fn", "clip_range"),
    "actor_rollout_ref.actor.clip_ratio_low": VerlFnArg("policy_loss_fn", "clip_range_low"),
    "actor_rollout_ref.actor.clip_ratio_high": VerlFnArg("policy_loss_fn", "clip_range_high"),
    "actor_rollout_ref.actor.clip_ratio_c": VerlFnArg("policy_loss_fn", "clip_ratio_c"),
    "actor_rollout_ref.actor.tau_pos": VerlFnArg("policy_loss_fn", "tau_pos"),
    "actor_rollout_ref.actor.tau_neg": VerlFnArg("policy_loss_fn", "tau_neg"),
    **{f"actor_rollout_ref.actor.policy_loss.{verl}": VerlFnArg("policy_loss_fn", ours)
       for verl, ours in (("clip_cov_ratio", "clip_cov_ratio"), ("clip_cov_lb", "clip_cov_lb"),
                          ("clip_cov_ub", "clip_cov_ub"), ("kl_cov_ratio", "kl_cov_ratio"),
                          ("ppo_kl_coef", "ppo_kl_coef"), ("dro_beta", "beta"))},
    _USE_KL_LOSS: VerlChoice("kl_loss_fn", _kl_loss_from_flag),
    _KL_LOSS_TYPE: VerlChoice("kl_loss_fn", _kl_loss_from_type),
    "actor_rollout_ref.actor.kl_loss_coef": "algorithm.kl_loss_fn_args.kl_coef",
    "actor_rollout_ref.ref.fsdp_config.param_offload": None,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": None,
    "algorithm.adv_estimator": VerlChoice(
        "advantage_fn", lambda name, _given: VERL_ADVANTAGES.get(str(name), str(name))),
    "algorithm.norm_adv_by_std_in_grpo": VerlFnArg("advantage_fn", "std_normalize"),
    "algorithm.gamma": VerlFnArg("advantage_fn", "gamma"),
    "algorithm.lam": VerlFnArg("advantage_fn", "lam"),
    _USE_KL_IN_REWARD: VerlChoice("kl_penalty_fn", _kl_penalty_from_flag),
    _KL_PENALTY: VerlChoice("kl_penalty_fn", _kl_penalty_from_type),
    "algorithm.kl_ctrl.type": "algorithm.kl_penalty_fn_args.adaptive",
    "algorithm.kl_ctrl.kl_coef": "algorithm.kl_penalty_fn_args.kl_coef",
    "algorithm.kl_ctrl.horizon": "algorithm.kl_penalty_fn_args.horizon",
    "algorithm.kl_ctrl.target_kl": "algorithm.kl_penalty_fn_args.target_kl",
    "critic.model.enable_gradient_checkpointing": "trainer.enable_gradient_checkpointing",
    "critic.model.use_remove_padding": None,
    "critic.model.fsdp_config.param_offload": "trainer.param_offload",
    "critic.model.fsdp_config.optimizer_offload": "trainer.optimizer_offload",
    "critic.optim.lr": "trainer.critic_lr",
    "critic.optim.lr_warmup_steps_ratio": "trainer.critic_lr_warmup_steps_ratio",
    "critic.ppo_micro_batch_size_per_gpu": "trainer.ppo_micro_batch_size_per_gpu",
    "trainer.critic_warmup": "trainer.critic_warmup",
    # DAPO: dynamic sampling and the overlong penalty (veRL's DAPO recipe passes the latter as the
    # reward manager's overlong_buffer_cfg; veRL's own trainer config has it under reward_model).
    "algorithm.filter_groups.enable": "algorithm.filter_groups.enable",
    "algorithm.filter_groups.metric": "algorithm.filter_groups.metric",
    "algorithm.filter_groups.max_num_gen_batches": "algorithm.filter_groups.max_num_gen_batches",
    "algorithm.filter_groups.max_inflight_gen_batches": None,
    **{f"{prefix}.{key}": None if key == "log" else f"algorithm.overlong_buffer.{key}"
       for prefix in ("reward_model.overlong_buffer", "reward_model.reward_kwargs.overlong_buffer_cfg",
                      "reward.reward_kwargs.overlong_buffer_cfg")
       for key in ("enable", "len", "penalty_factor", "log")},
    **{f"algorithm.rollout_correction.{k}": f"algorithm.rollout_correction.{k}" for k in (
        "rollout_is", "rollout_is_threshold", "rollout_is_batch_normalize", "rollout_rs", "rollout_rs_threshold",
        "bypass_mode", "loss_type")},
}


def _older_scheduler_name(value: Any, given: Mapping[str, Any]) -> Any:
    current = given.get(_ACTOR + "optim.lr_scheduler_type")
    if current is not None and not _same_text(current, value):
        raise ConfigError(f"trainer.trainer_config.{_ACTOR}optim: lr_scheduler_type ({current}) and warmup_style "
                          f"({value}, its older name) differ; keep lr_scheduler_type")
    return value


_VALUE_TRANSLATIONS: dict[str, Callable[[Any, Mapping[str, Any]], Any]] = {
    "algorithm.kl_ctrl.type": _kl_ctrl_type,
    _ACTOR + "optim.warmup_style": _older_scheduler_name,
}
"""veRL keys mapped onto a plain rfthpc key whose value is spelled differently."""


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


def _verl_targets(flat: dict[str, Any], source: str,
                  given: Mapping[str, Any]) -> tuple[dict[str, Any], dict[tuple[str, str], Any]]:
    """What veRL settings (dotted `trainer_config` paths -> value) stand for: rfthpc settings
    (dotted path -> value), and function arguments ((fn_key, arg) -> value) that apply if the chosen
    function takes them. `given`: every veRL setting in force (a choice may read two). Keys without
    effect and null values (veRL's "unset") are left out; unknown keys are an error, since rfthpc
    would otherwise ignore them silently."""
    unknown = []
    targets: dict[str, Any] = {}
    fn_args: dict[tuple[str, str], Any] = {}
    for key, value in flat.items():
        if key.startswith("actor_rollout_ref.rollout."):
            continue  # Trinity-RFT ignores these too: the explorer section configures rollouts.
        if key.rsplit(".", 1)[-1] == "_target_":
            continue  # Hydra's class to instantiate, in veRL's dumped configs: nothing to set.
        if key not in VERL_MAP:
            close = difflib.get_close_matches(key, list(VERL_MAP), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            unknown.append(f"trainer.trainer_config.{key}{hint}")
            continue
        target = VERL_MAP[key]
        if target is None or value is None or value == {}:
            continue
        if isinstance(target, VerlFnArg):
            fn_args[(target.fn_key, target.arg)] = value
            continue
        if isinstance(target, VerlChoice):
            target, value = f"algorithm.{target.fn_key}", target.translate(value, given)
        elif key in _VALUE_TRANSLATIONS:
            value = _VALUE_TRANSLATIONS[key](value, given)
        targets.setdefault(target, value)  # the actor's value over the critic's that maps alike
    if unknown:
        raise ConfigError(
            f"{source}: veRL settings rfthpc does not use: {', '.join(unknown)}. "
            f"rfthpc maps these veRL keys: {', '.join(sorted(VERL_MAP))}; "
            "remove the others or set the matching rfthpc key (see docs/migration.md)"
        )
    return targets, fn_args


def _function(fn_key: str, name: str | None, algorithm_type: str | None) -> str | None:
    """The function `algorithm.<fn_key>` will name: `name` if set, else the preset's."""
    if name:
        return name
    from rfthpc.algorithms.presets import ALGORITHM_PRESETS

    return (ALGORITHM_PRESETS.get(algorithm_type or "ppo") or {}).get(fn_key)


def _takes(fn_key: str, name: str | None, arg: str) -> bool:
    """Whether the built-in function `name` of `algorithm.<fn_key>` takes the argument `arg` (read from
    its source). A user's function, or a name validation will report as unknown, takes everything:
    validation then checks the argument against the function itself."""
    if name is None:
        return False
    from rfthpc import algorithms as algos

    registry = algos.POLICY_LOSS_FNS if fn_key == "policy_loss_fn" else algos.ADVANTAGE_FNS
    if name not in registry.names():
        return True
    try:
        registry.check(name, {arg: None})
    except ConfigError:
        return False
    return True


def apply_verl_trainer_config(raw: dict[str, Any], source: str, inherited: Mapping[str, Any] | None = None) -> None:
    """Map veRL keys in the raw config's `trainer.trainer_config` onto rfthpc fields (explicit rfthpc
    keys win). Used for the YAML and for each stage's sections (`inherited`: the run's raw config,
    which supplies the algorithm a stage does not set itself)."""
    verl = (raw.get("trainer") or {}).get("trainer_config") or {}
    if not isinstance(verl, dict):
        raise ConfigError(f"{source}: trainer.trainer_config must be a mapping of veRL settings")
    flat = _flatten(verl)
    targets, fn_args = _verl_targets(flat, source, flat)
    for target, value in targets.items():
        _set_default(raw, target, value)
    alg = raw.get("algorithm") if isinstance(raw.get("algorithm"), dict) else {}
    base = (inherited or {}).get("algorithm") or {}
    algorithm_type = alg.get("algorithm_type") or base.get("algorithm_type")
    for (fn_key, arg), value in fn_args.items():
        if _takes(fn_key, _function(fn_key, alg.get(fn_key) or base.get(fn_key), algorithm_type), arg):
            _set_default(raw, f"algorithm.{fn_key}_args.{arg}", value)


def _given_on_command_line(target: str, given: set[str]) -> bool:
    """Whether the override list sets `target` itself or a mapping holding it (`--algorithm.policy_loss_fn_args`)."""
    parts = target.split(".")
    return any(f"--{'.'.join(parts[:n])}" in given for n in range(1, len(parts) + 1))


def apply_verl_overrides(cfg: Config, before: dict[str, Any], args: list[str]) -> bool:
    """Map the veRL settings that command-line overrides changed in `cfg.trainer.trainer_config`
    (`before`: its value from the YAML) onto rfthpc fields, unless the same override list sets
    that rfthpc field itself. True if a field was set."""
    old = _flatten(before)
    now = _flatten(cfg.trainer.trainer_config)
    changed = {k: v for k, v in now.items() if k not in old or old[k] != v}
    given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    targets, fn_args = _verl_targets(changed, "command line", now)
    targets = {t: v for t, v in targets.items() if not _given_on_command_line(t, given)}
    for target, value in targets.items():
        _set_path(cfg, target, value)
    # A function chosen anew gets the veRL arguments it takes, from all of trainer_config; those the
    # YAML's function took and it does not are dropped (veRL's settings follow veRL's choice).
    chosen_anew = {t.split(".", 1)[1] for t in targets} & {"policy_loss_fn", "advantage_fn"}
    for (fn_key, arg), value in _verl_targets(now, "command line", now)[1].items():
        if fn_key in chosen_anew:
            fn_args.setdefault((fn_key, arg), value)
    alg = cfg.algorithm
    for (fn_key, arg), value in fn_args.items():
        target = f"algorithm.{fn_key}_args.{arg}"
        if _given_on_command_line(target, given):
            continue
        args = getattr(alg, f"{fn_key}_args")
        if _takes(fn_key, _function(fn_key, getattr(alg, fn_key), alg.algorithm_type), arg):
            args[arg] = value
            targets[target] = value
        elif fn_key in chosen_anew and arg in args and args[arg] == value:
            del args[arg]
            targets[target] = None
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

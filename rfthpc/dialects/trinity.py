"""Trinity-RFT's config as rfthpc reads it: renamed keys, its own spellings of values, and where it differs.

- keys Trinity-RFT (or veRL, for the same setting) renamed: both names are read as rfthpc's one key
  (`apply_renamed_keys`), and flags likewise (`renamed_flags`);
- Trinity's settings that rfthpc keeps elsewhere: DAPO's overlong penalty from `reward_fn_args` /
  `workflow_args` (`apply_trinity_overlong`), old log-probabilities (`apply_trinity_old_logprobs`), sync
  styles and value names (`apply_sync_style_names`, `apply_trinity_value_names`);
- its keys and modes rfthpc ignores or refuses (`TRINITY_KEYS`, `TRINITY_MODES`), and the workflows,
  selectors it has that rfthpc does not (`SELECTORS_ELSEWHERE`; its workflows and rewards that rfthpc lacks
  are in `rfthpc.not_built`);
- values of accepted keys that rfthpc cannot honour (e.g. `bench_on_latest_checkpoint: true`): an
  error naming the reason and the fix, when the config is validated (`unsupported_values`);
- values rfthpc accepts but reads differently (e.g. `sync_method: nccl`): a note on stderr (`value_notes`);
- on-policy distillation's teacher, an auxiliary model asked by Trinity's distillation workflows, read as
  rfthpc's `explorer.teacher_model` (`apply_trinity_teacher`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rfthpc.dialects.mapping import (
    NO_RAY,
    RUN_DIR,
    Answer,
    Given,
    Ignored,
    Refused,
    lookup,
    nothing_enabled,
    off,
    one_of,
    same_text,
    set_mapped,
    unless,
)
from rfthpc.errors import REFUSED, ConfigError, Problems
from rfthpc.not_built import MULTIMODAL, SAMPLE_STRATEGY, not_built

if TYPE_CHECKING:
    from rfthpc.config.schema import Config


SYNC_STYLE_ALIASES = {"dynamic_by_explorer": "explorer_driven", "dynamic_by_trainer": "trainer_driven"}
"""Trinity-RFT's former names of the sync styles, which it still accepts."""

SET_BY_TRINITY = "set by Trinity-RFT itself (its config says \"DO NOT SET\")"


NO_SQL = ("Trinity-RFT's retries of SQL buffer access; rfthpc's buffers are files on the shared filesystem (a failed "
          "task is retried explorer.max_retry_times times, explorer.max_retry_interval s apart)")


OPENAI_SERVER = ("an option of the OpenAI API server: rfthpc starts none for the policy (explorers call its engine in "
                 "process, ctx.engine), and serves a shared auxiliary model (placement: shared) from vLLM's "
                 "OpenAI-compatible server with its own settings, reached as ctx.auxiliary[name]")


SERVE = "Trinity-RFT's serve mode; rfthpc has no serve mode"


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
    "algorithm_type": Ignored("Trinity-RFT's older way to name a dataset's schema (sft for an SFT dataset); rfthpc "
                              "reads a dataset's rows by the stage that reads it and its format"),
    "mm_data_kwargs": Refused(MULTIMODAL, off),
    "format.image_key": Refused(MULTIMODAL, off),
    "format.video_key": Refused(MULTIMODAL, off),
    "format.tools_key": Refused(
        "rfthpc passes no tool definitions to the chat template (toolcall_workflow reads its `tools` column itself); "
        "remove it", one_of("tools"),
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
                     "fold the group into `project` or `name`", off),
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
    "algorithm.use_token_level_loss": Refused(
        "an older Trinity-RFT switch of the SFT loss: set algorithm.loss_agg_mode (token-mean for true, "
        "seq-mean-token-mean for false)", one_of(True),
        "an older Trinity-RFT switch of the SFT loss; true is token-mean, the default of algorithm.loss_agg_mode"),
    **{f"buffer.{k}": Ignored(SET_BY_TRINITY + "; rfthpc derives what it needs") for k in (
        "explorer_output", "tokenizer_path", "pad_token_id", "cache_dir")},
    "buffer.max_retry_times": Ignored(NO_SQL),
    "buffer.max_retry_interval": Ignored(NO_SQL),
    "buffer.trainer_input.sft_warmup_dataset": Refused(
        "use `stages:` with an sft_warmup stage (Trinity-RFT's current form); a mix stage's expert data is read from "
        "it (as buffer.trainer_input.auxiliary_buffers.sft_dataset)", off),
    "buffer.trainer_input.sft_warmup_steps": Refused(
        "use `stages:` with an sft_warmup stage (Trinity-RFT's current form)", off),
    **{_TASKSET + k: v for k, v in _STORAGE_KEYS.items()},
    _TASKSET + "index": Refused("Trinity-RFT's resume position in the taskset; rfthpc resumes task claims from the "
                                "run directory: remove it (to skip tasks, drop them from the dataset)", off),
    **{_TASKSET + k: Ignored("a setting of experience queues, which a taskset is not") for k in (
        "capacity", "max_read_timeout", "use_priority_queue", "reuse_cooldown_time", "replay_buffer",
        "replay_buffer_kwargs")},
    _TASKSET + "rollout_args.n": Ignored("the responses per task are algorithm.repeat_times (Trinity-RFT overrides n "
                                         "with it too)"),
    **{_EXPERIENCE + k: v for k, v in _STORAGE_KEYS.items()},
    _EXPERIENCE + "index": Ignored(SET_BY_TRINITY + "; rfthpc derives what it needs"),
    _EXPERIENCE + "total_epochs": Ignored(f"{SET_BY_TRINITY} from buffer.total_epochs"),
    _EXPERIENCE + "enable_progress_bar": Ignored("a progress bar of Trinity-RFT's dataset reader"),
    **{_EXPERIENCE + k: Refused(OLD_REPLAY, off) for k in ("use_priority_queue", "reuse_cooldown_time")},
    _EXPERIENCE + "replay_buffer_kwargs": Refused(OLD_REPLAY, unless("use_priority_queue")),
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
                                     "responses) is not available; remove it", off),
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
        "(algorithm.loss_agg_mode), however it is cut into micro-batches: remove it", off),
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
    "model.tinker": Refused(TINKER, nothing_enabled),
    "model.external_model": Refused(NO_EXTERNAL_MODEL, nothing_enabled),
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
    path = re.sub(r"^buffer\.trainer_input\.auxiliary_buffers\.[^.]+", "buffer.trainer_input.experience_buffer", path)
    return re.sub(r"^explorer\.auxiliary_models\[\d+\]", "explorer.rollout_model", path)


TRINITY_OVERLONG_KEYS = ("enable_overlong_penalty", "penalty_factor", "max_response_length", "cache_length")
"""Trinity-RFT's settings of DAPO's overlong penalty (its `math_dapo_reward`'s arguments)."""


TRINITY_OVERLONG_READERS = {"reward_fn_args": ("math_dapo_reward",),
                            "workflow_args": ("math_dapo_workflow", "math_boxed_workflow")}
"""Where Trinity-RFT reads TRINITY_OVERLONG_KEYS: the `reward_fn_args` of `math_dapo_reward` and the
`workflow_args` of `math_dapo_workflow` (which builds its `math_dapo_reward` from them; Trinity's DAPO
example gives them to `math_boxed_workflow` too)."""


_OVERLONG_TARGETS = {"enable_overlong_penalty": "enable", "cache_length": "len", "penalty_factor": "penalty_factor"}


@dataclass(frozen=True)
class _OverlongReading:
    """Trinity-RFT's overlong settings of one taskset, taken out of its arguments."""

    where: str
    """The arguments' config key (`buffer.explorer_input.tasksets[0].reward_fn_args`)."""
    given: dict[str, Any]
    """Trinity's key -> value."""

    @property
    def enabled(self) -> bool:
        return bool(self.given.get("enable_overlong_penalty"))

    def setting(self) -> tuple[Any, ...]:
        """What the penalty is, for comparing tasksets: off, or on with its settings."""
        return (True, *(self.given.get(k) for k in TRINITY_OVERLONG_KEYS[1:])) if self.enabled else (False,)


def _explorer_default(raw: Mapping[str, Any], inherited: Mapping[str, Any] | None, key: str) -> Any:
    """`buffer.explorer_input.<key>` of the raw config (a stage's sections), else of `inherited`."""
    for source in (raw, inherited or {}):
        inp = (source.get("buffer") or {}).get("explorer_input") if isinstance(source.get("buffer"), dict) else None
        if isinstance(inp, dict) and inp.get(key):
            return inp[key]
    return None


def _max_response_tokens(raw: Mapping[str, Any], inherited: Mapping[str, Any] | None) -> Any:
    """model.max_response_tokens as finalizing will set it (given, or max_model_len - max_prompt_tokens),
    from the raw config (a stage's sections) over `inherited`; None if it cannot be told yet."""
    model = {**((inherited or {}).get("model") or {}), **(raw.get("model") or {})}
    value = model.get("max_response_tokens")
    if value is None and isinstance(model.get("max_model_len"), int) and isinstance(model.get("max_prompt_tokens"), int):
        value = model["max_model_len"] - model["max_prompt_tokens"]
    return value


def _overlong_readings(raw: dict[str, Any], inherited: Mapping[str, Any] | None
                       ) -> tuple[list[_OverlongReading], list[_OverlongReading], int]:
    """Take Trinity's overlong settings out of each taskset's arguments that Trinity reads them from
    (TRINITY_OVERLONG_READERS), in place: (training tasksets' readings, eval tasksets' readings,
    number of training tasksets). Arguments of other functions keep them (their check reports them)."""
    buffer = raw.get("buffer")
    inp = buffer.get("explorer_input") if isinstance(buffer, dict) else None
    if not isinstance(inp, dict):
        return [], [], 0
    workflow = _explorer_default(raw, inherited, "default_workflow_type") or "math_workflow"
    eval_workflow = _explorer_default(raw, inherited, "default_eval_workflow_type") or workflow
    reward = _explorer_default(raw, inherited, "default_reward_fn_type")
    sets = [("buffer.explorer_input.taskset", inp.get("taskset"), False)]
    for group in ("tasksets", "eval_tasksets"):
        if isinstance(inp.get(group), list):
            sets += [(f"buffer.explorer_input.{group}[{i}]", ts, group == "eval_tasksets")
                     for i, ts in enumerate(inp[group])]
    train, evals, n_train = [], [], 0
    for key, ts, is_eval in sets:
        if not isinstance(ts, dict):
            continue
        n_train += not is_eval
        names = {"workflow_args": ts.get("default_workflow_type") or (eval_workflow if is_eval else workflow),
                 "reward_fn_args": ts.get("default_reward_fn_type") or reward}
        for args_key, readers in TRINITY_OVERLONG_READERS.items():
            args = ts.get(args_key)
            if not isinstance(args, dict) or names[args_key] not in readers:
                continue
            given = {k: args.pop(k) for k in TRINITY_OVERLONG_KEYS if k in args}
            if given:
                (evals if is_eval else train).append(_OverlongReading(f"{key}.{args_key}", given))
    return train, evals, n_train


def apply_trinity_overlong(raw: dict[str, Any], problems: Problems, inherited: Mapping[str, Any] | None = None
                           ) -> None:
    """Read Trinity-RFT's DAPO overlong settings (TRINITY_OVERLONG_KEYS, where TRINITY_OVERLONG_READERS
    says Trinity reads them) as `algorithm.overlong_buffer`, in the raw config or a stage's sections
    (`inherited`: the run's raw config), in place; each value is recorded for `config show`, and an
    explicit `algorithm.overlong_buffer` key wins, with a note when the two differ.

    The penalty is the same: Trinity's `math_dapo_reward` adds, for a response of L tokens,
    0 while L < max_response_length - cache_length, (max_response_length - cache_length - L) /
    cache_length * penalty_factor up to L = max_response_length, and -penalty_factor beyond, to its
    reward; rfthpc's explorer adds penalty_factor * max(-1, min(0, (L_max - len - L) / len)) with
    len = cache_length and L_max = model.max_response_tokens (rfthpc.algorithms.shaping.OverlongPenalty):
    the same values at every L once max_response_length = model.max_response_tokens, which is required
    (refused otherwise, with the reason). `enable_overlong_penalty` maps to `enable`, `cache_length` to
    `len`, `penalty_factor` to `penalty_factor`; one left out takes rfthpc's default (Trinity's
    penalty would stop with an error).

    Where rfthpc differs, and answers instead: its penalty is one setting for every training taskset,
    so training tasksets whose penalties differ (one with it, one without) are refused; it shapes the
    rewards trained on only, so an eval taskset's settings are ignored with a note (evaluations
    report the reward function's score); with the penalty off, the other settings are ignored too."""
    train, evals, n_train = _overlong_readings(raw, inherited)
    for reading in evals:
        for name in reading.given:
            problems.ignored(f"{reading.where}.{name}", "rfthpc's overlong penalty (algorithm.overlong_buffer) "
                             "shapes the rewards trained on; evaluations report the reward function's own score")
    if not train:
        return
    settings = {r.setting() for r in train}
    if len({r.where.rsplit(".", 1)[0] for r in train}) < n_train:
        settings.add((False,))  # a training taskset without the settings has no penalty in Trinity
    if len(settings) > 1 and any(r.enabled for r in train):
        for r in train:
            problems.refuse(f"{r.where}.enable_overlong_penalty", "Trinity-RFT",
                            "rfthpc's overlong penalty (algorithm.overlong_buffer) is one setting for every training "
                            "taskset, and the training tasksets' penalties differ: give each the same settings")
        return
    for name, value in train[0].given.items():
        wheres = [f"{r.where}.{name}" for r in train]
        if name != "enable_overlong_penalty" and not train[0].enabled:
            for where in wheres:
                problems.ignored(where, "read only with enable_overlong_penalty: true")
        elif name == "max_response_length":
            _overlong_limit(raw, inherited, wheres, value, problems)
        else:
            _map_overlong(raw, _OVERLONG_TARGETS[name], bool(value) if name == "enable_overlong_penalty" else value,
                          wheres, problems)


def _map_overlong(raw: dict[str, Any], leaf: str, value: Any, wheres: list[str], problems: Problems) -> None:
    """Set `algorithm.overlong_buffer.<leaf>` of the raw config to `value`, read from the keys `wheres`
    (each recorded), unless the config sets it itself: then a note if the two differ."""
    alg = raw.setdefault("algorithm", {})
    buffer = alg.setdefault("overlong_buffer", {}) if isinstance(alg, dict) else None
    if not isinstance(buffer, dict):
        return  # typed conversion reports the section that is not a mapping
    target = f"algorithm.overlong_buffer.{leaf}"
    if buffer.get(leaf) is None:
        buffer[leaf] = value
        for where in wheres:
            problems.map(target, value, where, "Trinity-RFT")
    elif buffer[leaf] != value:
        problems.notes.append(f"{', '.join(wheres)}: {value!r} is not used: the config sets {target}: {buffer[leaf]!r}")


def _overlong_limit(raw: dict[str, Any], inherited: Mapping[str, Any] | None, wheres: list[str], value: Any,
                    problems: Problems) -> None:
    """Trinity's max_response_length (at the keys `wheres`), the penalty's limit, which in rfthpc is
    model.max_response_tokens: the same value is ignored with a note saying so, another is refused."""
    limit = _max_response_tokens(raw, inherited)
    for where in wheres:
        if limit is None or value == limit:
            problems.ignored(where, "the overlong penalty's limit, which in rfthpc is model.max_response_tokens, the "
                             "longest response generated")
        else:
            problems.refuse(where, "Trinity-RFT",
                            f"the overlong penalty's limit, {value} tokens, differs from model.max_response_tokens "
                            f"({limit}), the longest response generated, up to which rfthpc measures the penalty; set "
                            f"max_response_length to {limit} (or model.max_response_tokens to {value})")


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
    """What rfthpc cannot honour in one task selector mapping. Each key refused is taken out of it, so
    that typed reading does not report it again (as an invalid choice or an unknown key); Trinity's
    estimator keys left empty (as in its dumped configs) are dropped."""
    if not isinstance(selector, dict):
        return []  # typed conversion reports the type
    problems = []
    kind = selector.get("selector_type")
    if isinstance(kind, str) and kind.lower() in SELECTORS_ELSEWHERE:
        del selector["selector_type"]
        problems.append(f"{key}.selector_type: {kind!r} is not one of rfthpc's selectors (sequential, shuffle): "
                        f"{SELECTORS_ELSEWHERE[kind.lower()]}")
    for name in ("feature_keys", "kwargs"):
        if name in selector and selector.pop(name):
            problems.append(f"{key}.{name}: read by Trinity-RFT's offline_easy2hard and difficulty_based selectors, "
                            "which rfthpc does not have; sequential and shuffle take only `seed`: remove it")
    return problems


def _same_selector(a: Any, b: Any) -> bool:
    return isinstance(a, dict) and isinstance(b, dict) and {**_SELECTOR_DEFAULTS, **a} == {**_SELECTOR_DEFAULTS, **b}


def _rename(section: dict[str, Any], old: str, new: str, key: str, problems: Problems,
            same: Callable[[Any, Any], bool]) -> None:
    """Move `section[old]` to `section[new]`; both given and not `same` is a problem (a null is not given)."""
    if section.get(old) is None:
        section.pop(old, None)
        return
    value = section.pop(old)
    if section.get(new) is None:
        section[new] = value
        problems.map(f"{key}.{new}", value, f"{key}.{old}", "Trinity-RFT")
    elif not same(section[new], value):
        problems.add(f"{key}: {new} ({section[new]}) and {old} ({value}) differ; they are one key under two "
                     "names: keep one")


RENAMED_KEYS = {
    "model.lora_configs": "model.lora",
    "algorithm.optimizer.warmup_style": "algorithm.optimizer.lr_scheduler_type",
    "trainer.actor_grad_clip": "trainer.grad_clip",
    "buffer.explorer_input.taskset.data_selector": "buffer.explorer_input.taskset.task_selector",
}
"""Keys Trinity-RFT (or veRL) renamed or moved -> rfthpc's key (a taskset's as `taskset`'s)."""


RENAMED_FLAGS = {"--algorithm.optimizer.warmup_style": "--algorithm.optimizer.lr_scheduler_type"}
"""Command-line overrides under an older name, and rfthpc's flag for each."""


def renamed_flags(args: list[str]) -> list[str]:
    """Command-line overrides with older flag names (`--algorithm.optimizer.warmup_style`) renamed."""
    out = []
    for arg in args:
        flag, eq, value = arg.partition("=")
        out.append(RENAMED_FLAGS.get(flag, flag) + eq + value)
    return out


def _trinity_lora_configs(model: dict[str, Any], problems: Problems) -> None:
    """Trinity-RFT's `model.lora_configs` (a list of adapters) as `model.lora`: one adapter, trained.
    Its fields have rfthpc's names; those without meaning here are ignored with a note."""
    configs = model.pop("lora_configs", None)
    if not configs:
        return  # null or empty: no adapter, as in Trinity-RFT
    key = "model.lora_configs"
    if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
        problems.add(f"{key}: expected a list of adapter settings (lora_rank, lora_alpha, target_modules, ...), "
                     f"got {configs!r}")
        return
    if len(configs) > 1:
        problems.add(f"{key}: {len(configs)} adapters; a run trains one adapter (as Trinity-RFT does): keep one "
                     "entry", REFUSED)
        return
    if model.get("lora") is not None:
        problems.add(f"{key} and model.lora are one setting under two names: keep one")
        return
    lora = {}
    for name, value in configs[0].items():
        found = lookup(TRINITY_KEYS, f"{key}.{name}")
        if isinstance(found, Ignored):
            problems.ignored(f"{key}[0].{name}", found.why)
        else:
            lora[name] = value  # an unknown field is reported by the typed reading of model.lora
            problems.map(f"model.lora.{name}", value, f"{key}[0].{name}", "Trinity-RFT")
    model["lora"] = lora


def apply_renamed_keys(raw: dict[str, Any], problems: Problems) -> None:
    """Read the keys of RENAMED_KEYS under rfthpc's one name for each, in `raw` (a config, or a stage's
    sections), in place; a taskset selector rfthpc does not have is a problem that names the
    alternative. Both names given with different values is a problem."""
    model = raw.get("model")
    if isinstance(model, dict):
        _trinity_lora_configs(model, problems)
    alg = raw.get("algorithm")
    opt = alg.get("optimizer") if isinstance(alg, dict) else None
    if isinstance(opt, dict):
        _rename(opt, "warmup_style", "lr_scheduler_type", "algorithm.optimizer", problems, same_text)
    trainer = raw.get("trainer")
    if isinstance(trainer, dict):
        _rename(trainer, "actor_grad_clip", "grad_clip", "trainer", problems, lambda a, b: a == b)
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
                problems.add(message, REFUSED)
        if ts.get("data_selector") is not None and not isinstance(ts["data_selector"], dict):
            problems.add(f"{key}.data_selector: expected a mapping, got {ts.pop('data_selector')!r}")
            continue
        _rename(ts, "data_selector", "task_selector", key, problems, _same_selector)


def apply_trinity_modes(raw: dict[str, Any], problems: Problems) -> None:
    """Refuse Trinity-RFT's modes rfthpc does not have (TRINITY_MODES: bench, serve), in the run's
    and each stage's `mode`, with the reason and the alternative; each is taken out (not reported
    again as a bad choice), and a missing training taskset (a benchmark config has none) is covered
    by the refusal."""
    stages = raw.get("stages") if isinstance(raw.get("stages"), list) else []
    sections = [("mode", raw)] + [(f"stages[{i}].mode", st) for i, st in enumerate(stages) if isinstance(st, dict)]
    for key, section in sections:
        mode = section.get("mode")
        refused = TRINITY_MODES.get(mode.lower()) if isinstance(mode, str) else None
        if refused is None:
            continue
        del section["mode"]
        problems.add(f"{key}: {mode!r} is not an rfthpc mode (both, explore, train): {refused.why}", REFUSED)
        problems.cover("buffer.explorer_input.taskset")


def apply_trinity_old_logprobs(raw: dict[str, Any], problems: Problems, inherited: Mapping[str, Any] | None = None
                               ) -> None:
    """Read Trinity-RFT's `algorithm.bypass_old_logprobs: true` with policy loss `ppo` (PPO's ratio
    against the behaviour policy's log-probabilities, not ones recomputed at the start of the step) as
    veRL's bypass mode, which is that: `algorithm.rollout_correction.bypass_mode: true` (its loss_type
    ppo_clip trains ppo), recorded for `config show`; an explicit bypass_mode wins, with a note. In the
    run's config or a stage's sections (`inherited`: the run's raw config). Any other use is answered
    by TRINITY_KEYS (ignored where the policy loss reads those log-probabilities anyway)."""
    alg = raw.get("algorithm")
    if not isinstance(alg, dict) or alg.get("bypass_old_logprobs") is not True:
        return
    rc = alg.get("rollout_correction") if isinstance(alg.get("rollout_correction"), dict) else {}
    given = {**((inherited or {}).get("algorithm") or {}), **alg}
    if policy_loss_of(given) != "ppo" or rc.get("loss_type", "ppo_clip") != "ppo_clip":
        return
    del alg["bypass_old_logprobs"]
    set_mapped(raw, "algorithm.rollout_correction.bypass_mode", True, "algorithm.bypass_old_logprobs", "Trinity-RFT",
                problems)


def apply_sync_style_names(raw: dict[str, Any], problems: Problems) -> None:
    """Read Trinity-RFT's former sync_style names (`dynamic_by_explorer`, `dynamic_by_trainer`, which
    Trinity-RFT still accepts, in any case) as the current ones, in the run's and each stage's
    synchronizer section (in place). `fully_async`, Trinity-RFT's newest style, is a problem naming the
    closest rfthpc style."""
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
            del sync["sync_style"]  # reported here, not again as a bad choice
            problems.add(
                f"{key}.sync_style: 'fully_async' (Trinity-RFT's explorer that loads every publication as it appears "
                "and never waits) is not an rfthpc style; 'fixed' comes closest: explorers load the newest "
                "publication before each batch and wait only as synchronizer.max_staleness requires", REFUSED)
            continue
        sync["sync_style"] = SYNC_STYLE_ALIASES.get(style, sync["sync_style"])


TRINITY_VALUE_NAMES = {
    ("optimizer", "optimizer_type"): {"adam": "adamw", "adamw": "adamw"},
    ("sample_strategy",): {"warmup": "default"},
}
"""Values Trinity-RFT writes into the config it saves (its defaults) under another name than rfthpc's, per
path under `algorithm`, case-insensitive: its `adam` builds the same AdamW its veRL trainer uses (veRL's
name `AdamW`), and its `warmup` strategy reads the experience buffer as `default` does once there is no
`sft_warmup_dataset` (refused: rfthpc's warm-up is a `stages:` entry)."""


def apply_trinity_value_names(raw: dict[str, Any], problems: Problems) -> None:
    """Read TRINITY_VALUE_NAMES' values as rfthpc's, in the run's and each stage's `algorithm` (in place),
    so that a config Trinity-RFT saved loads as it is; each is recorded for `config show`. A sample strategy
    rfthpc has not built yet (`rfthpc.not_built`) is refused, with what comes closest."""
    sections = [("algorithm", raw.get("algorithm"))]
    stages = raw.get("stages")
    if isinstance(stages, list):
        sections += [(f"stages[{i}].algorithm", st.get("algorithm")) for i, st in enumerate(stages)
                     if isinstance(st, dict)]
    for key, alg in sections:
        for path, names in TRINITY_VALUE_NAMES.items():
            parent = alg
            for part in path[:-1]:
                parent = parent.get(part) if isinstance(parent, dict) else None
            value = parent.get(path[-1]) if isinstance(parent, dict) else None
            ours = names.get(value.lower()) if isinstance(value, str) else None
            if ours is None or ours == value:
                continue
            parent[path[-1]] = ours
            where = ".".join((key, *path))
            problems.map(where, ours, where, "Trinity-RFT")
        strategy = alg.get("sample_strategy") if isinstance(alg, dict) else None
        refusal = not_built(SAMPLE_STRATEGY, strategy) if isinstance(strategy, str) else None
        if refusal is not None:
            del alg["sample_strategy"]  # reported here, not again as a bad choice
            problems.add(f"{key}.sample_strategy: {refusal}", REFUSED)


MIX_LOSSES = ("mix", "mix_chord")
"""Trinity-RFT's policy losses (and algorithm types) that train expert rows beside the rollouts."""
MIX_BOOKKEEPING = ("use_dynamic_bsz", "ppo_mini_batch_size", "ppo_micro_batch_size_per_gpu", "ngpus_trainer",
                   "train_batch_size_usual", "train_batch_size_expert", "read_batch_size_usual",
                   "read_batch_size_expert", "repeat_times")
"""Arguments of Trinity's mix losses that size its per-GPU weighting of the two terms (and, in its examples, the
group size again); rfthpc weighs each term exactly over its mini-batch, so it needs none of them."""


def _mixes(alg: Any) -> bool:
    """The algorithm section trains expert rows beside the rollouts (Trinity's mix or mix_chord)."""
    return isinstance(alg, dict) and (alg.get("algorithm_type") in MIX_LOSSES or alg.get("policy_loss_fn") in MIX_LOSSES
                                      or alg.get("sample_strategy") == "mix")


def apply_trinity_explore_batch_size(raw: dict[str, Any], problems: Problems) -> None:
    """Read Trinity-RFT's older `buffer.explore_batch_size` (tasks per explorer step, beside `batch_size`, then the
    trainer's tasks per step) as rfthpc's keys: `buffer.batch_size` (the explorers') and, unless set,
    `buffer.train_batch_size` = the old batch_size x algorithm.repeat_times (the preset's when unset), each recorded
    for `config show`."""
    buffer = raw.get("buffer")
    if not isinstance(buffer, dict) or "explore_batch_size" not in buffer:
        return
    from rfthpc.algorithms.presets import ALGORITHM_PRESETS

    explore = buffer.pop("explore_batch_size")
    alg = raw.get("algorithm") if isinstance(raw.get("algorithm"), dict) else {}
    repeat = alg.get("repeat_times") or ALGORITHM_PRESETS.get(alg.get("algorithm_type", "ppo"), {}).get("repeat_times")
    trainer_tasks = buffer.get("batch_size")
    if buffer.get("train_batch_size") is None and isinstance(trainer_tasks, int) and isinstance(repeat, int):
        buffer["train_batch_size"] = trainer_tasks * repeat
        problems.map("buffer.train_batch_size", buffer["train_batch_size"], "buffer.batch_size", "Trinity-RFT")
    buffer["batch_size"] = explore
    problems.map("buffer.batch_size", explore, "buffer.explore_batch_size", "Trinity-RFT")


def apply_trinity_expert_data(raw: dict[str, Any], problems: Problems) -> None:
    """Read a Trinity-RFT mix config (algorithm_type mix or mix_chord) as rfthpc's: its expert dataset given as
    `buffer.trainer_input.sft_warmup_dataset` (its older examples' form) becomes the auxiliary buffer the mix
    strategy reads (`sample_strategy_args.sft_dataset_name`, default `sft_dataset`), and the loss arguments that
    only size Trinity's per-GPU weighting (MIX_BOOKKEEPING) are dropped, with a note. Each change is recorded for
    `config show`."""
    alg = raw.get("algorithm")
    if not _mixes(alg):
        return
    args = alg.get("policy_loss_fn_args")
    if isinstance(args, dict):
        dropped = [k for k in MIX_BOOKKEEPING if k in args]
        for k in dropped:
            del args[k]
        if dropped:
            problems.notes.append(f"algorithm.policy_loss_fn_args: {', '.join(dropped)} size Trinity-RFT's per-GPU "
                                  "weighting of the rollouts' and the expert rows' terms; rfthpc averages each term "
                                  "over its own rows of the mini-batch, so they are not used")
    trainer_input = (raw.get("buffer") or {}).get("trainer_input") if isinstance(raw.get("buffer"), dict) else None
    if not isinstance(trainer_input, dict) or not isinstance(trainer_input.get("sft_warmup_dataset"), dict):
        return
    strategy_args = alg.get("sample_strategy_args") if isinstance(alg.get("sample_strategy_args"), dict) else {}
    name = strategy_args.get("sft_dataset_name", "sft_dataset")
    buffers = trainer_input.setdefault("auxiliary_buffers", {})
    if isinstance(buffers, dict) and name not in buffers:
        buffers[name] = trainer_input.pop("sft_warmup_dataset")
        problems.map(f"buffer.trainer_input.auxiliary_buffers.{name}", buffers[name].get("path"),
                     "buffer.trainer_input.sft_warmup_dataset", "Trinity-RFT")


DISTILL_WORKFLOWS = {"on_policy_distill_math_workflow": "math_boxed_workflow"}
"""Trinity-RFT's on-policy distillation workflows that rfthpc reads as its own workflow plus the teacher
scoring each sample (`explorer.teacher_model`), and that workflow. `on_policy_distill_math_workflow` asks for a `\\boxed{}` answer and rewards its
accuracy, as `math_boxed_workflow` does (rfthpc's asks in the system prompt, Trinity's after the question;
the reward is recorded, not trained on). Its plain sibling records no reward at all: `rfthpc.not_built`."""


def _workflow_sections(raw: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(key, section) of each place a Trinity config names its workflow: the buffer-wide default and each
    training taskset's own."""
    inputs = (raw.get("buffer") or {}).get("explorer_input") if isinstance(raw.get("buffer"), dict) else None
    if not isinstance(inputs, dict):
        return []
    out = [("buffer.explorer_input", inputs)]
    if isinstance(inputs.get("taskset"), dict):
        out.append(("buffer.explorer_input.taskset", inputs["taskset"]))
    tasksets = inputs.get("tasksets") if isinstance(inputs.get("tasksets"), list) else []
    out += [(f"buffer.explorer_input.tasksets[{i}]", ts) for i, ts in enumerate(tasksets) if isinstance(ts, dict)]
    return out


def apply_trinity_teacher(raw: dict[str, Any], problems: Problems) -> None:
    """Read a Trinity-RFT distillation config (workflow `on_policy_distill_math_workflow`, whose teacher is
    `explorer.auxiliary_models[0]`, served by its own engines and asked for each sampled token's
    log-probability) as rfthpc's: that model stays an auxiliary model, served as Trinity serves it, and
    becomes `explorer.teacher_model` (the explorer has it score each training sample); the workflow becomes
    DISTILL_WORKFLOWS' one. A config that sets `model.teacher_model_path` itself keeps that teacher, loaded
    in the trainer, and the auxiliary model leaves (no engines start for it). Each change is recorded for
    `config show`. Left as it is (and refused by name as a workflow not built) where the config has no
    auxiliary model to take."""
    named = [(key, section) for key, section in _workflow_sections(raw)
             if section.get("default_workflow_type") in DISTILL_WORKFLOWS]
    explorer = raw.get("explorer") if isinstance(raw.get("explorer"), dict) else {}
    auxiliary = explorer.get("auxiliary_models")
    if not named or not isinstance(auxiliary, list) or not auxiliary or not isinstance(auxiliary[0], dict):
        return
    teacher = auxiliary[0]
    if not isinstance(teacher.get("model_path"), str):
        return
    for key, section in named:
        workflow = DISTILL_WORKFLOWS[section["default_workflow_type"]]
        problems.map(f"{key}.default_workflow_type", workflow, f"{key}.default_workflow_type", "Trinity-RFT")
        section["default_workflow_type"] = workflow
    model = raw.get("model") if isinstance(raw.get("model"), dict) else {}
    if model.get("teacher_model_path") and not explorer.get("teacher_model"):
        del auxiliary[0]
        if not auxiliary:
            del explorer["auxiliary_models"]
        return
    name = teacher.get("name") or "auxiliary_0"
    set_mapped(raw, "explorer.teacher_model", name, "explorer.auxiliary_models[0]", "Trinity-RFT", problems)


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
    modes = [(raw.get("algorithm") or {}).get("loss_agg_mode")] + [
        (st.get("algorithm") or {}).get("loss_agg_mode") for st in stages
        if isinstance(st, dict) and isinstance(st.get("algorithm"), dict)]
    if "seq-mean-token-sum-norm" in modes:
        notes.append("algorithm.loss_agg_mode: seq-mean-token-sum-norm is veRL's: the summed loss divided by the "
                     "constant L and by the number of responses; Trinity-RFT's divides by L only, a loss that many "
                     "times larger: that is rfthpc's token-sum-norm")
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
        key = f"explorer.auxiliary_models[{i}]"
        # 1 is also the default: a config that does not say gets one engine per explorer too.
        if aux.placement == "per_explorer" and aux.engine_num not in (1, rm.engine_num):
            problems.append(
                f"{key}.engine_num: {aux.engine_num} with placement per_explorer; every explorer starts one engine of "
                f"it next to its rollout engine, so there are as many as explorers "
                f"(explorer.rollout_model.engine_num = {rm.engine_num}); set {rm.engine_num}, or placement: shared "
                f"for {aux.engine_num} engines serving every explorer"
            )
        if aux.placement == "shared" and aux.engine_type == "transformers" and cfg.mode != "train":
            problems.append(
                f"{key}.engine_type: transformers runs inside the explorer process only, and placement shared (the "
                "default) serves the model from vLLM's OpenAI-compatible server; set placement: per_explorer, or "
                "engine_type: vllm"
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

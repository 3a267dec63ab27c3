"""Where rfthpc differs from Trinity-RFT, veRL and ROLL, said out loud.

- keys Trinity-RFT or veRL renamed: both names are read as rfthpc's one key (`apply_renamed_keys`);
- veRL settings under `trainer.trainer_config` (`VERL_MAP`) and ROLL's keys (`ROLL_MAP`): mapped onto
  rfthpc's typed fields; the keys they do not map are ignored with a note or refused (foreign.py);
- values of accepted keys that rfthpc cannot honour (e.g. `bench_on_latest_checkpoint: true`): an
  error naming the reason and the fix, when the config is validated (`unsupported_values`);
- values rfthpc accepts but reads differently (e.g. `sync_method: nccl`): a note on stderr.

Each mapped value is recorded (`Problems.map`) for `rfthpc config show`; an explicit rfthpc key wins
over a mapped one, with a note when they differ.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rfthpc.config import foreign
from rfthpc.config.importing import flatten
from rfthpc.config.typed import ALGORITHM, INVALID, REFUSED, UNKNOWN, Problems
from rfthpc.errors import ConfigError

if TYPE_CHECKING:
    from rfthpc.config.schema import Config


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
    len = cache_length and L_max = model.max_response_tokens (rfthpc.explorer.shaping.OverlongPenalty):
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

REWARDS_ELSEWHERE = {
    "rm_gallery_reward": "calls RM-Gallery, which is not part of rfthpc; score with a reward model served as an "
                         "auxiliary model (math_rm_workflow) or an LLM judge (rubric_judge_workflow), or name your "
                         "own function as module:function",
}
OPENJUDGE = ("is one of Trinity-RFT's OpenJudge graders, which ask a judge model behind an outside "
             "OpenAI-compatible API (its reward_fn_args name the model and the environment variables holding "
             "the API's address and key); rfthpc's explorers call no outside service: remove it with its "
             "reward_fn_args, and judge with a model served as an auxiliary model (explorer.auxiliary_models) "
             "through math_rm_workflow or rubric_judge_workflow, or name your own function as module:function")
REWARDS_ELSEWHERE.update(dict.fromkeys(("openjudge_reward", "trajectory_accuracy_grader_reward",
                                        "openjudge_trajectory_accuracy_reward", "openjudge_multi_grader_reward"),
                                       OPENJUDGE))
"""Trinity-RFT's reward functions that rfthpc does not have, and why with the alternative (a refusal,
reported instead of an unknown reward function)."""

_ALFWORLD = ("plays ALFWorld (household tasks in TextWorld), a simulator with its own game files that is not part "
             "of rfthpc")
_OWN_ENVIRONMENT = ("; install it beside rfthpc and write its loop as a module:function workflow, or wrap it as an "
                    "rfthpc environment for env_workflow (docs/agents.md)")
WORKFLOWS_ELSEWHERE = {
    **dict.fromkeys(("alfworld_workflow", "step_wise_alfworld_workflow", "RAFT_alfworld_workflow",
                     "RAFT_reflect_alfworld_workflow"), _ALFWORLD + _OWN_ENVIRONMENT),
    "sciworld_workflow": "plays ScienceWorld, a Java simulator that is not part of rfthpc" + _OWN_ENVIRONMENT,
    "webshop_workflow": "plays WebShop, a web shop served with its product index, which is not part of rfthpc"
                        + _OWN_ENVIRONMENT,
    "intercode_sql_workflow": "runs each SQL query in InterCode's MySQL environment, a Docker container, which "
                              "rfthpc's explorers do not start" + _OWN_ENVIRONMENT,
}
"""Trinity-RFT's workflows that need a simulator or service rfthpc does not ship, and why with the
alternative (a refusal, reported instead of an unknown workflow)."""

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
        found = foreign.lookup(foreign.TRINITY_KEYS, f"{key}.{name}")
        if isinstance(found, foreign.Ignored):
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
        _rename(opt, "warmup_style", "lr_scheduler_type", "algorithm.optimizer", problems, _same_text)
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
    """Refuse Trinity-RFT's modes rfthpc does not have (foreign.TRINITY_MODES: bench, serve), in the run's
    and each stage's `mode`, with the reason and the alternative; each is taken out (not reported
    again as a bad choice), and a missing training taskset (a benchmark config has none) is covered
    by the refusal."""
    stages = raw.get("stages") if isinstance(raw.get("stages"), list) else []
    sections = [("mode", raw)] + [(f"stages[{i}].mode", st) for i, st in enumerate(stages) if isinstance(st, dict)]
    for key, section in sections:
        mode = section.get("mode")
        refused = foreign.TRINITY_MODES.get(mode.lower()) if isinstance(mode, str) else None
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
    by foreign.TRINITY_KEYS (ignored where the policy loss reads those log-probabilities anyway)."""
    alg = raw.get("algorithm")
    if not isinstance(alg, dict) or alg.get("bypass_old_logprobs") is not True:
        return
    rc = alg.get("rollout_correction") if isinstance(alg.get("rollout_correction"), dict) else {}
    given = {**((inherited or {}).get("algorithm") or {}), **alg}
    if foreign.policy_loss_of(given) != "ppo" or rc.get("loss_type", "ppo_clip") != "ppo_clip":
        return
    del alg["bypass_old_logprobs"]
    _set_mapped(raw, "algorithm.rollout_correction.bypass_mode", True, "algorithm.bypass_old_logprobs", "Trinity-RFT",
                problems)


def apply_sync_style_names(raw: dict[str, Any], problems: Problems) -> None:
    """Read Trinity-RFT's former sync_style names (`dynamic_by_explorer`, `dynamic_by_trainer`, which
    Trinity-RFT still accepts, in any case) as the current ones, in the run's and each stage's
    synchronizer section (in place). `fully_async`, Trinity-RFT's newest style, is a problem naming the
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
    so that a config Trinity-RFT saved loads as it is; each is recorded for `config show`."""
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




@dataclass(frozen=True)
class FnChoice:
    """A setting that chooses a function: `algorithm.<fn_key>` = translate(value, settings), where
    settings are all the settings of that framework given (some choices read two keys)."""

    fn_key: str
    translate: Callable[[Any, Mapping[str, Any]], str]


@dataclass(frozen=True)
class FnArg:
    """A setting that only some functions read: it becomes `algorithm.<fn_key>_args.<arg>` when the
    function chosen for `algorithm.<fn_key>` takes `arg`, and has no effect otherwise (as in veRL and
    ROLL, where each function reads its own settings from a shared config)."""

    fn_key: str
    arg: str


@dataclass(frozen=True)
class Translated:
    """A setting of a plain rfthpc key spelled differently: `target` = translate(value, settings); a
    None result sets nothing."""

    target: str
    translate: Callable[[Any, Mapping[str, Any]], Any]


@dataclass(frozen=True)
class ReadWith:
    """A setting only the mappings of `keys` read; it has no effect of its own (as in its framework)."""

    keys: str


Target = str | FnChoice | FnArg | Translated | ReadWith
"""What a mapped key of another framework sets: an rfthpc dotted key (the value as given), or one of the above."""

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
        raise ConfigError(f"{value!r}; veRL's controllers are 'fixed' and 'adaptive'")
    return value == "adaptive"


def _older_scheduler_name(value: Any, given: Mapping[str, Any]) -> Any:
    current = given.get(_ACTOR + "optim.lr_scheduler_type")
    if current is not None and not _same_text(current, value):
        raise ConfigError(f"lr_scheduler_type ({current}) and warmup_style ({value}, its older name) differ; keep "
                          "lr_scheduler_type")
    return value


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


# veRL trains a LoRA adapter when lora_rank > 0 (or lora_adapter_path is set) and reads its other
# LoRA settings only then; its default scale differs from Trinity-RFT's (rfthpc's): lora_alpha 16.
_VERL_LORA_RANK = "actor_rollout_ref.model.lora_rank"
VERL_LORA_ALPHA = 16


def _verl_lora(value: Any, given: Mapping[str, Any]) -> Any:
    return value if (given.get(_VERL_LORA_RANK) or 0) > 0 else None


def _verl_lora_rank(rank: Any, _given: Mapping[str, Any]) -> Any:
    return rank if rank else None  # 0: no adapter


# veRL path under trainer.trainer_config -> what it sets in rfthpc. A null value is veRL's "unset".
VERL_MAP: dict[str, Target] = {
    "actor_rollout_ref.model.path": "model.model_path",
    "actor_rollout_ref.model.custom_chat_template": "model.custom_chat_template",
    "actor_rollout_ref.model.enable_gradient_checkpointing": "trainer.enable_gradient_checkpointing",
    _VERL_LORA_RANK: Translated("model.lora.lora_rank", _verl_lora_rank),
    "actor_rollout_ref.model.lora_alpha": Translated("model.lora.lora_alpha", _verl_lora),
    "actor_rollout_ref.model.target_modules": Translated("model.lora.target_modules", _verl_lora),
    "actor_rollout_ref.model.exclude_modules": Translated("model.lora.exclude_modules", _verl_lora),
    "actor_rollout_ref.model.lora_adapter_path": "model.lora.path",
    "actor_rollout_ref.model.use_remove_padding": "trainer.use_remove_padding",
    "actor_rollout_ref.actor.use_remove_padding": "trainer.use_remove_padding",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "trainer.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "trainer.ppo_mini_batch_size",
    "actor_rollout_ref.actor.ppo_epochs": "trainer.ppo_epochs",
    "actor_rollout_ref.actor.use_dynamic_bsz": "trainer.use_dynamic_bsz",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": "trainer.max_token_len_per_gpu",
    "actor_rollout_ref.actor.grad_clip": "trainer.grad_clip",
    "actor_rollout_ref.actor.optim.clip_grad": "trainer.grad_clip",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": "trainer.ulysses_sequence_parallel_size",
    "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size": "trainer.ulysses_sequence_parallel_size",
    "actor_rollout_ref.actor.fsdp_config.param_offload": "trainer.param_offload",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": "trainer.optimizer_offload",
    "actor_rollout_ref.actor.optim.lr": "algorithm.optimizer.lr",
    "actor_rollout_ref.actor.optim.lr_warmup_steps": "algorithm.optimizer.lr_warmup_steps",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": "algorithm.optimizer.lr_warmup_steps_ratio",
    "actor_rollout_ref.actor.optim.lr_scheduler_type": "algorithm.optimizer.lr_scheduler_type",
    "actor_rollout_ref.actor.optim.warmup_style": Translated("algorithm.optimizer.lr_scheduler_type",
                                                             _older_scheduler_name),
    "actor_rollout_ref.actor.optim.min_lr_ratio": "algorithm.optimizer.min_lr_ratio",
    "actor_rollout_ref.actor.optim.weight_decay": "algorithm.optimizer.weight_decay",
    "actor_rollout_ref.actor.optim.betas": "algorithm.optimizer.betas",
    "actor_rollout_ref.actor.entropy_coeff": "algorithm.entropy_loss_fn_args.entropy_coef",
    "actor_rollout_ref.actor.loss_agg_mode": "algorithm.loss_agg_mode",
    "actor_rollout_ref.actor.loss_scale_factor": "algorithm.loss_scale_factor",
    "actor_rollout_ref.actor.policy_loss.loss_mode": FnChoice(
        "policy_loss_fn", lambda name, _given: VERL_POLICY_LOSSES.get(str(name), str(name))),
    "actor_rollout_ref.actor.clip_ratio": FnArg("policy_loss_fn", "clip_range"),
    "actor_rollout_ref.actor.clip_ratio_low": FnArg("policy_loss_fn", "clip_range_low"),
    "actor_rollout_ref.actor.clip_ratio_high": FnArg("policy_loss_fn", "clip_range_high"),
    "actor_rollout_ref.actor.clip_ratio_c": FnArg("policy_loss_fn", "clip_ratio_c"),
    "actor_rollout_ref.actor.tau_pos": FnArg("policy_loss_fn", "tau_pos"),
    "actor_rollout_ref.actor.tau_neg": FnArg("policy_loss_fn", "tau_neg"),
    **{f"actor_rollout_ref.actor.policy_loss.{verl}": FnArg("policy_loss_fn", ours)
       for verl, ours in (("clip_cov_ratio", "clip_cov_ratio"), ("clip_cov_lb", "clip_cov_lb"),
                          ("clip_cov_ub", "clip_cov_ub"), ("kl_cov_ratio", "kl_cov_ratio"),
                          ("ppo_kl_coef", "ppo_kl_coef"), ("dro_beta", "beta"))},
    _USE_KL_LOSS: FnChoice("kl_loss_fn", _kl_loss_from_flag),
    _KL_LOSS_TYPE: FnChoice("kl_loss_fn", _kl_loss_from_type),
    "actor_rollout_ref.actor.kl_loss_coef": "algorithm.kl_loss_fn_args.kl_coef",
    "algorithm.adv_estimator": FnChoice(
        "advantage_fn", lambda name, _given: VERL_ADVANTAGES.get(str(name), str(name))),
    "algorithm.norm_adv_by_std_in_grpo": FnArg("advantage_fn", "std_normalize"),
    "algorithm.gamma": FnArg("advantage_fn", "gamma"),
    "algorithm.lam": FnArg("advantage_fn", "lam"),
    _USE_KL_IN_REWARD: FnChoice("kl_penalty_fn", _kl_penalty_from_flag),
    _KL_PENALTY: FnChoice("kl_penalty_fn", _kl_penalty_from_type),
    "algorithm.kl_ctrl.type": Translated("algorithm.kl_penalty_fn_args.adaptive", _kl_ctrl_type),
    "algorithm.kl_ctrl.kl_coef": "algorithm.kl_penalty_fn_args.kl_coef",
    "algorithm.kl_ctrl.horizon": "algorithm.kl_penalty_fn_args.horizon",
    "algorithm.kl_ctrl.target_kl": "algorithm.kl_penalty_fn_args.target_kl",
    "critic.model.path": "model.critic_model_path",
    "critic.model.enable_gradient_checkpointing": "trainer.enable_gradient_checkpointing",
    "critic.model.use_remove_padding": "trainer.use_remove_padding",
    "critic.model.fsdp_config.param_offload": "trainer.param_offload",
    "critic.model.fsdp_config.optimizer_offload": "trainer.optimizer_offload",
    "critic.optim.lr": "trainer.critic_lr",
    "critic.optim.lr_warmup_steps_ratio": "trainer.critic_lr_warmup_steps_ratio",
    "critic.ppo_micro_batch_size_per_gpu": "trainer.ppo_micro_batch_size_per_gpu",
    "trainer.critic_warmup": "trainer.critic_warmup",
    "trainer.max_actor_ckpt_to_keep": "trainer.max_checkpoints_to_keep",
    "trainer.remove_previous_ckpt_in_save": Translated("trainer.max_checkpoints_to_keep",
                                                       lambda remove, _given: 1 if remove else None),
    # DAPO: dynamic sampling and the overlong penalty (veRL's DAPO recipe passes the latter as the
    # reward manager's overlong_buffer_cfg; veRL's own trainer config has it under reward_model).
    "algorithm.filter_groups.enable": "algorithm.filter_groups.enable",
    "algorithm.filter_groups.metric": "algorithm.filter_groups.metric",
    "algorithm.filter_groups.max_num_gen_batches": "algorithm.filter_groups.max_num_gen_batches",
    **{f"{prefix}.{key}": f"algorithm.overlong_buffer.{key}"
       for prefix in ("reward_model.overlong_buffer", "reward_model.reward_kwargs.overlong_buffer_cfg",
                      "reward.reward_kwargs.overlong_buffer_cfg")
       for key in ("enable", "len", "penalty_factor")},
    **{f"algorithm.rollout_correction.{k}": f"algorithm.rollout_correction.{k}" for k in (
        "rollout_is", "rollout_is_threshold", "rollout_is_batch_normalize", "rollout_rs", "rollout_rs_threshold",
        "bypass_mode", "loss_type")},
}




ROLL_PG_VARIANTS = ("vanilla", "tis", "topr", "cispo", "kimi15", "ppo")
"""ROLL's `pg_variant` values; each is the rfthpc policy loss of the same name (ROLL's `vanilla` is the
plain policy gradient, as rfthpc's)."""


def _roll_pg_variant(variant: Any, _given: Mapping[str, Any]) -> str:
    if variant not in ROLL_PG_VARIANTS:
        raise ConfigError(f"{variant!r}; ROLL's variants rfthpc has: {', '.join(ROLL_PG_VARIANTS)} (or set "
                          "algorithm.policy_loss_fn)")
    return str(variant)


def _roll_kl(use: Any, given: Mapping[str, Any]) -> str:
    """ROLL switches each KL term with a flag and names the estimator of both in `kl_penalty`."""
    return str(given.get("kl_penalty") or "kl") if use else "none"


def _roll_dtype(value: Any, _given: Mapping[str, Any]) -> Any:
    return {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(value, value)


def _roll_resume(value: Any, _given: Mapping[str, Any]) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigError(f"{value!r}: rfthpc resumes from the newest checkpoint in its own run directory "
                      "(continue_from_checkpoint: true); to start from another model, set model.model_path")


_INFER = "actor_infer.strategy_args.strategy_config."
_ROLL_LORA = "actor_train.model_args."
ROLL_LORA_RANK = 8
"""ROLL's default rank; its default lora_alpha is twice the rank."""


def _roll_lora(value: Any, given: Mapping[str, Any]) -> Any:
    # ROLL trains an adapter when lora_target is set, and reads its other LoRA settings only then.
    return value if given.get(_ROLL_LORA + "lora_target") else None


def roll_lora_target(target: Any, _given: Mapping[str, Any] | None = None) -> Any:
    """ROLL's lora_target: `all-linear`, layer names separated by commas, or a regular expression."""
    if not isinstance(target, str) or any(c in target for c in "*$|("):
        return target
    names = [name.strip() for name in target.split(",") if name.strip()]
    return names[0] if names == ["all-linear"] else names

ROLL_MAP: dict[str, Target] = {
    "pretrain": "model.model_path",
    "exp_name": "name",
    "rollout_batch_size": "buffer.batch_size",
    "num_return_sequences_in_group": "algorithm.repeat_times",
    "prompt_length": "model.max_prompt_tokens",
    "response_length": "model.max_response_tokens",
    "sequence_length": "model.max_model_len",
    "max_steps": "buffer.total_steps",
    "save_steps": "trainer.save_interval",
    "eval_steps": "explorer.eval_interval",
    "max_ckpt_to_keep": Translated("trainer.max_checkpoints_to_keep", lambda keep, _given: keep or None),
    "resume_from_checkpoint": Translated("continue_from_checkpoint", _roll_resume),
    "track_with": Translated("monitor.monitor_type", lambda sink, _given: "console" if sink == "stdout" else sink),
    "num_nodes": "cluster.node_num",
    "num_gpus_per_node": "cluster.gpu_per_node",
    "ppo_epochs": "trainer.ppo_epochs",
    "max_grad_norm": "trainer.grad_clip",
    "critic_warmup": "trainer.critic_warmup",
    "adv_estimator": FnChoice("advantage_fn", lambda name, _given: str(name)),
    "pg_variant": FnChoice("policy_loss_fn", _roll_pg_variant),
    "loss_agg_mode": "algorithm.loss_agg_mode",
    "entropy_loss_coef": "algorithm.entropy_loss_fn_args.entropy_coef",
    "use_kl_loss": FnChoice("kl_loss_fn", _roll_kl),
    "kl_loss_coef": "algorithm.kl_loss_fn_args.kl_coef",
    "add_token_level_kl": FnChoice("kl_penalty_fn", _roll_kl),
    "init_kl_coef": "algorithm.kl_penalty_fn_args.kl_coef",
    "kl_penalty": ReadWith("use_kl_loss, add_token_level_kl"),
    "lambd": FnArg("advantage_fn", "lam"),
    "gamma": FnArg("advantage_fn", "gamma"),
    "pg_clip": FnArg("policy_loss_fn", "clip_range"),
    "actor_train.pg_variant": FnChoice("policy_loss_fn", _roll_pg_variant),
    "actor_train.topr_positive_weight": FnArg("policy_loss_fn", "positive_weight"),
    "actor_train.topr_negative_weight": FnArg("policy_loss_fn", "negative_weight"),
    "actor_train.model_args.model_name_or_path": "model.model_path",
    _ROLL_LORA + "lora_target": Translated("model.lora.target_modules", roll_lora_target),
    **{_ROLL_LORA + k: Translated(f"model.lora.{k}", _roll_lora) for k in ("lora_rank", "lora_alpha", "lora_dropout")},
    _ROLL_LORA + "adapter_name_or_path": Translated("model.lora.path", _roll_lora),
    "actor_train.model_args.dtype": Translated("model.dtype", _roll_dtype),
    "actor_train.model_args.ulysses_size": Translated("trainer.ulysses_sequence_parallel_size",
                                                      lambda size, _given: size or 1),
    "actor_train.model_args.disable_gradient_checkpointing": Translated(
        "trainer.enable_gradient_checkpointing", lambda disable, _given: not disable),
    "actor_train.training_args.learning_rate": "algorithm.optimizer.lr",
    "actor_train.training_args.weight_decay": "algorithm.optimizer.weight_decay",
    "actor_train.training_args.warmup_steps": "algorithm.optimizer.lr_warmup_steps",
    "actor_train.training_args.warmup_ratio": "algorithm.optimizer.lr_warmup_steps_ratio",
    "actor_train.training_args.lr_scheduler_type": "algorithm.optimizer.lr_scheduler_type",
    "actor_train.training_args.per_device_train_batch_size": "trainer.ppo_micro_batch_size_per_gpu",
    "actor_train.training_args.save_hf_model": Translated("trainer.save_hf_checkpoint",
                                                          lambda save, _given: "always" if save else None),
    "actor_train.use_dynamic_batching_in_train": "trainer.use_dynamic_bsz",
    "actor_train.max_tokens_per_microbatch_in_train": "trainer.max_token_len_per_gpu",
    "actor_infer.model_args.dtype": Translated("explorer.rollout_model.dtype", _roll_dtype),
    "actor_infer.generating_args.max_new_tokens": "model.max_response_tokens",
    "actor_infer.generating_args.temperature": "model.temperature",
    "actor_infer.generating_args.top_p": "model.top_p",
    "actor_infer.generating_args.top_k": "model.top_k",
    "actor_infer.generating_args.logprobs": "model.logprobs",
    "actor_infer.generating_args.num_return_sequences": "algorithm.repeat_times",
    **{_INFER + k: f"explorer.rollout_model.{k}" for k in (
        "gpu_memory_utilization", "tensor_parallel_size", "enforce_eager", "enable_prefix_caching",
        "enable_chunked_prefill")},
    "critic.model_args.model_name_or_path": "model.critic_model_path",
    "critic.training_args.learning_rate": "trainer.critic_lr",
    "critic.training_args.warmup_ratio": "trainer.critic_lr_warmup_steps_ratio",
}
"""ROLL keys (top level, or dotted within a role section) -> what they set in rfthpc. A null value is
ROLL's "unset". `async_generation_ratio` is read by `apply_roll_keys` itself."""


def _async_generation_ratio(raw: dict[str, Any], problems: Problems) -> None:
    """ROLL's `async_generation_ratio: N` (generation runs N batches ahead of training; 0 is
    synchronous) is `synchronizer.sync_interval: 1, sync_offset: N`; a synchronizer section that says
    otherwise is a problem, since the two would disagree on the staleness bound."""
    ratio = raw.pop("async_generation_ratio")
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio < 0 or ratio != int(ratio):
        problems.add(f"async_generation_ratio: {ratio!r}; use a whole number >= 0 (ROLL: batches generated ahead "
                     "of training; rfthpc's synchronizer.sync_offset)")
        return
    sync = raw.setdefault("synchronizer", {})
    if not isinstance(sync, dict):
        return  # typed conversion reports it
    wanted = {"sync_interval": 1, "sync_offset": int(ratio)}
    clash = {k: sync[k] for k, v in wanted.items() if sync.get(k) is not None and sync[k] != v}
    if clash:
        given = ", ".join(f"synchronizer.{k}: {v}" for k, v in clash.items())
        problems.add(f"async_generation_ratio: {int(ratio)} means synchronizer.sync_interval: 1 and sync_offset: "
                     f"{int(ratio)}, but the config sets {given}; keep one of the two")
        return
    for key, value in wanted.items():
        if sync.get(key) is None:
            sync[key] = value
            problems.map(f"synchronizer.{key}", value, "async_generation_ratio", "ROLL")


def apply_roll_keys(raw: dict[str, Any], problems: Problems) -> None:
    """Take ROLL's keys out of `raw` (in place): its top-level keys and role sections (foreign.ROLL_SECTIONS).
    Each is mapped onto rfthpc's keys (ROLL_MAP; an explicit rfthpc key wins), ignored with a note or
    refused (foreign.ROLL_KEYS); any other key of a role section is refused by the section's entry."""
    if "async_generation_ratio" in raw:
        _async_generation_ratio(raw, problems)
    flat: dict[str, Any] = {}
    for key in list(raw):
        if key in foreign.ROLL_SECTIONS:
            value = raw.pop(key)
            flat.update(flatten(value, key) if isinstance(value, dict) else {key: value})
        elif key in ROLL_MAP or key in foreign.ROLL_KEYS:
            flat[key] = raw.pop(key)
    if flat:
        reading = _read(flat, flat, ROLL_MAP, foreign.ROLL_KEYS, "ROLL", "", problems)
        if "model.lora.target_modules" in reading.targets:
            rank = reading.targets.setdefault("model.lora.lora_rank", (ROLL_LORA_RANK, "ROLL's default lora_rank"))[0]
            _lora_default(reading, "lora_alpha", 2 * rank, "ROLL's default lora_alpha (twice lora_rank)")
        _apply(raw, reading, problems, "ROLL")


@dataclass
class _Reading:
    """What another framework's settings stand for in rfthpc."""

    targets: dict[str, tuple[Any, str]]
    """rfthpc dotted key -> (value, the key it was read from)."""
    fn_args: dict[tuple[str, str], tuple[Any, str]]
    """(fn_key, argument) -> (value, the key it was read from): set if the chosen function takes it."""


def _answer(key: str, value: Any, given: Mapping[str, Any], answers: Mapping[str, foreign.Answer],
            known: list[str], framework: str, where: str, problems: Problems) -> None:
    """Say what becomes of a key no mapping reads: ignored (a note), refused, or unknown."""
    found = foreign.answer(answers, key, value, given)
    if isinstance(found, foreign.Ignored):
        problems.ignored(where, found.why)
    elif isinstance(found, foreign.Refused):
        problems.refuse(where, framework, found.why)
    else:
        close = foreign.close_key(key, known)
        hint = f" (did you mean {close}?)" if close else ""
        problems.add(f"{where}: unknown {framework} key{hint}; docs/migration.md lists the {framework} keys rfthpc "
                     "maps, ignores or refuses", UNKNOWN)


def _read(flat: dict[str, Any], given: Mapping[str, Any], mapping: Mapping[str, Target],
          answers: Mapping[str, foreign.Answer], framework: str, prefix: str, problems: Problems) -> _Reading:
    """What `framework`'s settings `flat` (dotted key -> value, written under `prefix` in the config)
    stand for: rfthpc settings and function arguments. `given`: every setting of it in force (a
    mapping may read two). Keys `mapping` does not read are answered from `answers`."""
    out = _Reading({}, {})
    known = [*mapping, *answers]
    for key, value in flat.items():
        where = prefix + key
        if key.rsplit(".", 1)[-1] == "_target_" or value == {}:
            continue  # Hydra's class to instantiate (in dumped configs), or an empty section: nothing to set
        target = mapping.get(key)
        if target is None:
            _answer(key, value, given, answers, known, framework, where, problems)
            continue
        if value is None or isinstance(target, ReadWith):
            continue  # null is "unset"
        if isinstance(target, FnArg):
            out.fn_args.setdefault((target.fn_key, target.arg), (value, where))
            continue
        try:
            if isinstance(target, FnChoice):
                target, value = f"algorithm.{target.fn_key}", target.translate(value, given)
            elif isinstance(target, Translated):
                target, value = target.target, target.translate(value, given)
        except ConfigError as e:
            problems.add(f"{where}: {e}", ALGORITHM if isinstance(target, FnChoice) else INVALID)
            continue
        if value is None:
            continue
        if target in out.targets:
            first, first_key = out.targets[target]
            if first != value:
                problems.notes.append(f"{where}: {value!r} is not used: {first_key} ({first!r}) sets {target} too")
            continue
        out.targets[target] = (value, where)
    return out


def _set_mapped(raw: dict[str, Any], target: str, value: Any, where: str, framework: str,
                problems: Problems) -> None:
    """Set the dotted `target` of the raw config to `value`, read from `where`, unless the config sets
    it itself (a null does not): then a note if the two differ."""
    *parents, leaf = target.split(".")
    node = raw
    for p in parents:
        child = node.get(p)
        if child is None:
            child = node[p] = {}
        if not isinstance(child, dict):
            return  # typed conversion reports the section that is not a mapping
        node = child
    if node.get(leaf) is None:
        node[leaf] = value
        problems.map(target, value, where, framework)
    elif node[leaf] != value:
        problems.notes.append(f"{where}: {value!r} is not used: the config sets {target}: {node[leaf]!r}")


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


def _apply(raw: dict[str, Any], reading: _Reading, problems: Problems, framework: str,
           inherited: Mapping[str, Any] | None = None) -> None:
    """Set what `reading` stands for in the raw config (explicit rfthpc keys win); a function argument
    only where the function `raw` (or `inherited`, the run's raw config for a stage) chooses takes it."""
    for target, (value, where) in reading.targets.items():
        _set_mapped(raw, target, value, where, framework, problems)
    alg = raw.get("algorithm") if isinstance(raw.get("algorithm"), dict) else {}
    base = (inherited or {}).get("algorithm") or {}
    algorithm_type = alg.get("algorithm_type") or base.get("algorithm_type")
    for (fn_key, arg), (value, where) in reading.fn_args.items():
        if _takes(fn_key, _function(fn_key, alg.get(fn_key) or base.get(fn_key), algorithm_type), arg):
            _set_mapped(raw, f"algorithm.{fn_key}_args.{arg}", value, where, framework, problems)


def _lora_default(reading: _Reading, key: str, value: Any, framework_default: str) -> None:
    """Where another framework trains an adapter but leaves `model.lora.<key>` to its own default,
    which differs from rfthpc's, read that default."""
    if "model.lora.lora_rank" in reading.targets and f"model.lora.{key}" not in reading.targets:
        reading.targets[f"model.lora.{key}"] = (value, framework_default)


def apply_verl_trainer_config(raw: dict[str, Any], problems: Problems, inherited: Mapping[str, Any] | None = None
                              ) -> None:
    """Map veRL keys in the raw config's `trainer.trainer_config` onto rfthpc fields (explicit rfthpc
    keys win); the others are ignored with a note or refused (foreign.VERL_KEYS). Used for the YAML
    and for each stage's sections (`inherited`: the run's raw config, which supplies the algorithm a
    stage does not set itself)."""
    trainer = raw.get("trainer")
    verl = trainer.get("trainer_config") if isinstance(trainer, dict) else None
    if not isinstance(verl, dict):
        return  # none, or not a mapping: typed conversion reports that
    map_verl_settings(raw, flatten(verl), problems, "trainer.trainer_config.", inherited)


def map_verl_settings(raw: dict[str, Any], flat: dict[str, Any], problems: Problems, prefix: str = "",
                      inherited: Mapping[str, Any] | None = None) -> None:
    """Set in the raw config `raw` what the veRL settings `flat` (veRL's dotted key -> value, written
    under `prefix` in messages) stand for (VERL_MAP; explicit rfthpc keys win); the keys it does not
    map are ignored with a note or refused (foreign.VERL_KEYS), any other is an unknown key. Used for
    `trainer.trainer_config` and by `rfthpc config import --from verl`, so each veRL key has one meaning."""
    reading = _read(flat, flat, VERL_MAP, foreign.VERL_KEYS, "veRL", prefix, problems)
    _lora_default(reading, "lora_alpha", VERL_LORA_ALPHA, "veRL's default of actor_rollout_ref.model.lora_alpha")
    _apply(raw, reading, problems, "veRL", inherited)


def _given_on_command_line(target: str, given: set[str]) -> bool:
    """Whether the override list sets `target` itself or a mapping holding it (`--algorithm.policy_loss_fn_args`)."""
    parts = target.split(".")
    return any(f"--{'.'.join(parts[:n])}" in given for n in range(1, len(parts) + 1))


def apply_verl_overrides(cfg: Config, before: dict[str, Any], args: list[str], problems: Problems) -> bool:
    """Map the veRL settings that command-line overrides changed in `cfg.trainer.trainer_config`
    (`before`: its value from the YAML) onto rfthpc fields, unless the same override list sets
    that rfthpc field itself. True if a field was set."""
    old = flatten(before)
    now = flatten(cfg.trainer.trainer_config)
    changed = {k: v for k, v in now.items() if k not in old or old[k] != v}
    given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    prefix = "--trainer.trainer_config."
    reading = _read(changed, now, VERL_MAP, foreign.VERL_KEYS, "veRL", prefix, problems)
    targets = {t: v for t, v in reading.targets.items() if not _given_on_command_line(t, given)}
    for target, (value, where) in targets.items():
        _set_path(cfg, target, value)
        problems.map(target, value, where, "veRL")
    # A function chosen anew gets the veRL arguments it takes, from all of trainer_config; those the
    # YAML's function took and it does not are dropped (veRL's settings follow veRL's choice). The
    # whole trainer_config was answered when the YAML was read: no second note here.
    chosen_anew = {t.split(".", 1)[1] for t in targets} & {"policy_loss_fn", "advantage_fn"}
    fn_args = dict(reading.fn_args)
    for (fn_key, arg), found in _read(now, now, VERL_MAP, {}, "veRL", prefix, Problems("")).fn_args.items():
        if fn_key in chosen_anew:
            fn_args.setdefault((fn_key, arg), found)
    alg = cfg.algorithm
    changed_any = bool(targets)
    for (fn_key, arg), (value, where) in fn_args.items():
        target = f"algorithm.{fn_key}_args.{arg}"
        if _given_on_command_line(target, given):
            continue
        fn_args_now = getattr(alg, f"{fn_key}_args")
        if _takes(fn_key, _function(fn_key, getattr(alg, fn_key), alg.algorithm_type), arg):
            fn_args_now[arg] = value
            problems.map(target, value, where, "veRL")
            changed_any = True
        elif fn_key in chosen_anew and arg in fn_args_now and fn_args_now[arg] == value:
            del fn_args_now[arg]
            changed_any = True
    return changed_any


def _set_path(cfg: Config, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node: Any = cfg
    for p in parents:
        node = node[p] if isinstance(node, dict) else getattr(node, p)
    if isinstance(node, dict):
        node[leaf] = value
    else:
        setattr(node, leaf, value)

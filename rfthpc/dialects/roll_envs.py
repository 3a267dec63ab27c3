"""ROLL's agentic environments (`custom_envs`, `train_env_manager`, `val_env_manager`) as rfthpc
tasksets of environment seeds for `env_workflow`.

ROLL runs `num_env_groups` groups of `group_size` environments; a group shares a random seed, and each
episode it plays starts from the next seed. rfthpc hands out tasks instead: a task is one seed, its
group is `repeat_times` episodes of that seed. So the import writes the seeds: a training taskset of
`max_steps x groups per step` rows (each seed played once, as in ROLL) and one eval taskset per
validation environment with ROLL's number of episodes per evaluation (the same seeds at every
evaluation, where ROLL draws new ones). Rows are `{"prompt": "<tag> seed <s>", "env_args": {"seed": s}}`;
training seeds are 0, 1, ...; eval environment k uses (k + 1) * 10**9 + i.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rfthpc.dialects.translation import ROLL_DEFAULT, Translation

EVAL_SEED_BASE = 10**9

_ENVS = {"frozen_lake": "frozen_lake", "sokoban": "sokoban"}
_DEFAULTS = {
    "frozen_lake": {"size": 4, "p": 0.8, "is_slippery": True, "max_steps": 20},
    "sokoban": {"dim_room": [10, 10], "num_boxes": 4, "search_depth": 300, "max_steps": 20},
}
"""ROLL's environment defaults (its FrozenLakeEnv and SokobanEnv), written where the config leaves them out:
rfthpc's own differ (e.g. FrozenLake is slippery in ROLL by default, not in rfthpc)."""
_OTHER_ENV = "rfthpc's built-in environments are frozen_lake and sokoban (or your own class as workflow_args.env, " \
             "docs/agents.md)"
_ENVS_MISSING = {
    "sokoban_native_env": "ROLL's native-mode Sokoban (SokobanNativeEnv, played step by step by "
                          "AgentNativeStepEnvManager) is not in rfthpc; its sokoban plays whole trajectories: use "
                          "env_type sokoban",
}
"""ROLL environments of features rfthpc does not have, and what the refusal says."""
_TEXT_KEYS = ("action_pattern", "grid_lookup", "grid_vocab", "action_lookup", "map_lookup", "env_instruction",
              "special_token_list")
_TRAJ_MANAGER = "roll.pipeline.agentic.env_manager.traj_env_manager.TrajEnvManager"
_STEP_MANAGER = "roll.pipeline.agentic.env_manager.step_env_manager.StepEnvManager"
STEP_ESTIMATORS = ("step_reinforce", "gigpo")
"""ROLL's estimators of step samples (StepEnvManager's), rfthpc's step-wise advantages of the same names."""
_MANAGER_DEFAULTS = {"worker_cls": "roll.pipeline.agentic.environment_worker.EnvironmentWorker",
                     "group_filter_cls": "roll.pipeline.agentic.agentic_pipeline.GroupFilter"}


def translate_envs(t: Translation, tasks_dir: Path, *, groups: int, n: int, engines: int,
                   max_new_tokens: int | None) -> dict[Path, list[dict[str, Any]]]:
    """The env tasksets; their rows keyed by the file they go to under `tasks_dir`."""
    files: dict[Path, list[dict[str, Any]]] = {}
    t.set("buffer.explorer_input.default_workflow_type", "env_workflow", "custom_envs (multi-turn episodes)")
    used: list[str] = []
    train = _manager(t, "train_env_manager")
    if train is not None:
        tags, _ = train
        if len(tags) != 1:
            t.refuse("train_env_manager.tags", f"{tags}: ROLL mixes these environments in every batch; rfthpc's "
                                               "explorers work through one taskset after another, so import one "
                                               "environment at a time")
        else:
            tag = tags[0]
            env = _env(t, tag, max_new_tokens)
            if env is not None:
                used.append(tag)
                steps = t.whole("max_steps", 500)
                path = tasks_dir / "train.jsonl"
                files[path] = _rows(tag, range(steps * groups))
                ts = "buffer.explorer_input.tasksets[0]"
                _taskset(t, ts, tag, path, env, f"max_steps x rollout_batch_size / group_size = {steps * groups} "
                                                 "seeds, each played once", "train_env_manager.tags")
                _step_wise(t, tag, ts)
                concurrent = t.whole("train_env_manager.num_env_groups", 128)
                t.set("explorer.runner_per_model", -(-concurrent // engines),
                      f"train_env_manager.num_env_groups ({concurrent} groups at once over {engines} engines)")
    val = _manager(t, "val_env_manager")
    if val is not None:
        tags, partition = val
        episodes = t.whole("val_batch_size", 128)
        size = t.whole("val_env_manager.group_size", 1)
        envs = t.whole("val_env_manager.num_env_groups", 128) * size
        if episodes <= 0 or episodes % envs:
            t.refuse("val_batch_size", f"{episodes}: ROLL needs a multiple of val_env_manager's environments "
                                       f"({envs}); rfthpc evaluates a fixed number of episodes")
        else:
            for k, (tag, share) in enumerate(zip(tags, partition, strict=False)):
                env = _env(t, tag, max_new_tokens)
                if env is None:
                    continue
                used.append(tag)
                count = share * episodes // envs
                path = tasks_dir / f"eval_{tag}.jsonl"
                files[path] = _rows(tag, range((k + 1) * EVAL_SEED_BASE, (k + 1) * EVAL_SEED_BASE + count))
                ts = f"buffer.explorer_input.eval_tasksets[{k}]"
                _taskset(t, ts, tag, path, env, f"val_env_manager.num_groups_partition ({share} of "
                                                f"val_env_manager.num_env_groups {envs // size}) x val_batch_size "
                                                f"{episodes}",
                         "val_env_manager.tags")
                t.set(f"{ts}.repeat_times", size, "val_env_manager.group_size")
            every = t.get("eval_steps", 10)
            t.set("explorer.eval_interval", every, "eval_steps" if t.has("eval_steps") else ROLL_DEFAULT)
            t.set("explorer.eval_on_startup", True, "ROLL evaluates at step 0")
            t.notes.append("val_env_manager: every evaluation plays the same seeds (ROLL draws new ones), so "
                           "evaluations compare like with like")
    else:
        t.note(["eval_steps", "val_batch_size"], "no effect: the config has no val_env_manager")
    for tag in t.keys("custom_envs"):
        if tag not in used:
            t.note(f"custom_envs.{tag}", "defined, but no env manager uses it")
    return files


def _rows(tag: str, seeds: range) -> list[dict[str, Any]]:
    return [{"prompt": f"{tag} seed {s}", "env_args": {"seed": s}} for s in seeds]


def _manager(t: Translation, key: str) -> tuple[list[str], list[int]] | None:
    """An env manager's tags and groups per tag; None if it has none."""
    if not t.has(key):
        return None
    tags = t.get(f"{key}.tags", ["SimpleSokoban"])
    partition = t.get(f"{key}.num_groups_partition", [128])
    groups = t.whole(f"{key}.num_env_groups", 128)
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        t.refuse(f"{key}.tags", f"{tags!r}: expected a list of custom_envs names")
        return None
    if (not isinstance(partition, list) or not all(isinstance(n, int) for n in partition)
            or sum(partition[:len(tags)]) != groups or len(partition) < len(tags)):
        t.refuse(f"{key}.num_groups_partition", f"{partition} for tags {tags}: ROLL needs one entry per tag, "
                                                f"summing to num_env_groups ({groups})")
        return None
    if len(tags) == 1:
        t.same.append(f"{key}.num_groups_partition: {partition[:1]} (one environment)")
    for name, default in _MANAGER_DEFAULTS.items():
        t.same_if(f"{key}.{name}", default, "the importer knows ROLL's own environment workers")
    t.same_if(f"{key}.llm_proxy.proxy_type", "policy", "rfthpc's episodes are played by the policy")
    t.note(f"{key}.llm_proxy.proxy_config", "no effect with the policy proxy")
    t.note([f"{key}.max_env_num_per_worker", f"{key}.max_traj_per_env", f"{key}.group_size_redundancy"],
           "ROLL's environment workers; rfthpc plays explorer.runner_per_model tasks per engine at once")
    t.note(f"{key}.format_penalty", "no effect in ROLL (nothing reads the env manager's format_penalty); the "
                                    "environments' env_config.format_penalty is the penalty")
    t.note(f"{key}.generating_args", "ROLL replaces it by actor_infer.generating_args")
    t.note(f"{key}.name", "ROLL sets it itself")
    if key == "val_env_manager":
        t.get(f"{key}.group_size")
    return tags, partition


def _env(t: Translation, tag: str, max_new_tokens: int | None) -> dict[str, Any] | None:
    """The workflow_args of env_workflow for ROLL's environment `tag` (its custom_envs entry)."""
    key = f"custom_envs.{tag}"
    if not t.has(key):
        t.refuse(key, "an env manager names it, but custom_envs does not define it")
        return None
    kind = t.get(f"{key}.env_type")
    if kind not in _ENVS:
        t.get(key)  # the rest of the section belongs to the refused environment: no refusals of its own
        t.refuse(f"{key}.env_type", f"{kind!r}: {_ENVS_MISSING.get(kind, _OTHER_ENV)}")
        return None
    cfg = f"{key}.env_config"
    sources: dict[str, str] = {}
    env_args = {}
    for name, default in _DEFAULTS[kind].items():
        env_args[name] = t.get(f"{cfg}.{name}", default)
        sources[f"env_args.{name}"] = f"{cfg}.{name}" if t.has(f"{cfg}.{name}") else f"{ROLL_DEFAULT} of {kind}"
    if kind == "frozen_lake":
        t.note(f"{cfg}.map_seed", "no effect: ROLL draws each episode's map from the episode's seed")
    penalty = t.get(f"{cfg}.format_penalty", 0.0)
    t.same_if(f"{cfg}.render_mode", "text", "rfthpc's environments render text")
    texts = [f"{cfg}.{k}" for k in _TEXT_KEYS if t.has(f"{cfg}.{k}")] + [
        k for k in (f"{key}.agent_template",) if t.has(k)]
    for k in texts:
        t.get(k)
    if texts:
        t.notes.append(f"{', '.join(texts)}: rfthpc's {kind} writes its own observations and instructions "
                       "(docs/agents.md) and reads a move from <action>...</action> or the reply's last action "
                       "word, so a reply in ROLL's <answer>Left</answer> form still counts")
    if penalty > 0:
        t.refuse(f"{cfg}.format_penalty", f"{penalty}: rfthpc's format penalty is subtracted; ROLL's is a (negative) "
                                          "reward: a positive one would reward invalid actions")
        return None
    turns = t.get(f"{key}.max_steps", env_args["max_steps"])
    per_turn = t.get(f"{key}.max_tokens_per_step")
    args: dict[str, Any] = {"env": _ENVS[kind], "env_args": env_args}
    sources["env"] = f"{key}.env_type"
    args["max_turns"] = turns
    sources["max_turns"] = f"{key}.max_steps" if t.has(f"{key}.max_steps") else f"{cfg}.max_steps"
    limits = [n for n in (per_turn, max_new_tokens) if n]
    if limits:
        args["max_tokens_per_turn"] = min(limits)
        sources["max_tokens_per_turn"] = "min(max_tokens_per_step, actor_infer.generating_args.max_new_tokens)"
    args["max_context_tokens"] = t.get("sequence_length")
    sources["max_context_tokens"] = "sequence_length (ROLL ends an episode there)"
    args["format_penalty"] = -float(penalty)
    sources["format_penalty"] = (f"-{cfg}.format_penalty (subtracted per invalid action)"
                                 if t.has(f"{cfg}.format_penalty") else ROLL_DEFAULT)
    args["reward_type"] = "sum"
    sources["reward_type"] = "ROLL's episode score: the sum of the step rewards"
    prompt = t.get(f"{key}.agent_system_template")
    if prompt:
        args["system_prompt"] = str(prompt)
        sources["system_prompt"] = f"{key}.agent_system_template"
    manager = t.get(f"{key}.env_manager_cls", _TRAJ_MANAGER)
    if manager == _TRAJ_MANAGER and t.has(f"{key}.env_manager_cls"):
        t.same.append(f"{key}.env_manager_cls: TrajEnvManager (env_workflow plays whole trajectories)")
    elif manager not in (_TRAJ_MANAGER, _STEP_MANAGER):
        t.refuse(f"{key}.env_manager_cls", f"{manager!r}: the importer knows ROLL's TrajEnvManager and "
                                           "StepEnvManager")
    t.same_if(f"{key}.agent_runner_cls", None, "the importer knows ROLL's own trajectory runner only")
    t.note([f"{key}.use_thread_lock", f"{key}.max_env_step_concurrent"], "rfthpc steps each episode in its "
                                                                         "explorer; no locks or limits needed")
    if t.has(f"{key}.tool_wrapper"):
        t.refuse(f"{key}.tool_wrapper", "ROLL's tool wrappers are not translated; see toolcall_workflow")
    return {"args": args, "sources": sources}


def _step_wise(t: Translation, tag: str, ts: str) -> None:
    """ROLL's env manager of the trained environment `tag`: whole trajectories (TrajEnvManager) or a sample per
    step (StepEnvManager, which ROLL's step_reinforce and gigpo need): env_workflow's `step_wise`. Evaluation
    plays whole episodes either way."""
    key = f"custom_envs.{tag}.env_manager_cls"
    manager = t.get(key, _TRAJ_MANAGER)
    estimator = t.get("adv_estimator", "gae")
    if manager == _STEP_MANAGER:
        if estimator not in STEP_ESTIMATORS:
            t.refuse(key, f"StepEnvManager with adv_estimator {estimator!r}: ROLL then scores each step by its own "
                          "reward; rfthpc trains steps with gigpo or step_reinforce (or Trinity-RFT's "
                          "multi_step_grpo): use one of those, or TrajEnvManager")
            return
        t.set(f"{ts}.workflow_args.step_wise", True,
              f"{key}: StepEnvManager (each step a sample with its step score and state)")
        # ROLL's step prompt holds the steps history[-history_length:-1] before the current one (none without
        # it), rendered as text in its agent_template; rfthpc's holds as many as chat turns.
        length = t.whole(f"custom_envs.{tag}.history_length", 0, least=0)
        kept = max(0, length - 1)
        t.set(f"{ts}.workflow_args.history_turns", kept,
              f"custom_envs.{tag}.history_length: {length} (ROLL's step prompt holds the {kept} "
              "steps before the current one, as text in its agent_template; rfthpc's as the chat's turns)"
              if t.has(f"custom_envs.{tag}.history_length") else
              f"{key}: StepEnvManager (ROLL's step prompt without history_length is the current observation alone)")
    elif manager == _TRAJ_MANAGER:
        if estimator in STEP_ESTIMATORS:
            t.refuse("adv_estimator", f"{estimator!r} trains step samples: ROLL needs env_manager_cls "
                                      f"{_STEP_MANAGER} for it, and so does the import")


def _taskset(t: Translation, ts: str, tag: str, path: Path, env: dict[str, Any], why: str, tags: str) -> None:
    t.set(f"{ts}.name", tag, tags)
    t.set(f"{ts}.path", str(path), f"written by the import: {why}")
    t.set(f"{ts}.format", {"prompt_key": "prompt", "response_key": ""}, "rows of seeds; the environment scores")
    for name, value in env["args"].items():
        if name != "env_args":
            t.set(f"{ts}.workflow_args.{name}", value, env["sources"][name])
    for name, value in env["args"]["env_args"].items():
        t.set(f"{ts}.workflow_args.env_args.{name}", value, env["sources"][f"env_args.{name}"])

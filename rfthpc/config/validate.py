"""Consistency checks of a finalized config. Every problem is named with its key and its fix."""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rfthpc.algorithms.declare import Needs
from rfthpc.algorithms.presets import trains_on_dataset
from rfthpc.algorithms.registry import AlgorithmRegistry, check_loss_agg_mode, loss_scale_problem
from rfthpc.config.colocation import colocated, colocation_problems
from rfthpc.config.derive import (
    explorer_gpus,
    explorer_task_gpus,
    per_explorer_models,
    server_gpus,
    trainer_gpus_per_node,
)
from rfthpc.config.expert import expert_problems, rollout_groups_per_step
from rfthpc.config.lora import lora_problems
from rfthpc.config.monitor import sink_problems
from rfthpc.config.schema import Config, explores, trains
from rfthpc.config.synchronizer import SynchronizerConfig, default_max_staleness
from rfthpc.config.teacher import teacher_problems
from rfthpc.config.trainer import sequence_parallel_problems
from rfthpc.dialects import trinity
from rfthpc.errors import ALGORITHM, GPUS, INVALID, PATHS, REFUSED, ConfigError, Problems

COMPONENT_CHECKS: dict[str, str] = {
    "env_vars": "rfthpc.launch.resources:env_var_problems",
    "workflows": "rfthpc.workflows.checks:workflow_problems",
    "rollout_args": "rfthpc.engines.sampling:rollout_args_problems",
    "engine_kwargs": "rfthpc.dialects.vllm_args:engine_kwargs_problems",
    "columns": "rfthpc.workflows.checks:column_problems",
}
"""The checks of settings that belong to a component above the config, as `module:function`: each
lives beside its component, which imports `rfthpc.config`; the config imports none of them until a
config is validated."""

NO_INTERNET_HINT = "compute nodes have no internet: download it first, then give the local directory"


def _component(name: str) -> Callable[..., None]:
    """The check `COMPONENT_CHECKS[name]`, taking the config and the problems (and what else it names)."""
    module, _, function = COMPONENT_CHECKS[name].partition(":")
    return getattr(importlib.import_module(module), function)


def _path_problem(key: str, value: str | None, kind: str) -> str | None:
    """A message if `value` is not an existing local path, with the download hint for hub ids."""
    if not value:
        return f"{key}: missing; give the local {kind} path"
    p = Path(os.path.expanduser(value))
    if p.exists():
        return None
    repo_type = " --repo-type dataset" if kind == "dataset" else ""
    looks_like_hub_id = value.count("/") == 1 and not value.startswith((".", "/", "~"))
    if looks_like_hub_id:
        return (
            f"{key}: {value!r} is not a local path (it looks like a Hugging Face hub id); {NO_INTERNET_HINT}: "
            f"`huggingface-cli download {value}{repo_type} --local-dir DIR`, then set {key}: DIR"
        )
    return f"{key}: {value!r} does not exist; {NO_INTERNET_HINT}"


def _check_functions(cfg: Config, problems: Problems) -> None:
    # The registries check built-in algorithm names and arguments from the functions' source:
    # validating a config does not import torch.
    from rfthpc import algorithms as algos
    from rfthpc.algorithms.presets import ALGORITHM_PRESETS

    alg = cfg.algorithm
    inp = cfg.buffer.explorer_input
    if alg.algorithm_type not in ALGORITHM_PRESETS:
        # Reported when it was finalized; the functions the config names itself are still checked
        # (the rest of the algorithm, which the preset would have filled, is not set).
        algos.ADVANTAGE_FNS.report(problems, "algorithm.advantage_fn", alg.advantage_fn, alg.advantage_fn_args)
        algos.POLICY_LOSS_FNS.report(problems, "algorithm.policy_loss_fn", alg.policy_loss_fn,
                                     alg.policy_loss_fn_args)
        return
    # Each function's arguments are checked as the trainer binds them: advantage, policy-loss and
    # entropy arguments are keyword arguments of the function; the KL coefficients go through the
    # same plain-Python functions the trainer builds them with.
    algos.ADVANTAGE_FNS.report(problems, "algorithm.advantage_fn", alg.advantage_fn, alg.advantage_fn_args)
    algos.POLICY_LOSS_FNS.report(problems, "algorithm.policy_loss_fn", alg.policy_loss_fn, alg.policy_loss_fn_args)
    algos.ENTROPY_LOSS_FNS.report(problems, "algorithm.entropy_loss_fn", alg.entropy_loss_fn,
                                  alg.entropy_loss_fn_args)
    for key, name in (("kl_penalty_fn", alg.kl_penalty_fn), ("kl_loss_fn", alg.kl_loss_fn)):
        if name != "none":
            algos.KL_FNS.report(problems, f"algorithm.{key}", name)
    coefficients: list[Callable[[], object]] = [lambda: algos.kl_loss_coef(alg.kl_loss_fn_args)]
    if alg.kl_penalty_fn != "none":
        coefficients.append(lambda: algos.kl_controller(alg.kl_penalty_fn_args))
    for build_coefficient in coefficients:
        try:
            build_coefficient()
        except ConfigError as e:
            problems.add(str(e), ALGORITHM)
    try:
        check_loss_agg_mode(alg.loss_agg_mode)
    except ConfigError as e:
        problems.add(str(e), ALGORITHM)
    problem = loss_scale_problem(alg.loss_agg_mode, alg.loss_scale_factor)
    if problem:
        problems.add(problem, ALGORITHM)
    _check_rollout_correction(cfg, problems)
    if trains_on_dataset(alg.algorithm_type) and alg.advantage_fn:
        # Else the stage would train as RL, waiting for experience no explorer of a dataset stage makes.
        problems.add(f"algorithm.advantage_fn: {alg.advantage_fn!r} scores the explorers' experience, but "
                     f"algorithm_type {alg.algorithm_type!r} trains on a dataset; remove it (in a run of stages, set "
                     "it in the RL stage's algorithm rather than the run's, which every stage inherits)", ALGORITHM)
    if _advantage_needs(alg.advantage_fn).groups and not trains_on_dataset(alg.algorithm_type):
        # A lone response has nothing to be compared with: its advantage is 0 and only the KL term trains.
        counts = [("algorithm.repeat_times", alg.repeat_times)] if cfg.mode == "train" else [
            (f"buffer.explorer_input.tasksets[{i}].repeat_times", ts.repeat_times) for i, ts in enumerate(inp.tasksets)
        ]
        for key, value in counts:
            if value == 1:
                problems.add(
                    f"{key}: 1 response per task, but algorithm.advantage_fn {alg.advantage_fn!r} compares the "
                    "responses to one task, so every advantage would be 0; sample several (repeat_times >= 2) or "
                    f"use an advantage_fn without groups ({', '.join(_groupless_advantages())})", ALGORITHM
                )


def _check_reward_shaping(cfg: Config, problems: Problems) -> None:
    """`algorithm.filter_groups` and `algorithm.overlong_buffer` resolve as the explorers resolve them,
    and dynamic sampling has groups to compare."""
    from rfthpc.algorithms.shaping import group_filter, overlong_penalty

    alg = cfg.algorithm
    try:
        filtering = group_filter(alg.filter_groups)
    except ConfigError as e:
        problems.add(str(e), ALGORITHM)
        filtering = None
    try:
        overlong_penalty(alg.overlong_buffer, cfg.model.max_response_tokens)
    except ConfigError as e:
        problems.add(str(e), ALGORITHM)
    if filtering is None or not explores(cfg.mode):
        return
    for i, ts in enumerate(cfg.buffer.explorer_input.tasksets):
        if ts.repeat_times is not None and ts.repeat_times < 2:
            problems.add(
                f"buffer.explorer_input.tasksets[{i}].repeat_times: {ts.repeat_times} response per task, but "
                "algorithm.filter_groups drops groups whose responses all score the same, which needs several "
                "per task: set repeat_times >= 2 (algorithm.repeat_times), or algorithm.filter_groups.enable: false",
                ALGORITHM)


def _check_replay(cfg: Config, problems: Problems) -> None:
    """`experience_buffer.replay_buffer` builds (name, arguments and values checked), and a group read
    can be read again before it is too stale."""
    from rfthpc.algorithms.replay import policy_problems
    from rfthpc.config.schema import trains

    eb = cfg.buffer.trainer_input.experience_buffer
    rb = eb.replay_buffer
    if not rb.enable or trains_on_dataset(cfg.algorithm.algorithm_type):
        return
    found = policy_problems(eb.capacity, rb.reuse_cooldown_time, rb.priority_fn, rb.priority_fn_args)
    for message in found:
        problems.add(message)
    if not found and rb.reuse_cooldown_time is not None and trains(cfg.mode) and cfg.synchronizer.max_staleness == 0:
        problems.add(
            "buffer.trainer_input.experience_buffer.replay_buffer.reuse_cooldown_time: a group read would be read "
            "again, but synchronizer.max_staleness is 0 and every trainer step makes it one version staler, so it "
            "would only ever leave the buffer; raise synchronizer.max_staleness to the number of steps a group may "
            "be reused over, or set reuse_cooldown_time: null"
        )


def _check_preference(cfg: Config, problems: Problems) -> None:
    """A dpo stage runs the trainer alone on a preference dataset with the dpo loss, whose mean over
    pairs needs micro-batches weighted by their responses (a seq-mean loss_agg_mode); the dpo loss
    runs only there."""
    from rfthpc import algorithms as algos

    alg = cfg.algorithm
    pairs = _needs(algos.POLICY_LOSS_FNS, alg.policy_loss_fn).preference_pairs
    if alg.algorithm_type != "dpo":
        if pairs:
            problems.add(f"algorithm.policy_loss_fn: {alg.policy_loss_fn!r} trains on preference pairs, which only a "
                         "dpo stage reads; set algorithm.algorithm_type: dpo (and mode: train)", ALGORITHM)
        return
    if explores(cfg.mode):
        problems.add(f"mode: DPO trains on a preference dataset with the trainer alone, so mode {cfg.mode!r} has "
                     "nothing for explorers to do; set mode: train (as Trinity-RFT requires)", INVALID)
    if not pairs:
        problems.add(f"algorithm.policy_loss_fn: a dpo stage trains on preference pairs, but {alg.policy_loss_fn!r} "
                     "is not a preference loss; set policy_loss_fn: dpo (or remove it)", ALGORITHM)
    if not alg.loss_agg_mode.startswith("seq-mean"):
        problems.add(f"algorithm.loss_agg_mode: DPO's loss is a mean over pairs, so micro-batches are weighted by "
                     f"their responses, but {alg.loss_agg_mode!r} weights them by tokens; use seq-mean-token-mean "
                     "(the dpo default) or another seq-mean mode", ALGORITHM)
    args = alg.policy_loss_fn_args
    smoothing, beta = args.get("label_smoothing"), args.get("beta")
    if smoothing is not None and not (isinstance(smoothing, (int, float)) and 0.0 <= smoothing < 0.5):
        problems.add(f"algorithm.policy_loss_fn_args.label_smoothing: {smoothing!r} is not a probability in "
                     "[0, 0.5) (the chance a pair's label is wrong); set it so, or 0 for plain DPO", ALGORITHM)
    if beta is not None and not (isinstance(beta, (int, float)) and beta > 0):
        problems.add(f"algorithm.policy_loss_fn_args.beta: {beta!r} must be > 0 (DPO's inverse temperature, "
                     "e.g. 0.1)", ALGORITHM)


def _check_rollout_correction(cfg: Config, problems: Problems) -> None:
    """`algorithm.rollout_correction` parses and fits the policy loss (an sft or dpo stage ignores it:
    no behaviour policy)."""
    from rfthpc import algorithms as algos
    from rfthpc.algorithms.rollout_settings import BYPASS_LOSSES, KEY, RolloutCorrection

    alg = cfg.algorithm
    if trains_on_dataset(alg.algorithm_type):
        return
    try:
        rc = RolloutCorrection.of(alg.rollout_correction)
    except ConfigError as e:
        problems.add(str(e), ALGORITHM)
        return
    loss = alg.policy_loss_fn
    if rc.bypass_mode and loss != BYPASS_LOSSES[rc.loss_type]:
        problems.add(
            f"{KEY}.bypass_mode: with loss_type {rc.loss_type!r} veRL's bypass mode trains policy loss "
            f"{BYPASS_LOSSES[rc.loss_type]!r}, but algorithm.policy_loss_fn is {loss!r}; set policy_loss_fn: "
            f"{BYPASS_LOSSES[rc.loss_type]} (or remove it), or set bypass_mode: false", ALGORITHM
        )
    if not rc.active or not loss:
        return
    if loss == "sft":
        problems.add(f"{KEY}: importance weights and rejection compare the behaviour policy with the trained one, "
                     "but policy loss 'sft' reads no behaviour log-probabilities; remove rollout_is / rollout_rs or "
                     "choose an RL policy loss", ALGORITHM)
        return
    try:
        needs = algos.POLICY_LOSS_FNS.needs(loss)
    except ConfigError:
        return  # an unknown loss is reported on its own
    if rc.rollout_is is not None and needs.behaviour_log_prob:
        problems.add(f"{KEY}.rollout_is: policy loss {loss!r} already weights each token by proximal / behaviour; "
                     "rollout IS weights would correct twice: set rollout_is: null (rejection, rollout_rs, still "
                     "applies)", ALGORITHM)


def _advantage_needs(advantage_fn: str | None) -> Needs:
    """What the advantage function needs; nothing for none, or for a name the registry does not
    know (reported on its own)."""
    from rfthpc import algorithms as algos

    return _needs(algos.ADVANTAGE_FNS, advantage_fn)


def _needs(registry: AlgorithmRegistry[Any], name: str | None) -> Needs:
    """What function `name` of an algorithm registry needs; nothing for none, or for a name the
    registry does not know (reported on its own)."""
    try:
        return registry.needs(name) if name else Needs()
    except ConfigError:
        return Needs()


def _groupless_advantages() -> list[str]:
    """The built-in advantage functions that need neither groups nor a critic."""
    from rfthpc import algorithms as algos

    return [n for n in algos.ADVANTAGE_FNS.names()
            if not (algos.ADVANTAGE_FNS.needs(n).groups or algos.ADVANTAGE_FNS.needs(n).critic)]


def _check_sync_style(sync: SynchronizerConfig, problems: Problems) -> None:
    """A staleness bound below what explorer_driven or trainer_driven needs: explorers would wait for
    the trainer before the sync points these styles set, so sync_interval and sync_offset would not
    mean what they say."""
    if sync.sync_style == "fixed" or sync.max_staleness is None or sync.sync_interval < 1 or sync.sync_offset < 0:
        return
    least = default_max_staleness(sync.sync_style, sync.sync_interval, sync.sync_offset)
    if sync.max_staleness >= least:
        return
    formula = ("2 * sync_interval - 1 + sync_offset" if sync.sync_style == "trainer_driven"
               else "sync_interval - 1 + sync_offset")
    takes = ("asks the trainer for weights" if sync.sync_style == "explorer_driven"
             else "takes a new publication")
    problems.add(
        f"synchronizer.max_staleness: {sync.max_staleness} is below what sync_style {sync.sync_style} needs "
        f"({formula} = {least}): an explorer {takes} only every sync_interval ({sync.sync_interval}) batches "
        f"after sync_offset ({sync.sync_offset}), so it would have to wait for the trainer in between. Remove "
        f"max_staleness (it defaults to {least}), lower sync_interval or sync_offset, or use sync_style fixed "
        "(explorers load the newest publication before every batch)"
    )


def _check_sizes(cfg: Config, problems: Problems) -> None:
    b, alg, m, sync = cfg.buffer, cfg.algorithm, cfg.model, cfg.synchronizer
    if alg.repeat_times < 1:
        problems.add(f"algorithm.repeat_times: {alg.repeat_times} must be >= 1")
    if b.batch_size < 1:
        problems.add(f"buffer.batch_size: {b.batch_size} must be >= 1")
    if b.train_batch_size is not None and alg.repeat_times >= 1 and b.train_batch_size % alg.repeat_times:
        problems.add(
            f"buffer.train_batch_size: {b.train_batch_size} is not a multiple of algorithm.repeat_times "
            f"({alg.repeat_times}); whole groups are trained together. Use "
            f"{max(1, b.train_batch_size // alg.repeat_times) * alg.repeat_times} or leave it unset"
        )
    groups = rollout_groups_per_step(cfg)
    if cfg.mode == "both" and not trains_on_dataset(alg.algorithm_type) and 1 <= b.batch_size < groups:
        # The explorers count buffer.batch_size tasks to a trainer step and wait for its policy within
        # max_staleness, while the trainer waits for more groups than that: neither would move.
        problems.add(
            f"buffer.train_batch_size: {b.train_batch_size} responses are {groups} groups of "
            f"{alg.repeat_times} per trainer step, more than buffer.batch_size ({b.batch_size} tasks), which the "
            "explorers count to a step and generate within synchronizer.max_staleness of it: the trainer would "
            f"wait for groups the explorers hold back. Set train_batch_size to {b.batch_size * alg.repeat_times} "
            f"(batch_size x repeat_times) or leave it unset, or raise batch_size to {groups}"
        )
    if sync.sync_interval < 1:
        problems.add(f"synchronizer.sync_interval: {sync.sync_interval} must be >= 1 "
                     "(trainer steps between publications)")
    if sync.sync_offset < 0:
        problems.add(f"synchronizer.sync_offset: {sync.sync_offset} must be >= 0")
    _check_sync_style(sync, problems)
    if sync.keep_published < 2:
        problems.add(f"synchronizer.keep_published: {sync.keep_published} must be >= 2: an explorer may have "
                     "chosen the previous policy just before the newest was published, and load it while the "
                     "trainer cleans up")
    if cfg.explorer.max_repeat_times_per_runner is not None and cfg.explorer.max_repeat_times_per_runner < 1:
        problems.add(f"explorer.max_repeat_times_per_runner: {cfg.explorer.max_repeat_times_per_runner} must be >= 1 "
                     "(responses per engine request), or null for no limit")
    if cfg.explorer.claim_shards < 0:
        problems.add(f"explorer.claim_shards: {cfg.explorer.claim_shards} must be >= 0 (0: by the array size)")
    if cfg.explorer.claim_batches < 0:
        problems.add(f"explorer.claim_batches: {cfg.explorer.claim_batches} must be >= 0 (0: by the array size)")
    if sync.full_snapshot_interval < 1:
        problems.add(f"synchronizer.full_snapshot_interval: {sync.full_snapshot_interval} must be >= 1 "
                     "(1: every version is a full snapshot)")
    if cfg.filesystem.weight_stripe_count < -1:
        problems.add(f"filesystem.weight_stripe_count: {cfg.filesystem.weight_stripe_count}: use 0 (default layout), "
                     "a stripe count, or -1 (every storage target)")
    if m.max_response_tokens is None:
        problems.add("model.max_response_tokens: missing; set it (and model.max_model_len or model.max_prompt_tokens)")
    elif m.max_model_len is None:
        problems.add("model.max_model_len: missing; set it or model.max_prompt_tokens")
    elif m.max_prompt_tokens is not None and m.max_prompt_tokens + m.max_response_tokens > m.max_model_len:
        problems.add(
            f"model: max_prompt_tokens ({m.max_prompt_tokens}) + max_response_tokens ({m.max_response_tokens}) "
            f"exceed max_model_len ({m.max_model_len}); lower one of them or raise max_model_len"
        )
    elif m.max_prompt_tokens is not None and m.max_prompt_tokens < 1:
        problems.add(
            f"model.max_response_tokens ({m.max_response_tokens}) leaves no room for the prompt in "
            f"max_model_len ({m.max_model_len})"
        )
    rollout = cfg.explorer.rollout_model
    for key, value in (("trainer.ppo_epochs", cfg.trainer.ppo_epochs),
                       ("trainer.ppo_micro_batch_size_per_gpu", cfg.trainer.ppo_micro_batch_size_per_gpu),
                       ("explorer.runner_per_model", cfg.explorer.runner_per_model),
                       ("explorer.rollout_model.engine_num", rollout.engine_num),
                       ("explorer.rollout_model.tensor_parallel_size", rollout.tensor_parallel_size)):
        if value < 1:
            problems.add(f"{key}: {value} must be >= 1")
    for i, aux in enumerate(cfg.explorer.auxiliary_models):
        for name in ("engine_num", "tensor_parallel_size"):
            if getattr(aux, name) < 1:
                problems.add(f"explorer.auxiliary_models[{i}].{name}: {getattr(aux, name)} must be >= 1")
        if aux.server_timeout <= 0:
            problems.add(f"explorer.auxiliary_models[{i}].server_timeout: {aux.server_timeout} must be > 0 (seconds)")
    if cfg.slurm.server.array_size is not None:
        problems.add(f"slurm.server.array_size: {cfg.slurm.server.array_size}; a server job has one task per engine "
                     "of its auxiliary model: set explorer.auxiliary_models[i].engine_num instead")
    for role in ("trainer", "explorer", "server"):
        rc = getattr(cfg.slurm, role)
        for name in ("nodes", "array_size", "array_parallelism", "gpus_per_node", "cpus_per_task"):
            value = getattr(rc, name)
            least = 0 if name == "gpus_per_node" else 1
            if value is not None and value < least:
                problems.add(f"slurm.{role}.{name}: {value} must be >= {least}")


def _check_gpus(cfg: Config, problems: Problems) -> None:
    c = cfg.cluster
    if cfg.explorer.rollout_model.enable_sleep_mode and cfg.slurm.layout != "colocated":
        problems.add(f"explorer.rollout_model.enable_sleep_mode: true time-shares GPUs with a trainer on the same "
                     f"ones; set slurm.layout: colocated, or remove it (slurm.layout {cfg.slurm.layout} gives the "
                     "explorers GPUs of their own)", GPUS)
    if colocated(cfg):
        for message in colocation_problems(cfg, explorer_task_gpus(cfg), server_gpus(cfg)):
            problems.add(message, GPUS)
        return
    if c.gpu_per_node <= 0:
        return
    total = c.node_num * c.gpu_per_node
    need_explorer = explorer_gpus(cfg)
    per_task = explorer_task_gpus(cfg)
    servers = server_gpus(cfg)
    rm = cfg.explorer.rollout_model
    each = ("the rollout model's tensor_parallel_size and that of every auxiliary model placed per_explorer"
            if per_explorer_models(cfg) else "the rollout model's tensor_parallel_size")
    if need_explorer > total:
        also = (f", plus {servers} GPUs of the shared auxiliary models' servers (engine_num x tensor_parallel_size "
                "of each)" if servers else "")
        problems.add(
            f"explorer: {rm.engine_num} engines x {per_task} GPUs each ({each}){also} need {need_explorer} GPUs, more "
            f"than the cluster's {c.node_num} x {c.gpu_per_node} = {total}; lower explorer.rollout_model.engine_num "
            "(or an auxiliary model's engine_num) or raise cluster.gpu_per_node / cluster.node_num", GPUS
        )
    elif cfg.mode == "both" and trainer_gpus_per_node(cfg) < 1:
        problems.add(
            f"cluster: the explorers{' and auxiliary model servers' if servers else ''} take {need_explorer} of "
            f"{total} GPUs and leave none for the trainer; lower explorer.rollout_model.engine_num or add GPUs "
            "(cluster.gpu_per_node / node_num)", GPUS
        )
    given = cfg.slurm.explorer.gpus_per_node
    if explores(cfg.mode) and given is not None and 0 <= given < per_task:
        problems.add(
            f"slurm.explorer.gpus_per_node: {given}, but an explorer runs its rollout engine (tensor_parallel_size "
            f"{rm.tensor_parallel_size}){' and one engine of each auxiliary model placed per_explorer' if per_explorer_models(cfg) else ''}: "
            f"{per_task} GPUs; raise it to that or remove it (it defaults to what the explorer needs)", GPUS
        )
    if per_task > c.gpu_per_node:
        problems.add(
            f"explorer: an explorer runs its engines on one node: {per_task} GPUs ({each}), more than "
            f"cluster.gpu_per_node {c.gpu_per_node}; lower the tensor_parallel_size values", GPUS
        )
    if not explores(cfg.mode):
        return
    server_given = cfg.slurm.server.gpus_per_node
    for i, aux in enumerate(cfg.explorer.auxiliary_models):
        if aux.placement != "shared":
            continue
        key = f"explorer.auxiliary_models[{i}]"
        if aux.tensor_parallel_size > c.gpu_per_node:
            problems.add(
                f"{key}.tensor_parallel_size: {aux.tensor_parallel_size}; each engine of its server runs on one node "
                f"of cluster.gpu_per_node {c.gpu_per_node} GPUs; lower it", GPUS
            )
        if server_given is not None and 0 <= server_given < aux.tensor_parallel_size:
            problems.add(
                f"slurm.server.gpus_per_node: {server_given}, but an engine of auxiliary model {aux.name!r} needs "
                f"{aux.tensor_parallel_size} GPUs ({key}.tensor_parallel_size); raise it or remove it (it defaults "
                "to each model's tensor_parallel_size)", GPUS
            )


def _check_sequence_parallel(cfg: Config, problems: Problems, check_paths: bool) -> None:
    """`trainer.ulysses_sequence_parallel_size` against the trainer's GPUs (on a GPU cluster: on CPUs
    `rfthpc run --trainer-procs` sets the ranks) and the heads of the models it splits."""
    if not trains(cfg.mode):
        return
    t = cfg.slurm.trainer
    world = t.nodes * t.gpus_per_node if cfg.cluster.gpu_per_node > 0 and t.gpus_per_node else None
    models = {"model.model_path": cfg.model.model_path} if check_paths else {}
    if check_paths and _advantage_needs(cfg.algorithm.advantage_fn).critic:
        models["model.critic_model_path"] = cfg.model.critic_model_path
    for message in sequence_parallel_problems(cfg.trainer, world, models):
        problems.add(message, GPUS if "GPUs" in message else INVALID)


def _check_inputs(cfg: Config, problems: Problems, check_paths: bool) -> None:
    inp = cfg.buffer.explorer_input
    sft = trains_on_dataset(cfg.algorithm.algorithm_type)
    if explores(cfg.mode) and not sft and not inp.tasksets:
        problems.add("buffer.explorer_input.taskset: missing; explorers need at least one training taskset", PATHS)
    eb = cfg.buffer.trainer_input.experience_buffer
    if sft and not eb.path:
        problems.add(f"buffer.trainer_input.experience_buffer.path: an {cfg.algorithm.algorithm_type} stage trains "
                     "on this dataset; give its local path", PATHS)
    _component("rollout_args")(cfg, problems)
    from rfthpc import algorithms as algos

    for message in expert_problems(cfg, _needs(algos.POLICY_LOSS_FNS, cfg.algorithm.policy_loss_fn).expert_data,
                                   check_paths):
        problems.add(message, PATHS if "path" in message.split(":", 1)[0] else INVALID)
    served = cfg.explorer.teacher_model
    by_name = {aux.name: aux.model_path for aux in cfg.explorer.auxiliary_models}
    for message in teacher_problems(cfg.model.teacher_model_path, cfg.model.model_path,
                                    _advantage_needs(cfg.algorithm.advantage_fn).teacher, cfg.algorithm.advantage_fn,
                                    check_paths, None if served is None else (served, by_name.get(served))):
        problems.add(message, PATHS)
    if not check_paths:
        return
    checks = [("model.model_path", cfg.model.model_path, "model")]
    if _advantage_needs(cfg.algorithm.advantage_fn).critic:
        checks.append(("model.critic_model_path", cfg.model.critic_model_path, "model"))
    for i, aux in enumerate(cfg.explorer.auxiliary_models):
        checks.append((f"explorer.auxiliary_models[{i}].model_path", aux.model_path, "model"))
    if explores(cfg.mode) and not sft:
        for group, sets in (("tasksets", inp.tasksets), ("eval_tasksets", inp.eval_tasksets)):
            for i, ts in enumerate(sets):
                key = f"buffer.explorer_input.{group}[{i}].path"
                paths = ts.path if isinstance(ts.path, list) else [ts.path]
                checks += [(key if len(paths) == 1 else f"{key}[{j}]", p, "dataset") for j, p in enumerate(paths)]
    if sft:
        checks.append(("buffer.trainer_input.experience_buffer.path", eb.path, "dataset"))
    missing = set()
    for key, value, kind in checks:
        msg = _path_problem(key, value, kind)
        if msg:
            problems.add(msg, PATHS)
            missing.add(re.sub(r"\[\d+\]$", "", key))  # one missing file of several: the taskset's path
    _component("columns")(cfg, problems, missing)


def validate(cfg: Config, source: str = "config", check_paths: bool = True, problems: Problems | None = None) -> None:
    """Check a finalized config (one stage): record every inconsistency in `problems`, or, without
    one, raise a ConfigError listing them."""
    own = problems is None
    problems = Problems(source) if problems is None else problems
    if not cfg.model.model_path:
        problems.add("model.model_path: missing; give the local directory of the model to fine-tune", PATHS)
    _check_sizes(cfg, problems)
    _check_sequence_parallel(cfg, problems, check_paths)
    _component("env_vars")(cfg, problems)
    _check_gpus(cfg, problems)
    _component("engine_kwargs")(cfg, problems)
    _component("workflows")(cfg, problems)
    _check_functions(cfg, problems)
    _check_reward_shaping(cfg, problems)
    _check_replay(cfg, problems)
    _check_preference(cfg, problems)
    _check_inputs(cfg, problems, check_paths)
    if cfg.model.lora is not None:
        for message in lora_problems(cfg.model.lora, cfg.model.model_path, check_paths):
            problems.add(message, PATHS if message.startswith("model.lora.path") else INVALID)
    for message in sink_problems(cfg.monitor):
        problems.add(message)
    for message in trinity.unsupported_values(cfg):
        problems.add(message, REFUSED)
    if own:
        problems.raise_if_any()

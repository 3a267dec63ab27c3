"""Derived values, computed in one place: everything a user may leave unset and rfthpc can infer."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

from rfthpc.algorithms.registry import SCALED_MODES
from rfthpc.config.buffer import TasksetConfig
from rfthpc.config.colocation import colocated, sleep_mode
from rfthpc.config.expert import rollout_groups_per_step
from rfthpc.config.explorer import InferenceModelConfig
from rfthpc.config.schema import STAGE_SECTIONS, Config, explores, trains
from rfthpc.config.synchronizer import default_max_staleness
from rfthpc.config.typed import build, to_dict
from rfthpc.dialects import trinity, verl
from rfthpc.errors import ALGORITHM, PATHS, REFUSED, ConfigError, Problems
from rfthpc.not_built import ALGORITHM as NOT_BUILT_ALGORITHM
from rfthpc.not_built import not_built

# Algorithm fields a preset may fill; an explicit value in the config always wins.
PRESET_FIELDS = (
    "advantage_fn", "policy_loss_fn", "kl_penalty_fn", "kl_loss_fn", "entropy_loss_fn", "loss_agg_mode",
)


def _fill(value: Any, default: Any) -> Any:
    return default if value is None else value


def _apply_preset(cfg: Config, problems: Problems) -> None:
    from rfthpc.algorithms.presets import ALGORITHM_PRESETS, trains_on_dataset

    alg = cfg.algorithm
    preset = ALGORITHM_PRESETS.get(alg.algorithm_type)
    if preset is None:
        refusal = not_built(NOT_BUILT_ALGORITHM, alg.algorithm_type)
        if refusal is not None:
            problems.add(f"algorithm.algorithm_type: {refusal}", REFUSED)
        else:
            problems.add(f"algorithm.algorithm_type: unknown algorithm {alg.algorithm_type!r}; "
                         f"known: {', '.join(sorted(ALGORITHM_PRESETS))}", ALGORITHM)
        preset = {}  # validation leaves the functions of an unknown algorithm unchecked
    if alg.rollout_correction.bypass_mode and alg.policy_loss_fn is None and not trains_on_dataset(alg.algorithm_type):
        # veRL's bypass mode picks the loss by loss_type (an unknown one is reported by validation).
        from rfthpc.algorithms.rollout_settings import BYPASS_LOSSES

        alg.policy_loss_fn = BYPASS_LOSSES.get(alg.rollout_correction.loss_type)
    for name in PRESET_FIELDS:
        if getattr(alg, name) is None and name in preset:
            setattr(alg, name, preset[name])
    for name in ("advantage_fn_args", "policy_loss_fn_args", "kl_penalty_fn_args", "kl_loss_fn_args",
                 "entropy_loss_fn_args"):
        defaults = preset.get(name) or {}
        if name == "policy_loss_fn_args" and alg.policy_loss_fn != preset.get("policy_loss_fn"):
            defaults = {}  # a preset's loss arguments are its own loss's, not those of a loss chosen instead
        setattr(alg, name, {**defaults, **getattr(alg, name)})
    for name in ("filter_groups", "overlong_buffer"):
        # Sections of options (DAPO's): each key the user left unset takes the preset's value.
        section = getattr(alg, name)
        for key, value in (preset.get(name) or {}).items():
            if getattr(section, key) is None:
                setattr(section, key, value)
    if trains_on_dataset(alg.algorithm_type):
        # One sample per dataset row (a DPO row's two replies are its pair, not repeats; Trinity-RFT
        # sets a fake 2 for them).
        alg.repeat_times = 1
    elif alg.repeat_times is None:
        alg.repeat_times = preset.get("repeat_times", 1)
    if alg.sample_strategy is None:
        alg.sample_strategy = "mix" if _trains_expert_rows(alg.policy_loss_fn) else "default"


def _trains_expert_rows(policy_loss_fn: str | None) -> bool:
    """The policy loss trains expert rows beside the rollouts (mix, mix_chord); False for an unknown name (reported
    by validation)."""
    from rfthpc.algorithms.registry import POLICY_LOSS_FNS

    try:
        return bool(policy_loss_fn) and POLICY_LOSS_FNS.needs(policy_loss_fn).expert_data
    except ConfigError:
        return False


def _finish_taskset(cfg: Config, ts: TasksetConfig, index: int, is_eval: bool) -> None:
    inp = cfg.buffer.explorer_input
    if not ts.name:
        ts.name = f"{'eval' if is_eval else 'taskset'}{index}"
    if ts.repeat_times is None:
        ts.repeat_times = 1 if is_eval else cfg.algorithm.repeat_times
    workflow = (inp.default_eval_workflow_type or inp.default_workflow_type) if is_eval else inp.default_workflow_type
    ts.default_workflow_type = ts.default_workflow_type or workflow or "math_workflow"
    ts.default_reward_fn_type = ts.default_reward_fn_type or inp.default_reward_fn_type
    ts.format.system_prompt = _fill(ts.format.system_prompt, inp.system_prompt)
    ts.format.reply_prefix = _fill(ts.format.reply_prefix, inp.reply_prefix)
    ra, m = ts.rollout_args, cfg.model
    ra.temperature = _fill(ra.temperature, m.temperature)
    ra.top_p = _fill(ra.top_p, m.top_p)
    ra.top_k = _fill(ra.top_k, m.top_k)
    ra.logprobs = _fill(ra.logprobs, m.logprobs)
    ra.max_tokens = _fill(ra.max_tokens, m.max_response_tokens)
    ts.total_epochs = _fill(ts.total_epochs, cfg.buffer.total_epochs)


def _derive_model(cfg: Config) -> None:
    m = cfg.model
    if m.max_model_len is None and m.max_prompt_tokens is not None and m.max_response_tokens is not None:
        m.max_model_len = m.max_prompt_tokens + m.max_response_tokens
    if m.max_prompt_tokens is None and m.max_model_len is not None and m.max_response_tokens is not None:
        m.max_prompt_tokens = m.max_model_len - m.max_response_tokens
    if m.max_response_tokens is None and m.max_model_len is not None and m.max_prompt_tokens is not None:
        m.max_response_tokens = m.max_model_len - m.max_prompt_tokens
    m.critic_model_path = m.critic_model_path or m.model_path
    rm = cfg.explorer.rollout_model
    rm.model_path = rm.model_path or m.model_path
    for model in (rm, *cfg.explorer.auxiliary_models):
        model.dtype = m.dtype if model.dtype == "auto" else model.dtype
    for i, aux in enumerate(cfg.explorer.auxiliary_models):
        # Trinity-RFT's workflows take auxiliary models by position; here they are addressed by name.
        aux.name = aux.name or f"auxiliary_{i}"
    rm.max_model_len = _fill(rm.max_model_len, m.max_model_len)
    rm.enable_thinking = _fill(rm.enable_thinking, m.enable_thinking)


def _derive_chat_template(cfg: Config, problems: Problems) -> None:
    """One chat template for the policy, for every role: the trainer trains on the template the
    explorers roll out with. Set in `model.custom_chat_template` (the text) and
    `explorer.rollout_model.chat_template` (the same), from whichever of the three keys is set."""
    m, rm = cfg.model, cfg.explorer.rollout_model
    given: dict[str, str] = {}
    if m.chat_template_path:
        path = Path(m.chat_template_path).expanduser()
        if not path.is_file():
            problems.add(f"model.chat_template_path: {path} does not exist; give a readable template file", PATHS)
        else:
            given["model.chat_template_path"] = path.read_text()
    if m.custom_chat_template:
        given["model.custom_chat_template"] = m.custom_chat_template
    if rm.chat_template:
        given["explorer.rollout_model.chat_template"] = rm.chat_template
    if len(set(given.values())) > 1:
        problems.add(f"{' and '.join(given)} give different chat templates; the policy has one template, used by "
                     "the trainer and the explorers alike: set one of them")
    m.custom_chat_template = rm.chat_template = next(iter(given.values()), None)


def _derive_steps(cfg: Config, problems: Problems) -> None:
    b, t = cfg.buffer, cfg.trainer
    if b.total_steps is not None and t.total_steps is not None and b.total_steps != t.total_steps:
        problems.add(f"buffer.total_steps ({b.total_steps}) and trainer.total_steps ({t.total_steps}) disagree; "
                     "set one of them")
    b.total_steps = t.total_steps = _fill(b.total_steps, t.total_steps)


def _derive_slurm(cfg: Config) -> None:
    rm, s, c = cfg.explorer.rollout_model, cfg.slurm, cfg.cluster
    if rm.enable_sleep_mode is None:
        rm.enable_sleep_mode = colocated(cfg) and sleep_mode(cfg)
    s.explorer.array_size = _fill(s.explorer.array_size, rm.engine_num)
    if c.gpu_per_node > 0:
        s.explorer.gpus_per_node = _fill(s.explorer.gpus_per_node, explorer_task_gpus(cfg))
        s.trainer.gpus_per_node = _fill(s.trainer.gpus_per_node, trainer_gpus_per_node(cfg))


def explorer_task_gpus(cfg: Config) -> int:
    """GPUs of one explorer (array task): its rollout engine and one engine of each auxiliary model
    placed `per_explorer` (shared ones run in their own jobs: `server_gpus`)."""
    models = [cfg.explorer.rollout_model, *per_explorer_models(cfg)]
    return sum(m.tensor_parallel_size for m in models)


def per_explorer_models(cfg: Config) -> list[InferenceModelConfig]:
    """The auxiliary models every explorer runs an engine of, in its own process."""
    return [m for m in cfg.explorer.auxiliary_models if m.placement == "per_explorer"]


def shared_models(cfg: Config) -> list[InferenceModelConfig]:
    """The auxiliary models served to every explorer by a server job of their own."""
    return [m for m in cfg.explorer.auxiliary_models if m.placement == "shared"]


def server_gpus(cfg: Config) -> int:
    """GPUs of the shared auxiliary models' servers, counted once for the run as Trinity-RFT counts
    them: `engine_num` x `tensor_parallel_size` of each."""
    if not explores(cfg.mode):
        return 0
    return sum(m.engine_num * m.tensor_parallel_size for m in shared_models(cfg))


def explorer_gpus(cfg: Config) -> int:
    """GPUs the explorer side uses: `rollout_model.engine_num` explorers of `explorer_task_gpus` each,
    and the shared auxiliary models' servers (`server_gpus`)."""
    if not explores(cfg.mode):
        return 0
    return cfg.explorer.rollout_model.engine_num * explorer_task_gpus(cfg) + server_gpus(cfg)


def trainer_gpus_per_node(cfg: Config) -> int:
    """GPUs per trainer node: what the cluster has left after the explorers (Trinity-RFT's rule); with
    `slurm.layout: colocated`, every GPU of the node, which the explorers share."""
    if not trains(cfg.mode):
        return 0
    if colocated(cfg):
        return cfg.cluster.gpu_per_node
    total = cfg.cluster.node_num * cfg.cluster.gpu_per_node
    left = total - explorer_gpus(cfg)
    nodes = max(1, cfg.slurm.trainer.nodes)
    return max(0, min(cfg.cluster.gpu_per_node, left // nodes))


def idle_gpus_note(cfg: Config) -> str | None:
    """A note when the finalized `cfg` leaves some of the cluster's GPUs to nobody: Trinity-RFT gives the
    trainer every GPU the explorers leave, but here the trainer's node count is `slurm.trainer.nodes`."""
    c, t = cfg.cluster, cfg.slurm.trainer
    if c.gpu_per_node <= 0 or cfg.mode != "both" or t.gpus_per_node is None or colocated(cfg):
        return None
    total, explorers = c.node_num * c.gpu_per_node, explorer_gpus(cfg)
    left = total - explorers
    if t.nodes * t.gpus_per_node >= left:
        return None
    nodes = -(-left // c.gpu_per_node)
    return (
        f"cluster: {total} GPUs; the explorers{' and auxiliary model servers' if server_gpus(cfg) else ''} use "
        f"{explorers} and the trainer {t.nodes} node(s) x "
        f"{t.gpus_per_node}, so {left - t.nodes * t.gpus_per_node} stay idle. To train on all {left}, set "
        f"slurm.trainer.nodes: {nodes} (its GPUs per node follow)"
    )


def merge_taskset(cfg: Config, problems: Problems) -> None:
    """Move Trinity's single `taskset` into `tasksets` (in place), the one form the rest of rfthpc reads."""
    inp = cfg.buffer.explorer_input
    if inp.taskset is None:
        return
    if inp.tasksets:
        problems.add("buffer.explorer_input has both `taskset` and `tasksets`; move the single taskset into the "
                     "`tasksets` list")
        inp.taskset = None  # (reported once; the checks go on with the list)
        return
    inp.tasksets, inp.taskset = [inp.taskset], None


def finalize(cfg: Config, source: str = "config", problems: Problems | None = None) -> Config:
    """Return a copy of `cfg` with every derivable value filled in. A value that cannot be derived is
    recorded in `problems` (given one) and the rest is still derived; without one, it is raised."""
    own = problems is None
    problems = Problems(source) if problems is None else problems
    cfg = copy.deepcopy(cfg)
    _apply_preset(cfg, problems)
    merge_taskset(cfg, problems)
    inp = cfg.buffer.explorer_input
    _derive_model(cfg)
    alg = cfg.algorithm
    if alg.loss_agg_mode in SCALED_MODES:
        # Dr. GRPO's constant length: veRL's default is the padded response length, which in rfthpc
        # is each micro-batch's own; the longest response the model may give is one constant.
        alg.loss_scale_factor = _fill(alg.loss_scale_factor, cfg.model.max_response_tokens)
    _derive_chat_template(cfg, problems)
    for i, ts in enumerate(inp.tasksets):
        _finish_taskset(cfg, ts, i, is_eval=False)
    for i, ts in enumerate(inp.eval_tasksets):
        _finish_taskset(cfg, ts, i, is_eval=True)
    b = cfg.buffer
    if b.train_batch_size is None:
        b.train_batch_size = b.batch_size * cfg.algorithm.repeat_times
    _derive_steps(cfg, problems)
    sync = cfg.synchronizer
    if sync.max_staleness is None:
        sync.max_staleness = default_max_staleness(sync.sync_style, sync.sync_interval, sync.sync_offset)
    t = cfg.trainer
    if t.max_token_len_per_gpu is None and cfg.model.max_model_len is not None:
        t.max_token_len_per_gpu = 2 * cfg.model.max_model_len
    # The groups of one trainer step: a trainer-only config sets train_batch_size and not batch_size.
    # (repeat_times < 1 is reported by validation, which runs on the derived config.)
    t.ppo_mini_batch_size = _fill(t.ppo_mini_batch_size, rollout_groups_per_step(cfg))
    cfg.monitor.monitor_type = list(dict.fromkeys(cfg.monitor.monitor_type))
    _derive_slurm(cfg)
    if own:
        problems.raise_if_any()
    return cfg


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`base` with `over` merged into it, mapping by mapping (any other value of `over`, lists
    included, replaces `base`'s)."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def _stage_taskset_into_list(stage_buffer: dict[str, Any], run_buffer: dict[str, Any]) -> None:
    """A stage's single `explorer_input.taskset` (Trinity's form) overrides the run's taskset: merged
    over the run's one taskset, or in place of the run's list when that has several or none."""
    inp = stage_buffer.get("explorer_input")
    if not isinstance(inp, dict) or inp.get("taskset") is None or "tasksets" in inp:
        return  # (both in the stage: finalize reports it)
    single = inp.pop("taskset")
    run_tasksets = run_buffer["explorer_input"]["tasksets"]
    if len(run_tasksets) == 1 and isinstance(single, dict):
        single = deep_merge(run_tasksets[0], single)
    inp["tasksets"] = [single]


@dataclasses.dataclass
class Stage:
    """One resolved stage: its name and its complete config."""

    name: str
    config: Config


def resolve_stages(cfg: Config, source: str = "config", problems: Problems | None = None) -> list[Stage]:
    """The run's stages with their full configs; a config without `stages` is one stage named `rft`.

    `cfg` is the config before `finalize` (derivable fields still unset). Each stage's config is it
    with the stage's sections merged over it, then finalized, so derived values follow the stage
    (e.g. an sft stage has repeat_times 1 and its own batch size). Problems are recorded in
    `problems` (given one; those of a stage marked with it), and every stage is still resolved;
    without one, they are raised.
    """
    own = problems is None
    problems = Problems(source) if problems is None else problems
    if not cfg.stages:
        stages = [Stage("rft", finalize(cfg, source, problems))]
    else:
        base = to_dict(cfg)
        base["stages"] = []
        stages = [_resolve_stage(cfg, base, i, problems) for i in range(len(cfg.stages))]
    if own:
        problems.raise_if_any()
    return stages


def _resolve_stage(cfg: Config, base: dict[str, Any], index: int, run_problems: Problems) -> Stage:
    """Stage `index` of `cfg` with its full config: its sections merged over `base` (`cfg` as plain data)."""
    st = cfg.stages[index]
    name = st.stage_name or f"stage{index}"
    problems = run_problems.for_stage(name)
    merged = copy.deepcopy(base)
    sections = {section: copy.deepcopy(getattr(st, section)) for section in STAGE_SECTIONS}
    if sections["trainer"].pop("trainer_config_path", None):
        problems.add("trainer.trainer_config_path is read for the whole run only; give the stage's veRL settings "
                     "inline as trainer.trainer_config")
    trinity.apply_renamed_keys(sections, problems)
    trinity.apply_trinity_overlong(sections, problems, inherited=base)
    trinity.apply_trinity_old_logprobs(sections, problems, inherited=base)
    verl.apply_verl_trainer_config(sections, problems, inherited=base)
    _stage_taskset_into_list(sections["buffer"], merged["buffer"])
    for section in STAGE_SECTIONS:
        merged[section] = deep_merge(merged[section], sections[section])
    if st.mode is not None:
        merged["mode"] = st.mode
    return Stage(name, finalize(build(Config, merged, "", problems), run_problems.source, problems))

"""Import a ROLL pipeline config (RLVR or agentic) as an rfthpc config: `rfthpc config import --from roll`.

ROLL composes its YAML with Hydra (`defaults:` includes, `${...}` interpolations) and reads it into
its dataclasses, silently dropping keys they lack. This module reads the composed config key by key
(`translation.Translation`): each ROLL setting becomes rfthpc's, is noted, or is refused with the
reason and the alternative; a key ROLL itself drops is noted as such. docs/migration.md has the table.

ROLL's defaults matter where rfthpc's differ (learning rate 5e-5, linear decay, weight decay 0,
sampling at temperature 0.95, top-p 0.7, top-k 50, `seq-mean-token-mean` aggregation, no dual clip):
a key the file leaves out is written with ROLL's default, marked "ROLL default".
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rfthpc.dialects.hydra import Composed, compose
from rfthpc.dialects.roll import ROLL_LORA_RANK, roll_lora_target
from rfthpc.dialects.roll_algorithm import translate_algorithm, translate_optimizer
from rfthpc.dialects.roll_data import sampling, translate_data
from rfthpc.dialects.roll_envs import translate_envs
from rfthpc.dialects.translation import ROLL_DEFAULT, Imported, Translation, in_schema_order, render_yaml, scalar, shown
from rfthpc.errors import ConfigError

_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", None: "auto"}

_OUTPUT_DIRS = ("output_dir", "base_dir", "logging_dir", "rollout_dump_dir", "profiler_output_dir",
                "length_profiler_dir", "otlp_output_dir", "render_save_dir")
_NO_EFFECT_TOP = ("rpc_timeout", "model_update_buffer_size_mb", "profiler_timeline", "profiler_memory",
                  "report_length_and_rewards", "num_nodes", "model_download_type", "local_rank")
_SCHEDULING = ("is_num_return_sequences_expand", "max_running_requests", "generate_opt_level",
               "is_use_additional_prompts", "max_additional_running_prompts")

ROLL_DROPS = {
    "*.model_args.flash_attn": "not a field of ROLL's ModelArguments (its attention switch is attn_implementation)",
    "*.data_args.dataset_dir": "not a field of ROLL's DataArguments: file_name is read from the working directory",
    "*.data_args.interleave_probs": "not a field of ROLL's DataArguments (domain_interleave_probs is)",
    "validation.eval_steps": "not a field of ROLL's WorkerConfig (the top-level eval_steps sets the interval)",
    "actor_train.tis_lower_bound": "not a field of ROLL's WorkerConfig: ROLL's tis loss always uses 0.0",
    "actor_train.tis_upper_bound": "not a field of ROLL's WorkerConfig: ROLL's tis loss always uses 1.0",
    "actor_train.cispo_epsilon_low": "not a field of ROLL's WorkerConfig: ROLL's cispo loss always uses 0.1",
    "actor_train.cispo_epsilon_high": "not a field of ROLL's WorkerConfig: ROLL's cispo loss always uses 0.1",
    "actor_train.cispo_use_unified_mask": "not a field of ROLL's WorkerConfig: ROLL's cispo loss never masks",
    "actor_train.kimi15_tau": "not a field of ROLL's WorkerConfig: ROLL's kimi15 loss always uses 0.1",
}
"""Keys ROLL's dataclasses do not have, which ROLL therefore drops (dacite ignores unknown keys)."""


_COMMON_FIELDS = frozenset((
    "actor_infer", "actor_train", "add_len_reward", "add_token_level_kl", "adv_estimator", "advantage_clip",
    "async_generation_ratio", "base_dir", "checkpoint_config", "critic", "critic_warmup", "dual_clip_loss",
    "enable_old_logprobs_recompute", "enable_reference", "entropy_loss_coef", "eval_steps", "exp_name",
    "force_disable_old_logprobs_recompute", "gamma", "generate_opt_level", "init_kl_coef",
    "is_num_return_sequences_expand", "is_offload_optimizer_states_in_train_step", "is_offload_states", "is_pure_opd",
    "is_use_additional_prompts", "kl_horizon", "kl_loss_coef", "kl_penalty", "l2", "lambd", "length_profiler_dir",
    "local_rank", "logging_dir", "logging_steps", "loss_agg_mode", "max_additional_running_prompts",
    "max_ckpt_to_keep", "max_grad_norm", "max_running_requests", "max_steps", "model_download_type",
    "model_update_buffer_size_mb", "norm_mean_type", "norm_std_type", "num_gpus_per_node", "num_nodes",
    "otlp_output_dir", "output_dir", "pg_clip", "pg_clip_high", "pg_clip_low", "ppo_epochs", "pretrain",
    "profiler_memory", "profiler_output_dir", "profiler_timeline", "prompt_length", "pure_opd_pipeline_type",
    "reference", "report_length_and_rewards", "response_length", "resume_from_checkpoint", "reward", "reward_clip",
    "reward_pretrain", "rollout_batch_size", "rollout_dump_dir", "rollout_mock", "router_args", "rpc_timeout",
    "save_steps", "seed", "sequence_length", "student_infer", "student_train", "system_envs", "target_kl", "teacher",
    "track_with", "tracker_kwargs", "train_infer_correction", "transfer_backend", "use_kl_loss", "use_opd",
    "use_pg_clip_range", "use_reward_norm", "use_reward_scaling", "user_defined_rollout_loop_cls", "val_batch_size",
    "val_prompt_length", "val_sequence_length", "value_clip", "whiten_advantages", "whiten_rewards",
))
_RLVR_FIELDS = _COMMON_FIELDS | frozenset((
    "balance_length", "dataset_filter", "difficulty_high_threshold", "difficulty_loss_weight",
    "difficulty_low_threshold", "difficulty_mask", "error_max_len_clip", "error_max_len_threshold", "global_template",
    "importance_sampling", "length_loss_weight", "mask_type", "max_len_mask", "minibatch_data_iter_num",
    "num_return_sequences_in_group", "postive_loss_coef", "reward_model", "rewards", "rl_loss_coef",
    "save_logging_board_dir", "tag_to_template", "use_policy_loss_type", "use_topr_loss", "use_topr_neg_loss_coef",
    "val_greedy", "val_n_sample", "validation",
))
_AGENTIC_FIELDS = _COMMON_FIELDS | frozenset((
    "batch_adjust_mode", "custom_envs", "dirty_data_mask", "env_monitor", "episode_reward_weight", "exp_mode",
    "open_feedback_turn", "parse_tool_call_parameter_to_dict", "partial_gpu_mode", "ratio_type", "render_save_dir",
    "reward", "reward_normalization", "skip_mock_system_prompt", "step_reward_gamma", "step_reward_weight",
    "train_env_manager", "use_token_reward", "val_env_manager",
))
"""The top-level fields of ROLL's RLVRConfig and AgenticConfig (at the commit of tests/config/roll_examples);
ROLL drops any other key."""


@dataclass
class _Shape:
    """What several parts of the translation need: group size, groups per step, GPUs of each role."""

    agentic: bool
    n: int = 1
    groups: int = 1
    train_gpus: int = 0
    engines: int = 1
    max_new_tokens: int | None = None
    updates: int = 1
    """ROLL's optimizer steps per pipeline step (rfthpc's schedules move per trainer step)."""


def import_roll(path: Path | str, tasks_dir: Path | None = None, ignore: tuple[str, ...] | list[str] = (),
                overrides: tuple[str, ...] | list[str] = ()) -> Imported:
    """Translate the ROLL config at `path` (with its `defaults:` includes and Hydra `overrides`).

    An agentic config's tasksets (environment seeds) are returned for `tasks_dir`, which it then needs;
    ConfigError lists every ROLL setting that cannot be imported (those in `ignore` become notes)."""
    path = Path(path)
    composed = compose(path, overrides)
    agentic = any(k in composed.data for k in ("custom_envs", "train_env_manager", "val_env_manager"))
    fields_, schema = (_AGENTIC_FIELDS, "AgenticConfig") if agentic else (_RLVR_FIELDS, "RLVRConfig")
    other = (_RLVR_FIELDS if agentic else _AGENTIC_FIELDS) - fields_
    dropped = sorted(k for k in composed.data if k in other)
    t = Translation({k: v for k, v in composed.data.items() if k not in other}, "ROLL")
    t.notes += composed.notes
    if dropped:
        t.notes.append(f"{', '.join(dropped)}: ROLL ignores {'them' if len(dropped) > 1 else 'it'} (not a field "
                       f"of ROLL's {schema}, the {'agentic' if agentic else 'RLVR'} pipeline's config)")
    if agentic and tasks_dir is None:
        raise ConfigError(f"{path}: an agentic ROLL config imports with taskset files of environment seeds, "
                          "written beside the imported config: give --out FILE")
    shape = _Shape(agentic)
    tasksets: dict[Path, list[dict[str, Any]]] = {}
    for pattern, why in ROLL_DROPS.items():
        for key in [k for k in t.leaves if _matches(k, pattern)]:
            t.note(key, f"ROLL ignores it ({why})")
    _run(t, path)
    _resources(t, shape)
    _model(t, shape)
    _generation(t, shape)
    _batches(t, shape)
    translate_algorithm(t, agentic)
    translate_optimizer(t, shape.updates)
    _roles(t)
    if agentic:
        tasksets = translate_envs(t, tasks_dir, groups=shape.groups, n=shape.n, engines=shape.engines,
                                  max_new_tokens=shape.max_new_tokens)
    else:
        translate_data(t)
    # Whether an unread key came through `defaults:` or sits in the file itself (a merged config), ROLL
    # drops it alike: only a key that feeds interpolations or anchors is a silent helper.
    t.sweep(composed.referenced | composed.anchored, set(fields_), schema, drops_unknown=True)
    t.apply_ignores(ignore)
    t.raise_if_refused(str(path))
    config = in_schema_order(t.config)
    notes = list(dict.fromkeys(t.notes))
    command = " ".join([str(path), *overrides, *(f"--ignore {k}" for k in ignore)])
    return Imported(render_yaml(config, t.sources, _header(t, composed, command)), config, tasksets, notes)


def _matches(key: str, pattern: str) -> bool:
    return key == pattern or (pattern.startswith("*.") and key.split(".", 1)[-1] == pattern[2:])


def _header(t: Translation, composed: Composed, command: str) -> list[str]:
    lines = [f"Imported from ROLL by `rfthpc config import --from roll {command}`.",
             f"Read: {', '.join(shown(f) for f in composed.files)}",
             ("Beside each value: the ROLL key it comes from (\"ROLL default\": ROLL's default for a key the file "
              "leaves out)."), ""]
    if t.notes:
        lines.append("Read differently, or without effect in rfthpc:")
        lines += [f"- {n}" for n in dict.fromkeys(t.notes)]
        lines.append("")
    if t.same:
        lines.append("Done the same way by rfthpc without a setting: " + "; ".join(dict.fromkeys(t.same)))
        lines.append("")
    dropped = ["defaults"] * bool(composed.files[1:]) + ["hydra"] * bool(composed.hydra)
    if dropped or t.helpers:
        lines.append("Not ROLL settings (Hydra's own, or helper values for interpolations and includes): "
                     + ", ".join(dropped + t.helpers))
        lines.append("")
    return lines


def _run(t: Translation, path: Path) -> None:
    name = t.get("exp_name")
    t.set("name", str(name) if name else re.sub(r"[^\w.-]", "_", path.stem), "exp_name" if name else "the file's name")
    ckpt = t.get("checkpoint_config.output_dir")
    if ckpt:
        t.set("checkpoint_root_dir", str(ckpt), "checkpoint_config.output_dir (rfthpc adds <project>/<name>)")
    t.same_if("checkpoint_config.type", "file_system", "rfthpc keeps checkpoints on the shared filesystem only")
    t.note("checkpoint_config.async_upload", "rfthpc writes checkpoints in the trainer job, without uploading")
    t.note(_OUTPUT_DIRS, "rfthpc writes logs, metrics and checkpoints into the run directory "
                         "<checkpoint_root_dir>/<project>/<name>/ and renders no frames")
    t.note(_NO_EFFECT_TOP, "no rfthpc counterpart (Ray timeouts, profiling, node count); no effect on training")
    envs = t.get("system_envs") or {}
    if envs:
        t.set("slurm.setup", [f"export {k}={_shell(v)}" for k, v in envs.items()], "system_envs")
        t.notes.append(f"{', '.join(f'system_envs.{k}' for k in envs)}: exported by every Slurm job's setup lines "
                       "(slurm.setup); `rfthpc run` does not read them")
    tracker = t.get("track_with", "tensorboard")
    sinks = {"tensorboard": ["console", "tensorboard"], "wandb": ["console", "wandb"], "stdout": ["console"]}
    if tracker in sinks:
        t.set("monitor.monitor_type", sinks[tracker], "track_with" if t.has("track_with") else ROLL_DEFAULT)
    else:
        t.refuse("track_with", f"{tracker!r}: rfthpc writes metrics to console, wandb, tensorboard and jsonl; "
                               "use one of tensorboard, wandb, stdout")
    kwargs = t.get("tracker_kwargs") or {}
    wandb_args = {k: v for k, v in kwargs.items() if k in ("project", "name", "entity", "tags", "notes", "group")}
    if tracker == "wandb" and wandb_args:
        t.set("monitor.monitor_args", wandb_args, "tracker_kwargs")
    if "log_dir" in kwargs:
        t.notes.append("tracker_kwargs.log_dir: rfthpc writes tensorboard event files to "
                       "<run dir>/monitor/tensorboard/")
    if "api_key" in kwargs:
        t.notes.append("tracker_kwargs.api_key: not copied (the config is stored in the run directory); "
                       "export WANDB_API_KEY in the environment instead")
    unused = set(kwargs) - set(wandb_args) - {"log_dir", "api_key"} if tracker == "wandb" else \
        set(kwargs) - {"log_dir", "api_key"}
    if unused:
        t.notes.append(f"tracker_kwargs.{', '.join(sorted(unused))}: not used by rfthpc's {tracker} sink")
    if t.has("logging_steps"):
        if t.get("logging_steps") == 1:
            t.same.append("logging_steps: 1")
        else:
            t.note("logging_steps", "rfthpc logs metrics every step")
    resume = t.get("resume_from_checkpoint", False)
    if isinstance(resume, str):
        t.refuse("resume_from_checkpoint", "resuming from a ROLL checkpoint is not possible: rfthpc resumes from "
                                           "its own run directory; start from a Hugging Face model (pretrain)")
    elif t.has("resume_from_checkpoint"):
        t.notes.append(f"resume_from_checkpoint: {scalar(resume)}: rfthpc resumes a run from its own run directory "
                       "(continue_from_checkpoint: true, needed for requeues); give a new run a new name")
    steps = t.whole("max_steps", 500)
    if steps is None or steps <= 0:
        t.refuse("max_steps", f"{steps!r}: rfthpc needs a number of trainer steps > 0")
    else:
        t.set("buffer.total_steps", steps, "max_steps" if t.has("max_steps") else ROLL_DEFAULT)
    if t.has("save_steps"):
        t.set("trainer.save_interval", t.get("save_steps"), "save_steps (rfthpc also saves at the end)")
    t.set("explorer.rollout_model.seed", t.get("seed", 42), "seed" if t.has("seed") else ROLL_DEFAULT)
    keep = t.get("max_ckpt_to_keep", 0)
    if keep:
        t.set("trainer.max_checkpoints_to_keep", keep, "max_ckpt_to_keep")
    ratio = t.get("async_generation_ratio", 0)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio < 0 or ratio != int(ratio):
        t.refuse("async_generation_ratio", f"{ratio!r}: rfthpc's explorers run a whole number of batches "
                                           "ahead (synchronizer.sync_offset); use a whole number")
    else:
        source = "async_generation_ratio" if t.has("async_generation_ratio") else ROLL_DEFAULT
        t.set("synchronizer.sync_interval", 1, source)
        t.set("synchronizer.sync_offset", int(ratio), source)
    t.note(_SCHEDULING, "ROLL's request scheduling; rfthpc's explorers send each task's group as one request "
                        "(explorer.runner_per_model tasks per engine at once)")


def _shell(value: Any) -> str:
    text = str(value)
    return text if re.fullmatch(r"[\w./:@%+-]*", text) else "'" + text.replace("'", "'\\''") + "'"


def _devices(t: Translation, role: str) -> list[int] | None:
    key = f"{role}.device_mapping"
    value = t.get(key)
    if value is None:
        return None
    try:
        devices = _eval_devices(ast.parse(str(value), mode="eval").body) if isinstance(value, str) else value
        if not isinstance(devices, list) or not all(isinstance(d, int) and d >= 0 for d in devices):
            raise ValueError
    except (SyntaxError, ValueError):
        t.refuse(key, f"{value!r}: expected a list of GPU ids, e.g. list(range(0,8)) or [0, 1, 2, 3]")
        return None
    return devices


def _eval_devices(node: ast.AST) -> Any:
    """The value of ROLL's device_mapping expression; only lists, ranges and `+` of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_eval_devices(e) for e in node.elts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _eval_devices(node.left) + _eval_devices(node.right)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("list", "range")
            and not node.keywords):
        args = [_eval_devices(a) for a in node.args]
        if node.func.id == "range" and all(isinstance(a, int) for a in args) and 1 <= len(args) <= 3:
            return list(range(*args))
        if node.func.id == "list" and len(args) == 1 and isinstance(args[0], list):
            return args[0]
    raise ValueError(ast.dump(node))


def _resources(t: Translation, shape: _Shape) -> None:
    per_node = t.whole("num_gpus_per_node", 8, 0)
    t.set("cluster.gpu_per_node", per_node, "num_gpus_per_node" if t.has("num_gpus_per_node") else ROLL_DEFAULT)
    train, infer = _devices(t, "actor_train"), _devices(t, "actor_infer")
    reference = _devices(t, "reference")
    if train is None and not t.has("actor_train.device_mapping"):
        t.refuse("actor_train.device_mapping", "not set: rfthpc's trainer runs on GPUs; give actor_train its GPUs")
    if infer is None and not t.has("actor_infer.device_mapping"):
        t.refuse("actor_infer.device_mapping", "not set: rfthpc's explorers run vLLM on GPUs; give actor_infer "
                                               "its GPUs")
    if train is None or infer is None:
        return
    tp = _engine(t)
    if len(infer) % tp:
        t.refuse("actor_infer.device_mapping", f"{len(infer)} GPUs do not split into engines of {tp} GPUs")
        return
    shape.train_gpus, shape.engines = len(train), len(infer) // tp
    t.set("explorer.rollout_model.engine_num", shape.engines,
          f"actor_infer.device_mapping ({len(infer)} GPUs, {tp} per engine)")
    if per_node <= 0:
        return
    nodes = -(-(len(train) + len(infer)) // per_node)
    t.set("cluster.node_num", nodes, f"actor_train.device_mapping ({len(train)} GPUs) + actor_infer.device_mapping "
                                     f"({len(infer)}), as separate jobs")
    trainer_nodes = -(-len(train) // per_node)
    if trainer_nodes > 1:
        t.set("slurm.trainer.nodes", trainer_nodes, f"actor_train.device_mapping ({len(train)} GPUs)")
    if nodes * per_node - len(infer) != len(train):
        if len(train) % trainer_nodes:
            t.notes.append(f"actor_train.device_mapping: {len(train)} GPUs do not split evenly over "
                           f"{trainer_nodes} nodes; the trainer gets {len(train) // trainer_nodes} per node")
        t.set("slurm.trainer.gpus_per_node", len(train) // trainer_nodes,
              f"actor_train.device_mapping ({len(train)} GPUs)")
    if set(train) & set(infer):
        t.notes.append(f"actor_train and actor_infer share GPUs ({len(set(train) & set(infer))} of them): ROLL "
                       "time-shares them, rfthpc runs the trainer and the explorers as separate Slurm jobs, so the "
                       f"run takes {len(train)} + {len(infer)} GPUs (fewer engines: lower "
                       "explorer.rollout_model.engine_num)")
    if reference is not None:
        t.notes.append("reference.device_mapping: rfthpc computes reference log-probabilities in the trainer job, "
                       "and only when a KL term needs them")


def _engine(t: Translation) -> int:
    """Translate actor_infer's inference strategy; its GPUs per engine."""
    name = t.get("actor_infer.strategy_args.strategy_name", "vllm")
    config = {k: t.get(f"actor_infer.strategy_args.strategy_config.{k}")
              for k in t.keys("actor_infer.strategy_args.strategy_config")}
    t.get("actor_infer.strategy_args.strategy_config")
    t.set("explorer.rollout_model.engine_type", "vllm", "actor_infer.strategy_args.strategy_name")
    noted = []
    tp = 1
    if name == "sglang":
        t.notes.append("actor_infer.strategy_args.strategy_name: sglang: rfthpc's rollout engine is vLLM "
                       "(the same sampling; SGLang's memory settings are read as vLLM's)")
        tp = int(config.pop("tp_size", None) or config.pop("tensor_parallel_size", None)
                 or t.get("actor_infer.num_gpus_per_worker", 1))
        if "mem_fraction_static" in config:
            t.set("explorer.rollout_model.gpu_memory_utilization", config.pop("mem_fraction_static"),
                  "actor_infer.strategy_args.strategy_config.mem_fraction_static")
    elif name == "vllm":
        tp = int(config.pop("tensor_parallel_size", 1) or 1)
        if int(config.pop("pipeline_parallel_size", 1) or 1) > 1:
            t.refuse("actor_infer.strategy_args.strategy_config.pipeline_parallel_size",
                     "rfthpc's engines use tensor parallelism only; use tensor_parallel_size")
        for ours, theirs in (("gpu_memory_utilization", "gpu_memory_utilization"), ("max_model_len", "max_model_len"),
                             ("enforce_eager", "enforce_eager"), ("enable_prefix_caching", "enable_prefix_caching"),
                             ("enable_chunked_prefill", "enable_chunked_prefill")):
            if theirs in config:
                t.set(f"explorer.rollout_model.{ours}", config.pop(theirs),
                      f"actor_infer.strategy_args.strategy_config.{theirs}")
    else:
        t.refuse("actor_infer.strategy_args.strategy_name", f"{name!r}: ROLL's rollout engines are vllm and sglang")
    if tp > 1:
        t.set("explorer.rollout_model.tensor_parallel_size", tp, "actor_infer tensor parallelism")
    noted = sorted(config)
    if noted:
        t.notes.append(f"actor_infer.strategy_args.strategy_config.{', '.join(noted)}: engine tuning "
                       "rfthpc does not set (it loads weights from the run directory, with vLLM's defaults)")
    t.note("actor_infer.num_gpus_per_worker", "read as the engine's tensor parallelism")
    return tp


def _dtype(t: Translation, key: str) -> str | None:
    value = t.get(key, "bf16")
    if value not in _DTYPES:
        t.refuse(key, f"{value!r}: ROLL's dtypes are fp32, bf16, fp16")
        return None
    return _DTYPES[value]


def _model(t: Translation, shape: _Shape) -> None:
    pretrain = t.get("pretrain")
    if not pretrain:
        t.refuse("pretrain", "not set: name the model to fine-tune")
    else:
        t.set("model.model_path", str(pretrain), "pretrain")
        if not str(pretrain).startswith(("/", ".", "~")) and not Path(str(pretrain)).exists():
            t.notes.append(f"pretrain: {pretrain!r} looks like a Hub id; compute nodes have no internet: download "
                           "it and set model.model_path to the local directory")
    dtype = _dtype(t, "actor_train.model_args.dtype")
    if dtype:
        t.set("model.dtype", dtype, "actor_train.model_args.dtype" if t.has("actor_train.model_args.dtype")
              else ROLL_DEFAULT)
    dtype = _dtype(t, "actor_infer.model_args.dtype")
    if dtype:
        t.set("explorer.rollout_model.dtype", dtype, "actor_infer.model_args.dtype"
              if t.has("actor_infer.model_args.dtype") else ROLL_DEFAULT)
    megatron = t.get("actor_train.strategy_args.strategy_name", "fsdp2_train") == "megatron_train"
    recompute = t.get("actor_train.strategy_args.strategy_config.recompute_granularity")
    disabled = t.get("actor_train.model_args.disable_gradient_checkpointing", False)
    if megatron:
        t.set("trainer.enable_gradient_checkpointing", recompute is not None,
              "actor_train.strategy_args.strategy_config.recompute_granularity" if recompute is not None
              else f"{ROLL_DEFAULT}: Megatron without recompute_granularity recomputes nothing")
        t.note("actor_train.model_args.disable_gradient_checkpointing",
               "no effect with megatron_train (recompute_granularity decides)")
    else:
        t.set("trainer.enable_gradient_checkpointing", not disabled,
              "actor_train.model_args.disable_gradient_checkpointing" if t.has(
                  "actor_train.model_args.disable_gradient_checkpointing") else ROLL_DEFAULT)
    for role in ("actor_train", "actor_infer", "reference"):
        t.same_if(f"{role}.model_args.model_type", None, "ROLL's reward-model types; the policy is a causal LM")
        t.note(f"{role}.model_args.attn_implementation", "rfthpc picks the attention implementation itself")
    t.note("actor_infer.model_args.disable_gradient_checkpointing", "no effect on inference")
    _lora(t)
    if shape.agentic:
        length = t.get("sequence_length")
        prompt = t.whole("prompt_length", 1024)
        if not length:
            t.refuse("sequence_length", "not set: an agentic config needs the token limit of an episode")
            return
        t.set("model.max_model_len", length, "sequence_length (an episode's tokens)")
        t.set("model.max_prompt_tokens", prompt, "prompt_length" if t.has("prompt_length") else ROLL_DEFAULT)
        t.set("model.max_response_tokens", length - prompt, "sequence_length - prompt_length")
        t.note("response_length", "an agentic episode is limited by sequence_length")
    else:
        prompt = t.whole("prompt_length", 1024)
        length, response = t.get("sequence_length"), t.get("response_length")
        if length is None and response is None:
            t.refuse("response_length", "neither response_length nor sequence_length is set (ROLL needs one)")
            return
        new_tokens = length - prompt if length is not None else response
        t.set("model.max_prompt_tokens", prompt, "prompt_length" if t.has("prompt_length") else ROLL_DEFAULT)
        t.set("model.max_response_tokens", new_tokens,
              "sequence_length - prompt_length" if length is not None else "response_length")
        t.set("model.enable_prompt_truncation", False, "ROLL drops prompts longer than prompt_length")
        shape.max_new_tokens = new_tokens
    for key in ("val_prompt_length", "val_sequence_length"):
        base = "prompt_length" if key == "val_prompt_length" else "sequence_length"
        if t.has(key) and t.get(key) != t.get(base):
            t.refuse(key, f"{t.get(key)}: rfthpc evaluates with the training token limits ({base})")


def _lora(t: Translation) -> None:
    """actor_train's LoRA adapter (ROLL trains one when `lora_target` is set) as `model.lora`."""
    args = "actor_train.model_args."
    target = t.get(args + "lora_target")
    if target:
        t.set("model.lora.target_modules", roll_lora_target(target), args + "lora_target")
        rank = t.get(args + "lora_rank") or ROLL_LORA_RANK
        t.set("model.lora.lora_rank", rank, args + "lora_rank" if t.has(args + "lora_rank") else ROLL_DEFAULT)
        alpha = t.get(args + "lora_alpha")
        t.set("model.lora.lora_alpha", alpha or 2 * rank, args + "lora_alpha" if alpha else f"{ROLL_DEFAULT} (2 x rank)")
        for key, field_ in (("lora_dropout", "lora_dropout"), ("adapter_name_or_path", "path")):
            if t.get(args + key) is not None:
                t.set(f"model.lora.{field_}", t.get(args + key), args + key)
    else:
        t.note([args + k for k in ("lora_rank", "lora_alpha", "lora_dropout")],
               "read only with lora_target (without it ROLL trains every weight, as rfthpc does)")
    t.note([f"{role}.model_args.{k}" for role in ("actor_infer", "reference") for k in (
        "lora_target", "lora_rank", "lora_alpha", "lora_dropout", "adapter_name_or_path")],
        "the adapter is actor_train's (model.lora); the rollout engine applies it, the KL reference is the base")
    for key in ("lora_target", "adapter_name_or_path"):
        if t.get("critic.model_args." + key):
            t.refuse("critic.model_args." + key, "rfthpc trains every weight of the critic; a LoRA adapter is trained "
                     "for the policy only (actor_train.model_args)")


def _generation(t: Translation, shape: _Shape) -> None:
    """actor_infer.generating_args (agentic: train_env_manager's when actor_infer has none)."""
    section = "actor_infer.generating_args"
    if shape.agentic and not t.has(section) and t.has("train_env_manager.generating_args"):
        section = "train_env_manager.generating_args"
    sampling(t, section, "model", {"temperature": 0.95, "top_p": 0.7, "top_k": 50})
    new_tokens = t.get(f"{section}.max_new_tokens", 8192)
    if shape.agentic:
        shape.max_new_tokens = new_tokens
        returns = t.get(f"{section}.num_return_sequences")
        if returns not in (None, 1):
            t.notes.append(f"{section}.num_return_sequences: {returns}: ROLL's agentic pipeline sets it to 1 "
                           "(train_env_manager.group_size makes the groups)")
        elif returns == 1:
            t.same.append(f"{section}.num_return_sequences: 1 (one episode per environment)")
    else:
        if t.has(f"{section}.max_new_tokens") and new_tokens != shape.max_new_tokens:
            t.notes.append(f"{section}.max_new_tokens: {new_tokens}: ROLL replaces it by sequence_length - "
                           f"prompt_length ({shape.max_new_tokens})")
        elif t.has(f"{section}.max_new_tokens"):
            t.same.append(f"{section}.max_new_tokens: {new_tokens} (model.max_response_tokens)")
        returns = t.get(f"{section}.num_return_sequences")
        group = t.whole("num_return_sequences_in_group", 1)
        if returns is not None and returns != group:
            t.notes.append(f"{section}.num_return_sequences: {returns}: ROLL replaces it by "
                           f"num_return_sequences_in_group ({group})")
        elif returns is not None:
            t.same.append(f"{section}.num_return_sequences: {returns} (algorithm.repeat_times)")


def _batches(t: Translation, shape: _Shape) -> None:
    """Group size, groups per step, epochs and the optimizer's mini-batches."""
    # Read first: a refusal below ends the function, and these keys must not become refusals of their own.
    t.note(["actor_train.sequence_length_round_in_train", "actor_train.infer_batch_size",
            "actor_infer.infer_batch_size", "reference.infer_batch_size"],
           "batching of forward passes; rfthpc packs them by tokens")
    if t.has("actor_train.use_dynamic_batching_in_train"):
        t.set("trainer.use_dynamic_bsz", bool(t.get("actor_train.use_dynamic_batching_in_train")),
              "actor_train.use_dynamic_batching_in_train")
    tokens = t.get("actor_train.max_tokens_per_microbatch_in_train")
    if tokens:
        t.set("trainer.max_token_len_per_gpu", tokens, "actor_train.max_tokens_per_microbatch_in_train")
    if shape.agentic:
        n = t.whole("train_env_manager.group_size", 1)
        trajectories = t.whole("rollout_batch_size", 128)
        if trajectories <= 0 or trajectories % n:
            t.refuse("rollout_batch_size", f"{trajectories}: ROLL's agentic batches are whole groups of "
                                           f"train_env_manager.group_size ({n}) trajectories")
            return
        groups = trajectories // n
        t.set("algorithm.repeat_times", n, "train_env_manager.group_size (episodes of one seed)")
        t.set("buffer.batch_size", groups, "rollout_batch_size / train_env_manager.group_size")
    else:
        n = t.whole("num_return_sequences_in_group", 1)
        groups = t.whole("rollout_batch_size", 128)
        t.set("algorithm.repeat_times", n, "num_return_sequences_in_group" if t.has("num_return_sequences_in_group")
              else ROLL_DEFAULT)
        t.set("buffer.batch_size", groups, "rollout_batch_size" if t.has("rollout_batch_size") else ROLL_DEFAULT)
    shape.n, shape.groups = n, groups
    epochs = t.whole("ppo_epochs", 1)
    t.set("trainer.ppo_epochs", epochs, "ppo_epochs" if t.has("ppo_epochs") else ROLL_DEFAULT)
    per_device = t.whole("actor_train.training_args.per_device_train_batch_size", 8)
    accumulation = t.whole("actor_train.training_args.gradient_accumulation_steps", 1)
    dp = _data_parallel(t, shape.train_gpus)
    update = per_device * accumulation * dp
    samples = groups * n
    where = ("actor_train.training_args.per_device_train_batch_size x gradient_accumulation_steps x "
             f"data parallel {dp}")
    if not dp:
        return
    if samples % update or update % n:
        t.refuse("actor_train.training_args.gradient_accumulation_steps",
                 f"ROLL's optimizer steps take {update} samples ({where}) of a batch of {samples}; rfthpc's "
                 f"take whole groups of {n} and divide the batch evenly: make it a multiple of {n} dividing {samples}")
        return
    t.set("trainer.ppo_mini_batch_size", update // n, f"{where} = {update} samples, in groups of {n}")
    shape_updates = samples // update * epochs
    t.notes.append("actor_train.training_args.per_device_train_batch_size, gradient_accumulation_steps: ROLL's "
                   f"optimizer steps of {update} samples are rfthpc's "
                   f"mini-batches of {update // n} groups ({shape_updates} update(s) per step); micro-batches are "
                   "packed by tokens (trainer.max_token_len_per_gpu)")
    shape.updates = shape_updates


def _data_parallel(t: Translation, gpus: int) -> int:
    """ROLL's data-parallel size of actor_train: its GPUs over the model-parallel size."""
    name = t.get("actor_train.strategy_args.strategy_name", "fsdp2_train")
    if name == "megatron_train":
        cfg = "actor_train.strategy_args.strategy_config"
        split = 1
        for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size"):
            split *= int(t.leaves.get(f"{cfg}.{key}") or 1)
    elif name == "fsdp2_train":
        split = int(t.get("actor_train.model_args.ulysses_size") or 1)
        if split > 1:
            t.set("trainer.ulysses_sequence_parallel_size", split, "actor_train.model_args.ulysses_size")
    else:
        split = 1
    if gpus % split:
        t.refuse("actor_train.device_mapping", f"{gpus} GPUs do not split into model-parallel groups of {split}")
        return 0
    return gpus // split


def _roles(t: Translation) -> None:
    """What the roles' strategies, templates and the reference model become."""
    strategy = t.get("actor_train.strategy_args.strategy_name", "fsdp2_train")
    config = "actor_train.strategy_args.strategy_config"
    if strategy == "megatron_train":
        t.note(config, "Megatron's parallelism, fusions and optimizer sharding: rfthpc trains with FSDP2 "
                       "(same model and loss; parallelism is data parallel over the trainer's GPUs)")
        t.notes.append("actor_train.strategy_args.strategy_name: megatron_train: rfthpc trains with FSDP2")
    elif strategy in ("fsdp2_train", "deepspeed_train"):
        t.note(config, "trainer sharding and offload settings of ROLL's strategy; rfthpc's are trainer.param_offload "
                       "and optimizer_offload")
        if strategy == "deepspeed_train":
            t.notes.append("actor_train.strategy_args.strategy_name: deepspeed_train: rfthpc trains with FSDP2")
    else:
        t.refuse("actor_train.strategy_args.strategy_name", f"{strategy!r}: not a ROLL training strategy")
    t.note(["reference.strategy_args", "reference.data_args", "reference.model_args"],
           "rfthpc computes reference log-probabilities in the trainer job, with the trainer's model and dtype, "
           "only when a KL term needs them")
    t.note(["actor_train.data_args.template", "actor_infer.data_args.template", "global_template",
            "tag_to_template"],
           "ROLL's named chat template; rfthpc renders prompts with the model's own chat template "
           "(model.custom_chat_template to replace it)")
    for role in ("actor_train", "actor_infer", "reference"):
        keys = ["system_envs", "backend_timeout", "offload_nccl", "max_concurrency", "model_update_frequency",
                "logits_in_fp32", "apply_loss_scale"] + ["num_gpus_per_worker"] * (role != "actor_infer")
        t.note([f"{role}.{k}" for k in keys], "Ray worker settings without an rfthpc counterpart")
        t.note(f"{role}.name", "ROLL sets role names itself")

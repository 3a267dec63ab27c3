"""Import a whole veRL run as an rfthpc config: `rfthpc config import --from verl`.

veRL composes its config with Hydra (`verl/trainer/config/ppo_trainer.yaml` and its `defaults:`
groups) and takes command-line overrides, usually from a launch script
(`examples/grpo_trainer/run_*.sh`, read by `verl_script`). The composed config is read key by key
(`translation.Translation`), in two parts, so that each veRL key has one meaning in rfthpc:
- the training settings Trinity-RFT's `trainer.trainer_config` carries (actor, critic, reference,
  algorithm, reward model, ...) go through rfthpc's one veRL mapping (`verl.VERL_MAP`, `verl.VERL_KEYS`):
  mapped, ignored with a note, or refused, as in a Trinity-RFT config;
- what only a whole veRL run has, which Trinity-RFT takes from its own sections (`data`,
  `actor_rollout_ref.rollout`, the run's `trainer.*` keys, the reward), is translated here and in
  `verl_data`.
Every problem is reported in one error; docs/migration.md has the table.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rfthpc.dialects import mapping, verl
from rfthpc.dialects.hydra import Composed, compose
from rfthpc.dialects.translation import Imported, Translation, in_schema_order, render_yaml, scalar, shown
from rfthpc.dialects.verl_data import multimodal_evidence, refuse_multimodal, translate_data, translate_rollout
from rfthpc.dialects.verl_megatron import translate_megatron, uses_megatron
from rfthpc.dialects.verl_script import Launch, read_script
from rfthpc.errors import ConfigError, Problems

_OWN = ("data.", "actor_rollout_ref.rollout.", "custom_reward_function.")
"""Sections this importer translates itself (Trinity-RFT sets them from its own sections)."""
_OWN_TRAINER = ("total_epochs", "total_training_steps", "project_name", "experiment_name", "logger", "nnodes",
                "n_gpus_per_node", "save_freq", "test_freq", "val_before_train", "resume_mode", "default_local_dir")
"""The run's `trainer.*` keys (VERL_KEYS ignores them in a Trinity-RFT config, which sets them itself)."""
_SINKS = ("console", "wandb", "tensorboard")
"""veRL's loggers that are rfthpc's sinks of the same name."""
_ENTRY = "verl.trainer.main_ppo"
_ROLLOUT_TP = "actor_rollout_ref.rollout.tensor_model_parallel_size"


def import_verl(path: Path | str, overrides: list[str] | tuple[str, ...] = (), ignore: list[str] | tuple[str, ...] = (),
                script: Path | str | None = None, environ: Mapping[str, str] | None = None) -> Imported:
    """Translate the veRL run at `path`: its Hydra config (e.g. `verl/trainer/config/ppo_trainer.yaml`)
    with `overrides`, or with the overrides of the launch `script`; or `path` is the script itself,
    whose config is then found in the veRL package installed here. `environ` supplies the variables the
    script reads without setting them (default: this process's environment).

    ConfigError lists every veRL setting that cannot be imported (those in `ignore` become notes)."""
    path = Path(path)
    launch = None
    if path.suffix == ".sh":
        if script is not None:
            raise ConfigError(f"{path} is a launch script already; give --script only with the veRL config")
        launch = read_script(path, list(overrides), environ)
        config = _installed_config(launch, path)
    else:
        config = path
        if script is not None:
            launch = read_script(script, list(overrides), environ)
            _check_config_name(launch, Path(script), path)
    composed = compose(config, launch.overrides if launch else list(overrides))
    t = Translation(composed.data, "veRL")
    t.used |= {k for k in t.leaves if k.rsplit(".", 1)[-1] == "_target_"}
    t.notes += composed.notes
    if launch:
        t.notes += launch.notes
    images = multimodal_evidence(t)
    if uses_megatron(t):
        translate_megatron(t)
    _position_limit(t)
    _training_settings(t)
    _run(t)
    tp = translate_rollout(t, multimodal=bool(images))
    _resources(t, tp)
    translate_data(t)
    if images:
        refuse_multimodal(t, images)
    t.sweep(set(), set(composed.data), "ppo_trainer config")
    t.apply_ignores(ignore)
    t.raise_if_refused(str(path))
    config_data = in_schema_order(t.config)
    command = " ".join([str(path), *(["--script", str(script)] if script else []), *overrides,
                        *(f"--ignore {k}" for k in ignore)])
    notes = list(dict.fromkeys(t.notes))
    return Imported(render_yaml(config_data, t.sources, _header(t, composed, launch, command)), config_data, {}, notes)


def _installed_config(launch: Launch, script: Path) -> Path:
    """The Hydra config a script's veRL command reads, in the veRL package installed here (found
    without importing it: veRL imports torch)."""
    import importlib.util

    how = (f"give it: rfthpc config import --from verl PATH/TO/verl/trainer/config/{launch.config_name or 'ppo_trainer.yaml'} "
           f"--script {script}")
    entry = launch.entry.removesuffix(".py").replace("/", ".")
    if not entry.endswith(_ENTRY):
        raise ConfigError(f"{script}: runs {launch.entry}, whose config the import cannot find; {how}")
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"{script}: its veRL config is part of veRL, which is not installed in this Python; {how}")
    trainer = Path(next(iter(spec.submodule_search_locations))) / "trainer"
    name = launch.config_name or "ppo_trainer"
    config = (trainer / (launch.config_path or "config") / name).with_suffix(".yaml")
    if not config.is_file():
        raise ConfigError(f"{script}: {config} does not exist in the installed veRL; {how}")
    return config


def _check_config_name(launch: Launch, script: Path, config: Path) -> None:
    """A script that names its config (`--config-name`) must be given that config."""
    if launch.config_name and Path(launch.config_name).stem != config.stem:
        raise ConfigError(f"{script} runs veRL with --config-name {launch.config_name}, but the config given is "
                          f"{config}; give {launch.config_name} from the same veRL")


def _training_settings(t: Translation) -> None:
    """Everything a Trinity-RFT config may carry in `trainer.trainer_config`, through rfthpc's one
    veRL mapping; the critic's settings only when veRL trains a critic."""
    estimator = t.leaves.get("algorithm.adv_estimator", "gae")
    enable = t.leaves.get("critic.enable")
    critic = bool(enable) if enable is not None else estimator == "gae"
    if not critic and t.has("critic"):
        t.note("critic", f"no effect: veRL trains no critic with adv_estimator {estimator} (critic.enable: "
                         f"{scalar(enable)})")
    flat = {k: v for k, v in t.leaves.items() if k not in t.used and not _own(k)}
    problems = Problems("veRL")
    verl.map_verl_settings(t.config, flat, problems)
    t.used |= set(flat)
    for m in problems.mapped:
        t.sources[m.target] = m.source
    t.notes += problems.notes
    for why, keys in problems.ignored_keys().items():
        grouped = _collapse(keys, t.leaves)
        if why == mapping.HARMLESS:
            t.same.append(", ".join(grouped))
        else:
            t.notes.append(f"{', '.join(grouped)}: {why}")
    for item in problems.items:
        key, _, message = item.partition(": ")  # every message names its veRL key first
        t.problems[key] = message
    _algorithm_type(t)
    path = (t.config.get("model") or {}).get("model_path")
    if path and not str(path).startswith(("/", ".", "~")) and not Path(str(path)).exists():
        t.notes.append(f"actor_rollout_ref.model.path: {path!r} looks like a Hub id; compute nodes have no internet: "
                       "download it and set model.model_path to the local directory")


def _position_limit(t: Translation) -> None:
    """`override_config[.model_config].max_position_embeddings`, the one model config override rfthpc reads:
    veRL's run (Megatron's examples) lowers it to the longest sequence it trains, which changes no
    computation of a rotary model whose sequences fit (rfthpc's are at most prompt + response tokens);
    below that, or under a rope scaling that reads it (dynamic, yarn, longrope), it is refused. Other overrides are
    refused by the veRL mapping (verl.py)."""
    # Read without taking them: the veRL mapping and translate_data still translate these keys.
    longest = t.leaves.get("data.max_prompt_length", 512) + t.leaves.get(
        "actor_rollout_ref.rollout.response_length", t.leaves.get("data.max_response_length", 512))
    for section in ("actor_rollout_ref.model", "critic.model"):
        for key in (f"{section}.override_config.model_config.max_position_embeddings",
                    f"{section}.override_config.max_position_embeddings"):
            if not t.has(key):
                continue
            limit = t.get(key)
            rope = _rope_scaling(t.leaves.get(f"{section}.path"))
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < longest:
                t.refuse(key, f"{scalar(limit)}: shorter than the run's sequences (prompt + response: {longest} "
                              "tokens); rfthpc trains the model as its config.json says: edit a copy of the "
                              "model instead")
            elif rope in _ROPE_READING_LIMIT:
                t.refuse(key, f"{limit}: the model's {rope} rope scaling reads this value, so it changes the "
                              "positions; rfthpc trains the model as its config.json says: edit a copy of the "
                              "model instead")
            else:
                t.notes.append(f"{key}: {limit}: no effect in rfthpc: its sequences are at most prompt + response "
                               f"= {longest} tokens, within it, and the model's rotary positions do not depend on it "
                               "(rope scalings that do are refused where the model's config.json can be read)")


_ROPE_READING_LIMIT = ("dynamic", "yarn", "longrope")
"""Rope scalings of transformers that compute positions from max_position_embeddings."""


def _rope_scaling(model: Any) -> str | None:
    """The rope scaling type in the config.json of the model at `model` (None: none, or not readable here)."""
    try:
        config = json.loads((Path(str(model)) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    scaling = config.get("rope_scaling") or {}
    return scaling.get("rope_type") or scaling.get("type") if isinstance(scaling, dict) else None


def _own(key: str) -> bool:
    """Whether this importer translates `key` itself (not `verl`'s mapping)."""
    if key.startswith(_OWN):
        return True
    section, _, rest = key.partition(".")
    return section == "trainer" and rest in _OWN_TRAINER


def _collapse(keys: list[str], leaves: Mapping[str, Any]) -> list[str]:
    """`keys`, with each section all of whose settings are among them written once as `section.*`."""
    chosen = set(keys)
    settings = [k for k in leaves if k.rsplit(".", 1)[-1] != "_target_"]
    out: list[str] = []
    for key in keys:
        parts = key.split(".")
        name = key
        for n in range(1, len(parts)):
            section = ".".join(parts[:n])
            if all(k in chosen for k in settings if k.startswith(section + ".")):
                name = f"{section}.*"
                break
        if name not in out:
            out.append(name)
    return out


def _algorithm_type(t: Translation) -> None:
    """The preset named like veRL's estimator, for a reader: every function is set from veRL's keys anyway."""
    from rfthpc.algorithms.presets import ALGORITHM_PRESETS

    advantage = (t.config.get("algorithm") or {}).get("advantage_fn")
    preset = advantage if advantage in ALGORITHM_PRESETS else "ppo"
    t.set("algorithm.algorithm_type", preset, f"algorithm.adv_estimator: {advantage} (each function is set from "
                                              "veRL's keys)")


def _run(t: Translation) -> None:
    """The run's name, directory, length, checkpoints, evaluation cadence, metrics and resumption."""
    project = str(t.get("trainer.project_name", "verl_examples"))
    name = str(t.get("trainer.experiment_name", "gsm8k"))
    t.set("project", project, "trainer.project_name")
    t.set("name", name, "trainer.experiment_name")
    local = str(t.get("trainer.default_local_dir", f"checkpoints/{project}/{name}"))
    tail = f"{project}/{name}"
    if local.rstrip("/") == tail:
        t.set("checkpoint_root_dir", ".", "trainer.default_local_dir (rfthpc adds <project>/<name>)")
    elif local.rstrip("/").endswith("/" + tail):
        t.set("checkpoint_root_dir", local.rstrip("/")[:-len(tail) - 1],
              "trainer.default_local_dir (rfthpc adds <project>/<name>)")
    else:
        t.set("checkpoint_root_dir", local, "trainer.default_local_dir")
        t.notes.append(f"trainer.default_local_dir: rfthpc's run directory is <checkpoint_root_dir>/<project>/<name>, "
                       f"so checkpoints go to {local}/{tail}")
    t.set("synchronizer.sync_interval", 1, "veRL's hybrid engine generates each batch with the newest policy")
    t.set("synchronizer.sync_offset", 0, "veRL's hybrid engine generates each batch with the newest policy")
    t.set("buffer.total_epochs", t.whole("trainer.total_epochs", 30), "trainer.total_epochs")
    steps = t.get("trainer.total_training_steps")
    if steps is not None:
        t.set("buffer.total_steps", t.whole("trainer.total_training_steps", 1), "trainer.total_training_steps")
    save = t.get("trainer.save_freq", -1)
    if isinstance(save, int) and save > 0:
        t.set("trainer.save_interval", save, "trainer.save_freq (rfthpc also saves at the end)")
    else:
        t.set("trainer.save_interval", 0, f"trainer.save_freq: {save}")
        t.notes.append(f"trainer.save_freq: {save}: veRL saves no checkpoint; rfthpc still saves one at the end and "
                       "when Slurm ends a job early (preemption, time limit), to resume from")
    _resume(t)
    _monitor(t)


def _resume(t: Translation) -> None:
    mode = t.get("trainer.resume_mode", "auto")
    if mode in ("auto", "disable"):
        t.set("continue_from_checkpoint", mode == "auto", f"trainer.resume_mode: {mode}")
    else:
        t.refuse("trainer.resume_mode", f"{mode!r}: rfthpc resumes only from its own run directory "
                                        "(continue_from_checkpoint); a veRL checkpoint cannot be resumed: start from "
                                        "a Hugging Face model (actor_rollout_ref.model.path)")


def _monitor(t: Translation) -> None:
    logger = t.get("trainer.logger", ["console", "wandb"])
    loggers = [logger] if isinstance(logger, str) else list(logger or [])
    unknown = [x for x in loggers if x not in _SINKS and x != "file"]
    if unknown:
        t.refuse("trainer.logger", f"{', '.join(map(str, unknown))}: rfthpc writes metrics to console, wandb, "
                                   "tensorboard and its jsonl files; use those")
    sinks = list(dict.fromkeys(x for x in loggers if x in _SINKS)) or ["console"]
    t.set("monitor.monitor_type", sinks, "trainer.logger")
    if "file" in loggers:
        t.notes.append("trainer.logger: file: rfthpc always writes each role's metrics to <run dir>/monitor/<role>.jsonl")


def _resources(t: Translation, tp: int) -> None:
    """veRL's hybrid engine time-shares every GPU between rollouts and training. One node of one or two GPUs
    becomes rfthpc's colocated layout (trainer and explorers in one job on the same GPUs, `_colocated`);
    more GPUs are split between the explorers and the trainer, separate jobs, half to each."""
    nodes = t.whole("trainer.nnodes", 1)
    per_node = t.whole("trainer.n_gpus_per_node", 8)
    t.set("cluster.node_num", nodes, "trainer.nnodes")
    t.set("cluster.gpu_per_node", per_node, "trainer.n_gpus_per_node")
    total = nodes * per_node
    if nodes == 1 and per_node <= COLOCATED_MOST_GPUS:
        _colocated(t, tp, per_node)
        return
    if tp > per_node:
        t.refuse(_ROLLOUT_TP, f"{tp}: an engine of {tp} GPUs spans nodes of {per_node}; rfthpc's rollout engines run "
                              f"on one node each: use at most {per_node} (more engines: "
                              "explorer.rollout_model.engine_num)")
        return
    if tp > total // 2:
        # Halved (a divisor of the model's heads as tp is) until the explorers' half holds an engine.
        given = tp
        while tp > total // 2:
            tp //= 2
        t.set("explorer.rollout_model.tensor_parallel_size", tp,
              f"{_ROLLOUT_TP}: {given}, halved to fit half of the GPUs")
        t.notes.append(f"{_ROLLOUT_TP}: {given}: an engine of {given} GPUs would leave none of the {total} to rfthpc's "
                       f"trainer, a separate job; its engines use {tp} GPUs each (tensor parallelism splits the "
                       "same computation, so the samples are alike); if the model does not fit, give more GPUs")
    engines = max(1, total // 2 // tp)
    trainer = total - engines * tp
    t.set("explorer.rollout_model.engine_num", engines,
          f"half of trainer.nnodes x n_gpus_per_node ({total} GPUs), in engines of {tp}")
    trainer_nodes = -(-trainer // per_node)
    if trainer_nodes > 1:
        t.set("slurm.trainer.nodes", trainer_nodes, f"the trainer's {trainer} GPUs")
    t.notes.append(f"trainer.nnodes, n_gpus_per_node: veRL's hybrid engine time-shares all {total} GPUs between "
                   f"rollouts and training; rfthpc's explorers and trainer are separate Slurm jobs, so the explorers "
                   f"get {engines * tp} ({engines} engines of {tp}) and the trainer {trainer}: change "
                   "explorer.rollout_model.engine_num to move GPUs between them, or, on one node, set slurm.layout: "
                   "colocated to share them as veRL does")


COLOCATED_MOST_GPUS = 2
"""A veRL run on one node of at most this many GPUs is imported colocated: split into separate jobs, its
trainer or its engines would get too few of them."""


def _colocated(t: Translation, tp: int, per_node: int) -> None:
    """The run on one node's GPUs, shared by the trainer and the explorers as veRL's hybrid engine shares them."""
    if tp > per_node:
        t.refuse(_ROLLOUT_TP, f"{tp}: an engine of {tp} GPUs does not fit on the node's {per_node}; use at most "
                              f"{per_node}")
        return
    t.set("slurm.layout", "colocated", f"trainer.n_gpus_per_node: {per_node} on one node")
    t.set("explorer.rollout_model.engine_num", per_node // tp, f"the node's {per_node} GPUs, in engines of {tp}")
    t.notes.append(f"trainer.nnodes, n_gpus_per_node: veRL's hybrid engine time-shares the node's {per_node} GPU(s) "
                   "between rollouts and training; rfthpc runs the trainer and the explorers colocated, one job on "
                   "the same GPUs (slurm.layout: colocated): the rollout engine takes "
                   "explorer.rollout_model.gpu_memory_utilization of each GPU and the trainer the rest, both in "
                   "memory at once, or, where they fit only one at a time, taking turns as veRL's do (vLLM's sleep "
                   "mode, explorer.rollout_model.enable_sleep_mode; set cluster.gpu_memory_gb to have validation "
                   "check that they fit and choose)")


def _header(t: Translation, composed: Composed, launch: Launch | None, command: str) -> list[str]:
    lines = [f"Imported from veRL by `rfthpc config import --from verl {command}`.",
             f"Read: {', '.join(shown(f) for f in composed.files)}"]
    if launch:
        lines.append(f"The veRL command's overrides: {' '.join(launch.overrides) or '(none)'}")
        if launch.from_environment:
            lines.append("From your environment (the script reads them without setting them): " + ", ".join(
                f"{k}={v}" for k, v in launch.from_environment.items()))
    lines += ["Beside each value: the veRL key it comes from.", ""]
    if t.notes:
        lines.append("Read differently, or without effect in rfthpc:")
        lines += [f"- {n}" for n in dict.fromkeys(t.notes)]
        lines.append("")
    if t.same:
        lines.append("Done the same way by rfthpc without a setting (veRL's values here change nothing): "
                     + "; ".join(dict.fromkeys(t.same)))
        lines.append("")
    hydra_own = ["defaults"] * bool(composed.files[1:]) + ["hydra"] * bool(composed.hydra)
    dropped = [*hydra_own, "_target_ (Hydra's class names)"]
    lines.append("Not veRL settings: " + ", ".join(dropped))
    lines.append("")
    return lines


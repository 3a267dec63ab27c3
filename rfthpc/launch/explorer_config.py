"""The config of an explorer array added to a running run (`rfthpc add-explorers`).

It is the run's config with the new array's own settings merged in, and is written to
`explorers/<name>/config.yaml`, which `rfthpc explore --name <name>` reads instead of the run's.
"""

from __future__ import annotations

import copy
from pathlib import Path

from rfthpc.config import resolve_stages
from rfthpc.config.derive import deep_merge
from rfthpc.config.load import apply_overrides, config_from_dict, read_yaml
from rfthpc.config.schema import Config
from rfthpc.config.typed import to_dict
from rfthpc.config.validate import validate
from rfthpc.errors import ConfigError, Problems

# Sections of an add-explorers config that belong to the new array; everything else stays the run's.
_EXPLORER_SECTIONS = ("explorer", "cluster")


def merged_explorer_config(
    run_cfg: Config,
    new_yaml: Path | None,
    overrides: list[str],
    name: str | None,
    array_size: int | None,
    check_paths: bool = True,
) -> Config:
    """The run's config with a new explorer array's settings merged in.

    From `new_yaml` (a full config like Trinity-RFT's explorer_new.yaml, or only the sections
    that differ) it takes `explorer`, `cluster`, `buffer.explorer_input` (its tasksets) and
    `slurm.explorer` / `slurm.python`; the model, algorithm, batch sizes, synchronizer and trainer
    stay the run's, so the new groups fit the trainer. The result has `mode: explore`: it explores
    the run's exploring stages and waits through train-only stages before them. `name` and
    `array_size` (the command-line flags) win over the file; overrides apply last.
    """
    data = to_dict(run_cfg)
    source = "add-explorers"
    if new_yaml is not None:
        source = str(new_yaml)
        raw = read_yaml(Path(new_yaml))
        for section in _EXPLORER_SECTIONS:
            if isinstance(raw.get(section), dict):
                data[section] = deep_merge(data[section], raw[section])
        inp = (raw.get("buffer") or {}).get("explorer_input")
        if isinstance(inp, dict):
            data["buffer"]["explorer_input"] = inp
        slurm = raw.get("slurm") or {}
        if isinstance(raw.get("explorer"), dict) and {"rollout_model", "auxiliary_models"} & set(raw["explorer"]):
            # The new array's engines set its GPUs and size, unless its own slurm section does.
            given = slurm.get("explorer") if isinstance(slurm.get("explorer"), dict) else {}
            for key in ("gpus_per_node", "array_size"):
                if key not in given:
                    data["slurm"]["explorer"][key] = None
        if isinstance(slurm.get("explorer"), dict):
            data["slurm"]["explorer"] = deep_merge(data["slurm"]["explorer"], slurm["explorer"])
        if slurm.get("python"):
            data["slurm"]["python"] = slurm["python"]
    data["mode"] = "explore"
    problems = Problems(source)
    cfg = config_from_dict(copy.deepcopy(data), source, problems)
    cfg = apply_overrides(cfg, list(overrides), prog=f"rfthpc add-explorers --config {new_yaml}", problems=problems)
    if name:
        cfg.explorer.name = name
    if array_size is not None:
        if array_size < 1:
            raise ConfigError(f"--array-size: {array_size} must be >= 1")
        cfg.slurm.explorer.array_size = array_size
        cfg.explorer.rollout_model.engine_num = array_size
    problems.start_checks()
    for stage in resolve_stages(cfg, source, problems):
        validate(stage.config, check_paths=check_paths,
                 problems=problems.for_stage(stage.name) if cfg.stages else problems)
    problems.raise_if_any()
    return cfg

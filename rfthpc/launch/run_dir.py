"""Creating a run: the run directory of a config, made (or reopened) with the config recorded in it.

`rfthpc submit` and `rfthpc run` call `prepare_run_dir` before anything is queued or started; the
names inside the run directory are `rfthpc.rundir.paths`'.
"""

from __future__ import annotations

import time
from pathlib import Path

from rfthpc.config import LoadedConfig, dump_yaml, load_resolved
from rfthpc.errors import ConfigError, UserError
from rfthpc.rundir.paths import CONFIG_FILE, RunDir, check_layout, run_dir_of
from rfthpc.sharedfs.fileops import set_share_group, write_text_atomic


def prepare_run_dir(loaded: LoadedConfig, resume: bool = False) -> RunDir:
    """Create (or reopen) the run directory of a config and record the config in it.

    `mode: explore` configs are recorded as their explorer's own config
    (`explorers/<name>/config.yaml`), every other mode as the run's `config.yaml`, so the two
    halves of an asynchronous pair share one run directory. Reopening a run whose recorded config
    differs is refused unless `resume` (the old config is then kept beside the new one); reopening
    one with the same config resumes it when `continue_from_checkpoint` is set.
    """
    cfg = loaded.config
    set_share_group(cfg.filesystem.share_group)
    run = run_dir_of(cfg)
    check_layout(run)
    target = run.explorer_config(cfg.explorer.name) if cfg.mode == "explore" else run.config
    text = dump_yaml(loaded.base)
    if target.exists():
        old = target.read_text()
        if old != text:
            if not resume:
                raise UserError(
                    f"run directory {run.root} already holds a different config ({target}); "
                    "pass --resume to continue it with the new config, or choose another `name`"
                )
            write_text_atomic(target.with_name(f"config.{time.strftime('%Y%m%d-%H%M%S')}.yaml"), old)
        elif not (resume or cfg.continue_from_checkpoint):
            raise UserError(
                f"run directory {run.root} exists and continue_from_checkpoint is false; "
                "choose another `name`, remove the directory, or pass --resume"
            )
    _check_pair_sync_styles(run, loaded, target)
    run.create()
    write_text_atomic(target, text)
    return run


def _check_pair_sync_styles(run: RunDir, loaded: LoadedConfig, target: Path) -> None:
    """The configs of one run's trainer and explorers must agree on `synchronizer.sync_style`, stage by
    stage: under explorer_driven the trainer publishes only when explorers ask, so a trainer and
    explorers of different styles would wait for each other until `sync_timeout`."""
    mine = {s.name: s.config.synchronizer.sync_style for s in loaded.stages}
    others = [run.config] if target != run.config else sorted(run.root.glob(f"explorers/*/{CONFIG_FILE}"))
    for path in others:
        if not path.is_file():
            continue
        theirs = {s.name: s.config.synchronizer.sync_style for s in load_resolved(path).stages}
        for name in sorted(mine.keys() & theirs.keys()):
            if mine[name] != theirs[name]:
                raise ConfigError(
                    f"{loaded.source or 'config'}: synchronizer.sync_style {mine[name]!r} (stage {name!r}) differs "
                    f"from {theirs[name]!r} in {path}, the config of the other role of this run: trainer and "
                    "explorers must agree on who decides when weights move (explorer_driven: the trainer publishes "
                    "only when explorers ask). Set the same sync_style in both configs"
                )

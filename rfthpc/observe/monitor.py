"""Metrics of one role: `monitor/<role>.jsonl` always, plus the console, wandb and TensorBoard when configured.

Each process writes its own jsonl file (one writer per file, like everything in the run
directory). wandb runs are named `<name>_<role>` and grouped by the experiment name, offline by
default because compute nodes have no internet (`wandb sync <run dir>/monitor/wandb/...` later).
TensorBoard event files go to `monitor/tensorboard/<role>/` (a restarted role adds a file there;
TensorBoard reads them as one run), each record's numbers as scalars at its step.

A role that logs several series with steps of their own (the explorer: rollouts per explorer step,
evaluations per policy version) gives each record the name of its step, its `axis`. wandb drops a
record whose step is below the run's current one, so such records are not logged at their step:
each becomes a row of its own (wandb's step then counts rows and never goes back) with its step as
the value of `axis`, and its metrics are charted against `axis` (`define_metric`). The jsonl
records keep each series' step.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from rfthpc.config.monitor import MonitorConfig, tensorboard_missing
from rfthpc.errors import ConfigError
from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.fileops import append_line, make_dirs

log = logging.getLogger(__name__)


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def quiet_wandb_env() -> None:
    """Keep wandb from prompting or phoning home on compute nodes without internet, and give this
    process its own wandb service."""
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("WANDB_DISABLE_GIT", "true")
    # wandb finds its service through WANDB_SERVICE ("<version>-<pid that started it>-..."), which
    # children inherit: a role started by a process that used wandb (a notebook, the test runner;
    # Slurm exports the submitter's environment) would log through that process's service, on
    # another machine or holding the run of this role's killed predecessor open ("run ID is in
    # use" on requeue). Only a service this process started is its own.
    token = os.environ.get("WANDB_SERVICE")
    if token is not None and token.split("-")[1:2] != [str(os.getpid())]:
        del os.environ["WANDB_SERVICE"]


class Monitor:
    """Records a role's metrics per step."""

    def __init__(
        self,
        run_dir: RunDir,
        role: str,
        config: MonitorConfig,
        project: str,
        name: str,
        primary: bool = True,
        run_config: dict[str, Any] | None = None,
    ) -> None:
        """`role` names the file (`monitor/<role>.jsonl`), the wandb run (`<name>_<role>`) and the
        TensorBoard directory (`monitor/tensorboard/<role>/`).

        `primary=False` keeps extra processes of one role (array tasks beyond the first) out of wandb
        and TensorBoard while they still write their own jsonl. A ConfigError says that TensorBoard is
        configured but its package is missing.
        """
        self.role = role
        self.path = make_dirs(run_dir.monitor) / f"{role}.jsonl"
        self.console = "console" in config.monitor_type
        self._wandb = None
        self._declared: set[str] = set()
        """Axes, and metrics charted against one, already declared to wandb."""
        self._tensorboard = None
        if primary and "tensorboard" in config.monitor_type:
            self._tensorboard = _summary_writer(make_dirs(run_dir.monitor / "tensorboard" / role))
        if primary and "wandb" in config.monitor_type and config.wandb_mode != "disabled":
            quiet_wandb_env()
            import wandb

            wandb_dir = make_dirs(run_dir.monitor / "wandb")
            self._wandb = wandb.init(
                project=project,
                name=f"{name}_{role}",
                group=name,
                dir=str(wandb_dir),
                mode=config.wandb_mode,
                config=run_config or {},
                resume="allow",
                id=f"{name}_{role}".replace("/", "_"),
                **config.monitor_args,
            )

    def log(self, metrics: dict[str, Any], step: int, axis: str | None = None) -> None:
        """Record `metrics` at `step` in every sink.

        `axis`: the name of the series `step` counts (e.g. `eval/version`), for a role that logs
        several series with steps of their own (see the module doc); a role names an axis for all
        its records or for none.
        """
        record = {"step": step, "time": time.time(), **{k: _plain(v) for k, v in metrics.items()}}
        append_line(self.path, json.dumps(record, sort_keys=True))
        if self.console:
            body = " ".join(f"{k}={_short(v)}" for k, v in sorted(record.items()) if k not in ("step", "time"))
            print(f"[{self.role}] step {step} {body}", file=sys.stderr, flush=True)
        if self._tensorboard is not None:
            self._log_tensorboard(metrics, step, record["time"])
        if self._wandb is None:
            return
        data = {k: v for k, v in record.items() if k != "time" and not isinstance(v, str)}
        try:
            if axis is None:
                self._wandb.log(data, step=step)
                return
            data[axis] = data.pop("step")
            self._declare_axis(data, axis)
            self._wandb.log(data)
        except Exception as e:  # noqa: BLE001 — a sink that fails is a warning, never the role's end
            self._drop_wandb("log", e)

    def _log_tensorboard(self, metrics: dict[str, Any], step: int, walltime: float) -> None:
        """Each number of `metrics` as a scalar at `step` (its series' own step: TensorBoard keeps a step
        per scalar, so no axis is needed)."""
        assert self._tensorboard is not None
        try:
            for key, value in metrics.items():
                value = value.item() if hasattr(value, "item") else value
                if isinstance(value, (int, float)):
                    self._tensorboard.add_scalar(key, value, global_step=step, walltime=walltime)
            self._tensorboard.flush()
        except Exception as e:  # noqa: BLE001 — a sink that fails is a warning, never the role's end
            log.warning("tensorboard stopped working (%s: %s); metrics go on to %s", type(e).__name__, e, self.path)
            self._tensorboard = None

    def _declare_axis(self, data: dict[str, Any], axis: str) -> None:
        """Tell wandb to chart the metrics of `data` against `axis` (once per metric)."""
        assert self._wandb is not None
        if axis not in self._declared:
            self._wandb.define_metric(axis)
            self._declared.add(axis)
        for key in data.keys() - self._declared:
            self._wandb.define_metric(key, step_metric=axis)
            self._declared.add(key)

    def close(self) -> None:
        """Close the TensorBoard writer and finish the wandb run (the jsonl file needs no closing); a sink
        that cannot finish is a warning."""
        if self._tensorboard is not None:
            try:
                self._tensorboard.close()
            except Exception as e:  # noqa: BLE001 — a sink that fails is a warning, never the role's end
                log.warning("tensorboard could not close its event file (%s: %s)", type(e).__name__, e)
            self._tensorboard = None
        if self._wandb is None:
            return
        try:
            self._wandb.finish()
        except Exception as e:  # noqa: BLE001 — a sink that fails is a warning, never the role's end
            self._drop_wandb("finish", e)
        self._wandb = None

    def _drop_wandb(self, what: str, error: Exception) -> None:
        """Stop using wandb after `what` failed, with one warning.

        Slurm signals every process of a step, so on scancel or preemption wandb's service process
        gets the stop signal too and exits while the role is still stopping cleanly: its calls then
        fail with a lost connection. The role must still end as a stop (exit 124, state `stopped`),
        and the jsonl file already holds every record. Tearing wandb down here also marks its
        connection closed, so its exit hook does not print a traceback at interpreter exit.
        """
        log.warning("wandb stopped working (%s: %s: %s), probably because its service process got the "
                    "job's stop signal; metrics go on to %s", what, type(error).__name__, error, self.path)
        self._wandb = None
        import wandb

        # Teardown talks to the same dead service; its failure is the one already reported.
        with contextlib.suppress(Exception):
            wandb.teardown()


def _summary_writer(log_dir: Path) -> Any:
    """torch's TensorBoard writer into `log_dir`; a ConfigError if the tensorboard package is missing."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ConfigError(tensorboard_missing()) from None
    return SummaryWriter(log_dir=str(log_dir))

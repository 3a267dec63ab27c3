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

wandb runs on a thread of its own: `wandb.init` takes a second or two of imports and set-up even
offline, which would hold back a role's first step or batch; the thread starts the run and then logs
the records in order, and `close` waits until every record is written and the run is finished.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import queue
import sys
import threading
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
        self._wandb: _WandbRun | None = None
        self._tensorboard = None
        if primary and "tensorboard" in config.monitor_type:
            self._tensorboard = _summary_writer(make_dirs(run_dir.monitor / "tensorboard" / role))
        if primary and "wandb" in config.monitor_type and config.wandb_mode != "disabled":
            quiet_wandb_env()
            wandb_dir = make_dirs(run_dir.monitor / "wandb")
            self._wandb = _WandbRun(self.path, dict(
                project=project,
                name=f"{name}_{role}",
                group=name,
                dir=str(wandb_dir),
                mode=config.wandb_mode,
                config=run_config or {},
                resume="allow",
                id=f"{name}_{role}".replace("/", "_"),
                **config.monitor_args,
            ))

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
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in record.items() if k != "time" and not isinstance(v, str)}, axis)

    def wandb_started(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the wandb run (started on its own thread); True once it runs,
        False without one (not configured, or it could not start)."""
        return self._wandb is not None and self._wandb.started(timeout)

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

    def close(self) -> None:
        """Close the TensorBoard writer and finish the wandb run (the jsonl file needs no closing); a sink
        that cannot finish is a warning."""
        if self._tensorboard is not None:
            try:
                self._tensorboard.close()
            except Exception as e:  # noqa: BLE001 — a sink that fails is a warning, never the role's end
                log.warning("tensorboard could not close its event file (%s: %s)", type(e).__name__, e)
            self._tensorboard = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


class _WandbRun:
    """A wandb run started and fed by a thread of its own (see the module doc); records are logged in order."""

    def __init__(self, jsonl: Path, init_args: dict[str, Any]) -> None:
        self._jsonl = jsonl
        self._queue: queue.SimpleQueue[tuple[dict[str, Any], str | None] | None] = queue.SimpleQueue()
        self._run: Any = None
        self._tried = threading.Event()
        """Set once `wandb.init` returned or failed."""
        self._declared: set[str] = set()
        """Axes, and metrics charted against one, already declared to wandb."""
        self._thread = threading.Thread(target=self._work, args=(init_args,), name="rfthpc-wandb", daemon=True)
        self._thread.start()

    def log(self, data: dict[str, Any], axis: str | None) -> None:
        """Queue a record (`data` holds its `step`; `axis`: see `Monitor.log`)."""
        self._queue.put((data, axis))

    def started(self, timeout: float) -> bool:
        """True once the run is started (waiting up to `timeout` seconds for `wandb.init`)."""
        return self._tried.wait(timeout) and self._run is not None

    def finish(self) -> None:
        """Log what is queued, finish the run, and return when that is done."""
        self._queue.put(None)
        self._thread.join()

    def _work(self, init_args: dict[str, Any]) -> None:
        try:
            import wandb

            self._run = wandb.init(**init_args)
        except Exception as e:  # noqa: BLE001 — a sink that fails is a warning, never the role's end
            self._drop("init", e)
        finally:
            self._tried.set()
        while (item := self._queue.get()) is not None:
            if self._run is not None:
                self._log(*item)
        if self._run is not None:
            try:
                self._run.finish()
            except Exception as e:  # noqa: BLE001 — a sink that fails is a warning, never the role's end
                self._drop("finish", e)

    def _log(self, data: dict[str, Any], axis: str | None) -> None:
        try:
            if axis is None:
                self._run.log(data, step=data["step"])
                return
            data[axis] = data.pop("step")
            self._declare_axis(data, axis)
            self._run.log(data)
        except Exception as e:  # noqa: BLE001 — a sink that fails is a warning, never the role's end
            self._drop("log", e)

    def _declare_axis(self, data: dict[str, Any], axis: str) -> None:
        """Tell wandb to chart the metrics of `data` against `axis` (once per metric)."""
        if axis not in self._declared:
            self._run.define_metric(axis)
            self._declared.add(axis)
        for key in data.keys() - self._declared:
            self._run.define_metric(key, step_metric=axis)
            self._declared.add(key)

    def _drop(self, what: str, error: Exception) -> None:
        """Stop using wandb after `what` failed, with one warning.

        Slurm signals every process of a step, so on scancel or preemption wandb's service process
        gets the stop signal too and exits while the role is still stopping cleanly: its calls then
        fail with a lost connection. The role must still end as a stop (exit 124, state `stopped`),
        and the jsonl file already holds every record. Tearing wandb down here also marks its
        connection closed, so its exit hook does not print a traceback at interpreter exit.
        """
        if what == "init":
            log.warning("wandb could not start (%s: %s); metrics go on to %s", type(error).__name__, error, self._jsonl)
        else:
            log.warning("wandb stopped working (%s: %s: %s), probably because its service process got the "
                        "job's stop signal; metrics go on to %s", what, type(error).__name__, error, self._jsonl)
        self._run = None
        # Teardown talks to the same dead service; its failure is the one already reported.
        with contextlib.suppress(Exception):
            import wandb

            wandb.teardown()


def _summary_writer(log_dir: Path) -> Any:
    """torch's TensorBoard writer into `log_dir`; a ConfigError if the tensorboard package is missing."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ConfigError(tensorboard_missing()) from None
    return SummaryWriter(log_dir=str(log_dir))

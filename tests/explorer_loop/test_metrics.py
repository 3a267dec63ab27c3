"""The explorer's two metric series reach wandb whole: rollouts per explorer step and evaluations per
policy version share one wandb run, whose step may never go back (wandb drops such records), so each
record is a row of its own, charted against its own axis (`rollout/step`, `eval/version`). The jsonl
file keeps each series' step (evaluations at their policy version). wandb runs offline and real."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from rfthpc.config.monitor import MonitorConfig
from rfthpc.observe.monitor import Monitor
from rfthpc.rundir.metrics import read_metrics
from rfthpc.rundir.paths import RunDir
from rfthpc.rundir.trainer_meta import TrainerMeta, write_trainer_meta
from tests.engines.helpers import publish_changed
from tests.explorer_loop.conftest import explorer, make_run, metrics, progress, taskset, write_jsonl
from tests.explorer_loop.wandb_history import history

WANDB = {"monitor_type": ["wandb"], "wandb_mode": "offline"}


def series(rows: list[dict]) -> list[tuple[int | None, int | None]]:
    """(rollout/step, eval/version) of each wandb row."""
    return [(r.get("rollout/step"), r.get("eval/version")) for r in rows]


def test_interleaved_series_keep_every_record(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run").create()
    monitor = Monitor(run, "explorer_explorer_0", MonitorConfig(**WANDB), "p", "n")
    logged = [("rollout/step", 1), ("rollout/step", 2), ("rollout/step", 3), ("eval/version", 1),
              ("rollout/step", 4), ("eval/version", 2), ("eval/version", 3), ("rollout/step", 5)]
    for axis, step in logged:
        monitor.log({f"{axis.split('/')[0]}/value": 0.5}, step=step, axis=axis)
    monitor.close()

    rows = history(run.monitor / "wandb")
    assert series(rows) == [(s, None) if axis == "rollout/step" else (None, s) for axis, s in logged]
    steps = [r["_step"] for r in rows]
    assert steps == sorted(set(steps)), "wandb's step only goes forward"
    assert [r["step"] for r in read_metrics(run.monitor / "explorer_explorer_0.jsonl")] == [s for _, s in logged]


def test_an_evaluation_after_later_rollout_steps_reaches_wandb(tmp_path: Path, tiny_model: Path, questions) -> None:
    """The final policy (version 1) is evaluated after rollout step 3: before, wandb dropped it."""
    evals = write_jsonl(tmp_path / "eval.jsonl", questions[:2])
    run = make_run(tmp_path, tiny_model, [taskset("arith", write_jsonl(tmp_path / "train.jsonl", questions))],
                   buffer={"explorer_input": {"eval_tasksets": [taskset("held-out", evals)]}},
                   explorer={"eval_on_startup": True, "eval_interval": 1, "weights_poll_interval": 0.2},
                   monitor=WANDB)
    write_trainer_meta(RunDir(run), TrainerMeta(step=0))

    def trainer() -> None:
        """Publish version 1 once the explorer's tasks are done; finish once it is evaluated."""
        deadline = time.monotonic() + 240
        while progress(run).get("steps") != 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        publish_changed(run, 1, tiny_model, seed=1)
        while progress(run).get("evaluated_version") != 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        write_trainer_meta(RunDir(run), TrainerMeta(step=1, done=True))

    publisher = threading.Thread(target=trainer, daemon=True)
    publisher.start()
    assert explorer(run).run() == 0
    publisher.join(timeout=10)

    records = metrics(run)
    # The start-up evaluation (version 0) generates with the first batch and is logged after it.
    assert [(r["step"], "eval/version" in r) for r in records] == [(1, False), (0, True), (2, False), (3, False),
                                                                   (1, True)]
    rows = history(run / "monitor" / "wandb")
    assert series(rows) == [(1, None), (None, 0), (2, None), (3, None), (None, 1)]
    assert rows[-1]["eval/held-out/tasks"] == 2


# Slurm signals every process of a step (its process tracking follows descendants, whatever their
# session), so wandb's service, started by wandb in a session of its own, gets the stop signal too.
STEP_SIGNAL = """
import os, signal, subprocess, sys, time
from rfthpc.config.monitor import MonitorConfig
from rfthpc.observe.monitor import Monitor
from rfthpc.rundir.paths import RunDir
from rfthpc.signals import StopRequest

stop = StopRequest().install()
monitor = Monitor(RunDir(sys.argv[1]), "trainer", MonitorConfig(monitor_type=["wandb"], wandb_mode="offline"),
                  "p", "n")
monitor.log({"loss": 1.0}, step=1)
assert monitor.wandb_started(120), "wandb did not start"  # on the monitor's own thread
children = subprocess.run(["pgrep", "-P", str(os.getpid())], capture_output=True, text=True).stdout.split()
assert children, "wandb started no service process"
for pid in [*map(int, children), os.getpid()]:
    os.kill(pid, signal.SIGTERM)
for _ in range(100):
    if not any(os.path.exists(f"/proc/{pid}/cmdline") and open(f"/proc/{pid}/cmdline").read()
               for pid in children):
        break
    time.sleep(0.05)
assert stop.requested
monitor.log({"loss": 0.5}, step=2)
monitor.close()
sys.exit(124)
"""


def test_a_stop_signal_that_also_reaches_the_wandb_service_is_still_a_clean_stop(tmp_path: Path) -> None:
    """scancel or preemption with wandb on: every metric reaches the jsonl file, the role exits with
    its stop code, and wandb's lost service is one warning, not a traceback (also none at exit)."""
    import os
    import subprocess
    import sys

    # Not this test process's wandb service (an earlier test's wandb.init names it in WANDB_SERVICE).
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    out = subprocess.run([sys.executable, "-c", STEP_SIGNAL, str(tmp_path / "run")], capture_output=True,
                         text=True, timeout=120, env=env, check=False)
    assert out.returncode == 124, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    assert "wandb stopped working" in out.stderr
    records = read_metrics(tmp_path / "run" / "monitor" / "trainer.jsonl")
    assert [(r["step"], r["loss"]) for r in records] == [(1, 1.0), (2, 0.5)]

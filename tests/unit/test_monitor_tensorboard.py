"""TensorBoard as a metrics sink: each record's numbers as scalars at its step in
`monitor/tensorboard/<role>/`, and a clear error where the tensorboard package is missing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rfthpc.config.monitor import MonitorConfig
from rfthpc.errors import ConfigError
from rfthpc.observe.monitor import Monitor
from rfthpc.rundir.paths import RunDir

TENSORBOARD = MonitorConfig(monitor_type=["tensorboard"])


def _scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_scalars_are_written_per_role_at_their_steps(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    run = RunDir(tmp_path / "run").create()
    monitor = Monitor(run, "explorer_explorer_0", TENSORBOARD, "p", "n")
    monitor.log({"rollout/reward_mean": 0.5, "rollout/count": 3, "note": "text"}, step=1)
    monitor.log({"eval/t/accuracy": 0.25}, step=0, axis="eval/version")
    monitor.log({"rollout/reward_mean": 0.75, "rollout/count": 4}, step=2)
    monitor.close()
    assert _scalars(run.monitor / "tensorboard" / "explorer_explorer_0") == {
        "rollout/reward_mean": [(1, 0.5), (2, 0.75)], "rollout/count": [(1, 3.0), (2, 4.0)],
        "eval/t/accuracy": [(0, 0.25)]}
    assert (run.monitor / "explorer_explorer_0.jsonl").is_file()


def test_only_the_primary_process_of_a_role_writes(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run").create()
    monitor = Monitor(run, "explorer_explorer_1", TENSORBOARD, "p", "n", primary=False)
    monitor.log({"x": 1.0}, step=1)
    monitor.close()
    assert not (run.monitor / "tensorboard").exists()
    assert (run.monitor / "explorer_explorer_1.jsonl").is_file()


def test_a_missing_tensorboard_package_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # makes the import fail
    with pytest.raises(ConfigError, match=r"tensorboard needs the tensorboard package.*`pip install tensorboard`"):
        Monitor(RunDir(tmp_path / "run").create(), "trainer", TENSORBOARD, "p", "n")

"""Charts, the progress line and the demo figures, from metrics written by the real Monitor."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rfthpc.config.monitor import MonitorConfig
from rfthpc.demos.figures import demo_figures, eval_accuracy, last_stage_start
from rfthpc.errors import UserError
from rfthpc.launch.local import Role, progress_line
from rfthpc.observe.monitor import Monitor
from rfthpc.observe.plot import collect, plot_run, rolling_mean
from rfthpc.observe.timeline import EXPLORER_PHASES, TRAINER_PHASES, Span, record_spans, shares
from rfthpc.rundir.paths import RunDir
from tests.records import write_trainer_report


def _two_stage_run(root: Path) -> RunDir:
    """Metrics of a run with 4 SFT steps, then 3 RL steps evaluated at versions 4 and 7."""
    run = RunDir(root).create()
    quiet = MonitorConfig(monitor_type=[])
    trainer = Monitor(run, "trainer", quiet, "p", "n")
    for step in range(1, 5):
        trainer.log({"actor/sft_loss": 2.0 / step, "training/stage_index": 0, "perf/throughput": 100.0}, step)
    for step, reward in zip(range(5, 8), (0.2, 0.4, 0.6)):
        trainer.log({"critic/score/mean": reward, "staleness/mean": 1.0, "training/stage_index": 1,
                     "perf/throughput": 90.0, "timing/wait_experience_s": 0.2, "timing/compute_s": 0.5,
                     "timing/publish_s": 0.1, "timing/checkpoint_s": 0.0}, step)
    explorer = Monitor(run, "explorer_explorer_0", quiet, "p", "n")
    explorer.log({"eval/arith-eval/accuracy": 0.25, "eval/arith-eval/reward_mean": 0.25}, 4)
    explorer.log({"rollout/reward_mean": 0.3, "rollout/tokens_per_s": 1500.0, "rollout/version": 4,
                  "rollout/time_s": 0.4, "rollout/wait_s": 0.1}, 1)
    explorer.log({"eval/arith-eval/accuracy": 0.75}, 7)
    write_trainer_report(run, {"step": 7, "stage": "rft", "stage_index": 1, "stage_start_step": 4, "done": True})
    return run


def test_collect_charts_multi_turn_success_and_turns(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run").create()
    explorer = Monitor(run, "explorer_explorer_0", MonitorConfig(monitor_type=[]), "p", "n")
    explorer.log({"eval/lake-eval/success_rate": 0.2, "eval/lake-eval/turns_mean": 7.5}, 0)
    explorer.log({"rollout/success_rate": 0.25, "rollout/turns_mean": 8.0, "rollout/reward_mean": 0.25}, 1)
    explorer.log({"rollout/success_rate": 0.5, "rollout/turns_mean": 6.5}, 2)
    data = collect(run)
    assert data["eval"] == {"lake-eval (success rate)": ([0], [0.2])}
    assert data["episodes"] == {"success rate": ([1, 2], [0.25, 0.5]), "turns per episode": ([1, 2], [8.0, 6.5])}


def test_rolling_mean_averages_the_trailing_window() -> None:
    assert rolling_mean([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert rolling_mean([], 10) == []


def test_collect_finds_stage_boundary_and_series(tmp_path: Path) -> None:
    data = collect(_two_stage_run(tmp_path / "run"))
    assert data["stage_starts"] == [4]
    assert data["reward"] == ([5, 6, 7], [0.2, 0.4, 0.6])
    assert data["eval"] == {"arith-eval": ([4, 7], [0.25, 0.75])}
    assert set(data["throughput"]) == {"trainer (trained)", "explorer explorer_0 (generated)"}
    assert data["staleness"] == {}  # no experience store in this run directory
    assert set(data["timeline"]) == {"trainer", "explorer rank 0"}
    assert [phase for _, _, phase in data["timeline"]["trainer"]] == \
        ["waiting for experience", "computing", "publishing weights"] * 3


def test_timeline_lays_each_records_phases_end_to_end_before_its_time() -> None:
    record = {"time": 100.0, "timing/wait_experience_s": 2.0, "timing/compute_s": 5.0, "timing/publish_s": 1.0,
              "timing/checkpoint_s": 0.0}
    assert record_spans(record, TRAINER_PHASES) == [Span("waiting for experience", 92.0, 94.0),
                                                    Span("computing", 94.0, 99.0),
                                                    Span("publishing weights", 99.0, 100.0)]
    batch = {"time": 50.0, "rollout/wait_s": 0.0, "rollout/time_s": 4.0}
    assert record_spans(batch, EXPLORER_PHASES) == [Span("generating", 46.0, 50.0)]
    assert record_spans({"step": 1, "timing/compute_s": 1.0}, TRAINER_PHASES) == []  # no time: no span


def test_timeline_shares_cover_the_window_asked_for() -> None:
    spans = [Span("waiting for weights", 0.0, 6.0), Span("generating", 6.0, 8.0), Span("generating", 8.0, 10.0)]
    assert shares(spans) == pytest.approx({"waiting for weights": 0.6, "generating": 0.4})
    # The last 5 s: 1 s of the wait reaches into it.
    assert shares(spans, window_s=5.0) == pytest.approx({"waiting for weights": 0.2, "generating": 0.8})
    assert shares([]) == {}


def test_plot_writes_every_chart(tmp_path: Path) -> None:
    paths = plot_run(_two_stage_run(tmp_path / "run").root)
    assert [p.name for p in paths] == ["reward.png", "eval.png", "episodes.png", "staleness.png", "throughput.png",
                                       "timeline.png", "overview.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in paths[0].parent.iterdir() if p.name.startswith(".tmp-")]


def test_demo_figures_are_the_evaluations_around_rft(tmp_path: Path) -> None:
    run = _two_stage_run(tmp_path / "run")
    assert last_stage_start(run.root) == 4
    assert eval_accuracy(run.root) == [(4, "arith-eval", 0.25), (7, "arith-eval", 0.75)]
    assert demo_figures(run.root) == (0.25, 0.75)


def test_demo_figures_of_one_eval_taskset_among_several(tmp_path: Path) -> None:
    run = _two_stage_run(tmp_path / "run")
    explorer = Monitor(run, "explorer_explorer_0", MonitorConfig(monitor_type=[]), "p", "n")
    explorer.log({"eval/arith-eval-greedy/accuracy": 0.5}, 4)
    explorer.log({"eval/arith-eval-greedy/accuracy": 0.625}, 7)
    assert demo_figures(run.root, taskset="arith-eval") == (0.25, 0.75)
    assert demo_figures(run.root, taskset="arith-eval-greedy") == (0.5, 0.625)
    with pytest.raises(UserError, match="no evaluation of eval taskset 'arith-eval-sampled' of version 4"):
        demo_figures(run.root, taskset="arith-eval-sampled")


def test_demo_figures_of_an_unfinished_run_name_the_problem(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run").create()
    with pytest.raises(UserError, match="no evaluation of version 0"):
        demo_figures(run.root)


def test_progress_line_shows_stage_reward_staleness_eval_and_throughput(tmp_path: Path) -> None:
    run = _two_stage_run(tmp_path / "run")
    line = progress_line(run, [Role("trainer", ["true"], run.log / "t.log")], {"sft_warmup": 4, "rft": 3})
    assert line == ("step 7 (rft 3/3) | reward 0.600 | staleness 1.00 | eval arith-eval 0.750 | 1500 tok/s | "
                    "0/1 roles running")


def test_plot_command_rejects_a_directory_that_is_no_run(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "rfthpc", "plot", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "is not a run directory" in proc.stderr

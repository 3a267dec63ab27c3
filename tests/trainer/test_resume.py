"""Killed and preempted trainers resume exactly: same losses, same weights, every group once.

Each test compares a trainer process that is interrupted (SIGKILL mid-checkpoint, SIGKILL while
waiting for experience, SIGTERM in an SFT stage) and then resumed, with an uninterrupted run on
the same data.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rfthpc.config import Config
from rfthpc.config.buffer import TasksetConfig
from rfthpc.config.schema import StageConfig
from rfthpc.demos.synth_gsm8k import generate_splits, write_jsonl
from rfthpc.errors import EXIT_PREEMPTED
from rfthpc.rundir.metrics import read_metrics
from rfthpc.rundir.paths import RunDir
from rfthpc.tasks.claims import TaskClaims
from rfthpc.trainer.checkpoint import latest_checkpoint, remove_temporary
from rfthpc.trainer.checkpoint_meta import META_FILE, read_checkpoint_meta
from rfthpc.weights import published as weights
from tests.records import trainer_report
from tests.trainer.conftest import (
    ROOT,
    make_run,
    rl_config,
    run_trainer_inprocess,
    sft_stage,
    start_trainer,
    trainer_env,
    write_groups,
)

pytestmark = pytest.mark.slow

STEPS = 6
COMPARED = ("actor/pg_loss", "actor/grad_norm", "actor/entropy", "actor/sft_loss", "critic/score/mean")


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Trainers run here with one thread, as the trainer subprocesses do (`trainer_env`): a resumed
    run then sums in the same order as the uninterrupted one it is compared with."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _config(model: Path, save_interval: int) -> Config:
    return rl_config(model, **{"buffer.total_steps": STEPS, "trainer.save_interval": save_interval,
                               "trainer.save_hf_checkpoint": "never"})


def _write_first(run: RunDir) -> None:
    write_groups(run, 6, seed=1, explorer="ex_a")


def _write_second(run: RunDir) -> None:
    write_groups(run, 6, seed=2, explorer="ex_b")


def _wait_for(cond, what: str, proc, timeout: float = 180.0, pause: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert proc.poll() is None, f"the trainer exited ({proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(pause)


def _steps(run: RunDir) -> dict[int, dict]:
    """The last record of each trained step (re-trained steps appear twice; the second must match too)."""
    return {r["step"]: r for r in read_metrics(run.monitor / "trainer.jsonl") if "actor/lr" in r}


def _assert_same_training(run: RunDir, ref: RunDir, steps: int) -> None:
    got, want = _steps(run), _steps(ref)
    assert sorted(got) == sorted(want) == list(range(1, steps + 1))
    for step in want:
        for name in COMPARED:
            if name in want[step]:
                assert got[step][name] == pytest.approx(want[step][name], rel=1e-6, abs=1e-7), (step, name)
    # Every record of a re-trained step (before and after the interruption) matches too.
    for r in read_metrics(run.monitor / "trainer.jsonl"):
        if "actor/lr" in r:
            assert r["actor/grad_norm"] == pytest.approx(want[r["step"]]["actor/grad_norm"], rel=1e-6)
    a = load_file(str(weights.step_dir(run.root, steps) / "model.safetensors"))
    b = load_file(str(weights.step_dir(ref.root, steps) / "model.safetensors"))
    # Not bit for bit: a resumed process's sums round differently in the last bits (seen: 3e-7 running
    # whole sequences, 2e-6 with shared prompts, 1.5e-5 once on a loaded machine: Adam turns the rounding
    # of a near-zero gradient into an lr-sized step), far below one step's change of the weights (~1e-3).
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-4


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> RunDir:
    """The uninterrupted run: 6 steps on 12 groups from two explorers."""
    run = make_run(tmp_path_factory.mktemp("reference") / "run", _config(tiny_model, save_interval=2))
    _write_first(run)
    _write_second(run)
    assert run_trainer_inprocess(run) == 0
    return run


def test_sigkill_during_a_checkpoint_write_keeps_the_previous_one(tmp_path: Path, tiny_model: Path,
                                                                   reference: RunDir) -> None:
    run = make_run(tmp_path / "run", _config(tiny_model, save_interval=1))
    _write_first(run)
    _write_second(run)
    proc = start_trainer(run)
    try:
        _wait_for(lambda: any(n.startswith(".tmp-global_step_3-") for n in os.listdir(run.root)),
                  "the checkpoint of step 3 being written", proc, pause=0.001)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    leftovers = [n for n in os.listdir(run.root) if n.startswith(".tmp-global_step_3-")]
    assert leftovers, "the kill came after the checkpoint was complete"
    # The previous checkpoint is complete and is the one a restart uses.
    assert latest_checkpoint(run.root) == 2
    assert (run.latest_checkpoint_file.read_text().strip()) == "2"
    assert read_checkpoint_meta(run.root, 2).reader.counters["consumed"] == 4
    assert run_trainer_inprocess(run) == 0
    assert not [n for n in os.listdir(run.root) if n.startswith(".tmp-")]
    _assert_same_training(run, reference, STEPS)
    assert read_checkpoint_meta(run.root, STEPS).reader.counters["consumed"] == 12


# A trainer that kills itself (SIGKILL) right after moving a checkpoint aside to save the same step
# again, before renaming the new one in: the narrowest window of a checkpoint write.
KILLED_IN_THE_SWAP = """
import os, signal, sys
rename = os.rename
def rename_then_die(src, dst):
    rename(src, dst)
    if os.path.basename(dst).startswith(".tmp-old-global_step_"):
        os.kill(os.getpid(), signal.SIGKILL)
os.rename = rename_then_die
from rfthpc.trainer.loop import run_trainer
sys.exit(run_trainer(sys.argv[1]))
"""


def test_sigkill_while_a_step_is_saved_again_keeps_that_step(tmp_path: Path, tiny_model: Path) -> None:
    """Step 2 is saved by save_interval; the explorers' tasks are all done, so the stage ends there and
    step 2 is saved again, marked finished. Killed between the two renames of that re-save, the
    restart puts the complete new copy in place: the run is done, nothing trained again."""
    cfg = rl_config(tiny_model, **{"buffer.total_steps": None, "trainer.save_interval": 1,
                                   "trainer.save_hf_checkpoint": "never"})
    cfg.buffer.explorer_input.tasksets = [TasksetConfig(name="math", path="unused")]
    run = make_run(tmp_path / "run", cfg)
    claims = TaskClaims(run.root, "math", num_tasks=4)
    claims.complete(claims.claim(4))
    write_groups(run, 4)  # two batches of 2 groups
    with open(run.log / "trainer.log", "ab") as log:
        proc = subprocess.run([sys.executable, "-c", KILLED_IN_THE_SWAP, str(run.root)], stdout=log,
                              stderr=subprocess.STDOUT, env=trainer_env(), cwd=ROOT, timeout=300)
    assert proc.returncode == -signal.SIGKILL
    names = os.listdir(run.root)
    assert "global_step_2" not in names and not read_checkpoint_meta(run.root, 1).stage_finished
    assert sorted(n.rsplit("-", 3)[0] for n in names if n.startswith(".tmp-")) == [
        ".tmp-global_step_2", ".tmp-old-global_step_2"]
    assert run_trainer_inprocess(run) == 0
    assert not [n for n in os.listdir(run.root) if n.startswith(".tmp-")]
    meta = read_checkpoint_meta(run.root, 2)
    assert meta.stage_finished and meta.reader.counters["consumed"] == 4
    assert trainer_report(run)["done"]
    assert [r["step"] for r in read_metrics(run.monitor / "trainer.jsonl") if "actor/lr" in r] == [1, 2]


def test_sigterm_right_after_a_checkpoint_does_not_write_it_again(tmp_path: Path, tiny_model: Path,
                                                                 reference: RunDir) -> None:
    """Step 3 is saved by save_interval and the trainer waits for experience; SIGTERM then stops it at
    once (exit 124) without saving step 3 a second time, and the resumed run trains as the reference."""
    run = make_run(tmp_path / "run", _config(tiny_model, save_interval=1))
    _write_first(run)  # enough for 3 steps: the trainer then waits for more
    proc = start_trainer(run)
    try:
        _wait_for(lambda: (trainer_report(run) or {}).get("step") == 3 and latest_checkpoint(run.root) == 3,
                  "the checkpoint of step 3", proc)
        saved = os.stat(run.checkpoint(3)).st_ino
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=120) == EXIT_PREEMPTED
    finally:
        proc.kill()
        proc.wait()
    assert os.stat(run.checkpoint(3)).st_ino == saved  # the same directory: not written again
    _write_second(run)
    assert run_trainer_inprocess(run) == 0
    _assert_same_training(run, reference, STEPS)


def test_an_incomplete_resave_puts_the_previous_copy_back(tmp_path: Path) -> None:
    """Killed between the renames with the new copy incomplete (the renames happen only after it is
    complete, so only a damaged disk gets here): the previous copy of the step goes back."""
    run = RunDir(tmp_path)
    old, new = run.root / ".tmp-old-global_step_4-host-1-ab", run.root / ".tmp-global_step_4-host-1-ab"
    (old / "actor").mkdir(parents=True)
    (old / "actor" / META_FILE).write_text('{"format": 1, "step": 4}')
    (new / "actor").mkdir(parents=True)
    (run.root / ".tmp-global_step_5-host-1-cd").mkdir()
    remove_temporary(run.root)
    assert os.listdir(run.root) == ["global_step_4"] and latest_checkpoint(run.root) == 4


def test_sigkill_then_resume_trains_every_group_once_with_the_same_losses(tmp_path: Path, tiny_model: Path,
                                                                            reference: RunDir) -> None:
    run = make_run(tmp_path / "run", _config(tiny_model, save_interval=2))
    _write_first(run)  # enough for 3 steps: the trainer then waits for more
    proc = start_trainer(run)
    try:
        _wait_for(lambda: (trainer_report(run) or {}).get("step") == 3, "step 3", proc)
        time.sleep(0.5)  # waiting for experience now: step 3 is trained but not checkpointed
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert latest_checkpoint(run.root) == 2
    _write_second(run)
    assert run_trainer_inprocess(run) == 0
    # Step 3 was trained before the kill and again after it, from the checkpoint of step 2.
    assert [r["step"] for r in read_metrics(run.monitor / "trainer.jsonl") if "actor/lr" in r] == [1, 2, 3, 3, 4, 5, 6]
    _assert_same_training(run, reference, STEPS)
    counters = read_checkpoint_meta(run.root, STEPS).reader.counters
    assert counters["consumed"] == 12 and counters["dropped_stale"] == 0


def test_sigterm_in_the_sft_stage_checkpoints_exits_124_and_resumes_there(tmp_path: Path, tiny_model: Path) -> None:
    data = write_jsonl(tmp_path / "sft.jsonl", generate_splits(10, 0)["train"])

    def staged() -> Config:
        cfg = rl_config(tiny_model, **{"buffer.total_steps": 2, "trainer.save_hf_checkpoint": "never"})
        cfg.stages = [sft_stage(data, 6, batch=3), StageConfig(stage_name="rft")]
        return cfg

    ref = make_run(tmp_path / "ref", staged())
    write_groups(ref, 4)
    assert run_trainer_inprocess(ref) == 0

    run = make_run(tmp_path / "run", staged())
    write_groups(run, 4)
    proc = start_trainer(run)
    try:
        _wait_for(lambda: bool(read_metrics(run.monitor / "trainer.jsonl")), "the first SFT step", proc)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=120) == EXIT_PREEMPTED
    finally:
        proc.kill()
        proc.wait()
    stopped = latest_checkpoint(run.root)
    meta = read_checkpoint_meta(run.root, stopped)
    assert meta.stage == "sft_warmup" and not meta.stage_finished and 1 <= stopped < 6
    assert meta.sft_data == {"consumed": 3 * stopped}
    trainer_meta = trainer_report(run)
    assert trainer_meta["stage"] == "sft_warmup" and trainer_meta["step"] == stopped and not trainer_meta["done"]
    assert trainer_meta["state"] == "stopped"  # `rfthpc status`: "— stopped", not live

    assert run_trainer_inprocess(run) == 0
    _assert_same_training(run, ref, 8)
    done = trainer_report(run)
    assert done["done"] and done["stage"] == "rft" and done["stage_start_step"] == 6 and done["step"] == 8 and done["state"] == "done"

"""Who decides when the trainer publishes (`synchronizer.sync_style`), the trainer in this process."""

from __future__ import annotations

import time
from pathlib import Path

from rfthpc.rundir.metrics import read_metrics
from rfthpc.weights import asking as weight_requests
from rfthpc.weights import published as weights
from tests.trainer.conftest import make_run, rl_config, run_trainer_inprocess, start_trainer, write_groups


def _published_at(run) -> list[int]:
    """The steps whose record says the policy was published after them."""
    return [r["step"] for r in read_metrics(run.monitor / "trainer.jsonl") if r["timing/publish_s"] > 0]


def test_explorer_driven_publishes_only_when_asked(tmp_path: Path, tiny_model: Path) -> None:
    """An explorer asked before step 1: the trainer publishes after step 1 and answers with it; nobody
    asks after that, so steps 2 to 4 publish nothing (fixed, sync_interval 1, would publish each).
    The stage's first and final policies are published as in every style."""
    cfg = rl_config(tiny_model, **{"synchronizer.sync_style": "explorer_driven", "synchronizer.sync_interval": 1,
                                   "synchronizer.keep_published": 5})
    run = make_run(tmp_path / "run", cfg)
    write_groups(run, 8)
    request = weight_requests.ask(run.root, "ex", 0, held=0)
    assert run_trainer_inprocess(run) == 0

    assert _published_at(run) == [1]
    assert weights.published_steps(run.root) == [0, 1, 4] and weights.read_latest(run.root) == 4
    assert weight_requests.answer_to(run.root, "ex", 0, request) == 1
    assert not weight_requests.RequestDesk(run.root).pending()


def test_trainer_driven_publishes_every_interval_whoever_asks(tmp_path: Path, tiny_model: Path) -> None:
    cfg = rl_config(tiny_model, **{"synchronizer.sync_style": "trainer_driven", "synchronizer.sync_interval": 2,
                                   "synchronizer.keep_published": 5})
    run = make_run(tmp_path / "run", cfg)
    write_groups(run, 8)
    request = weight_requests.ask(run.root, "ex", 0, held=0)
    assert run_trainer_inprocess(run) == 0

    assert _published_at(run) == [2, 4]
    assert weights.published_steps(run.root) == [0, 2, 4]
    assert weight_requests.answer_to(run.root, "ex", 0, request) is None


def test_explorer_driven_answers_while_it_waits_for_experience(tmp_path: Path, tiny_model: Path) -> None:
    """A trainer waiting for experience answers at once: with nothing trained since its stage's first
    publication, it answers with that version (Trinity-RFT: `notify_no_new_model_state_dict`)."""
    cfg = rl_config(tiny_model, **{"synchronizer.sync_style": "explorer_driven", "buffer.total_steps": 2})
    run = make_run(tmp_path / "run", cfg)
    proc = start_trainer(run)
    try:
        deadline = time.monotonic() + 240
        while weights.read_latest(run.root) != 0:
            assert proc.poll() is None and time.monotonic() < deadline, (run.log / "trainer.log").read_text()
            time.sleep(0.1)
        request = weight_requests.ask(run.root, "ex", 0, held=0)
        deadline = time.monotonic() + 60
        while weight_requests.answer_to(run.root, "ex", 0, request) is None:
            assert proc.poll() is None and time.monotonic() < deadline, (run.log / "trainer.log").read_text()
            time.sleep(0.1)
        assert weight_requests.answer_to(run.root, "ex", 0, request) == 0
        write_groups(run, 4)
        assert proc.wait(timeout=240) == 0, (run.log / "trainer.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _published_at(run) == [] and weights.published_steps(run.root) == [0, 2]

"""An engine that dies mid-run (vLLM's EngineDeadError after a CUDA, Xid or NCCL error) stops the
explorer with exit code 1 and an error naming it: the groups it committed stay, the tasks of the
batch it was generating go back to the pool (released, not failed: no refill replaces them), instead
of every later task failing until the tasksets run out and the process exits 0."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from rfthpc.explorer.loop import EXIT_FAILED
from rfthpc.tasks.claims import TaskClaims
from tests.engines.helpers import DyingEngine, publish_changed
from tests.explorer_loop.conftest import claims_state, explorer, groups, make_run, progress, taskset, write_jsonl


def test_a_dead_engine_releases_the_batch_and_fails_the_explorer(
    tmp_path: Path, tiny_model: Path, questions, caplog
) -> None:
    data = write_jsonl(tmp_path / "train.jsonl", questions)
    run = make_run(tmp_path, tiny_model, [taskset("arith", data)], buffer={"batch_size": 2},
                   explorer={"max_retry_interval": 0.1})
    # The first batch (2 tasks) is served; the engine dies on the second.
    ex = explorer(run, engine_factory=lambda engine_type, settings: DyingEngine(settings, requests=2))
    with caplog.at_level(logging.ERROR, logger="rfthpc"):
        assert ex.run() == EXIT_FAILED

    assert sorted(g.task_id for g in groups(run)) == ["arith/0", "arith/1"]
    state = claims_state(run, "arith")
    assert state["completed"] == 2 and state["failed"] == 0 and state["outstanding"] == {}
    assert sorted(serial for _, _, serial in state["returned"]) == [2, 3]
    assert TaskClaims.read_status(run, "arith", lost=0).refill == 0
    assert progress(run)["state"] == "failed" and "EngineDeadError" in progress(run)["error"]
    assert "exiting with 1" in caplog.text and "engine 'policy' failed: EngineDeadError" in caplog.text


def test_a_dead_engine_in_an_evaluation_releases_the_claimed_batch(tmp_path: Path, tiny_model: Path, questions) -> None:
    """Lock-step: the second batch waits for version 1, whose evaluation finds the engine dead."""
    run = make_run(tmp_path, tiny_model, [taskset("arith", write_jsonl(tmp_path / "train.jsonl", questions[:4]))],
                   buffer={"batch_size": 2, "explorer_input": {
                       "eval_tasksets": [taskset("held-out", write_jsonl(tmp_path / "eval.jsonl", questions[4:]))]}},
                   explorer={"eval_interval": 1, "weights_poll_interval": 0.2},
                   synchronizer={"sync_interval": 1, "sync_offset": 0})

    def trainer() -> None:
        deadline = time.monotonic() + 240
        while progress(run).get("state") != "waiting_for_weights" and time.monotonic() < deadline:
            time.sleep(0.1)
        publish_changed(run, 1, tiny_model, seed=1)

    publisher = threading.Thread(target=trainer, daemon=True)
    publisher.start()
    ex = explorer(run, engine_factory=lambda engine_type, settings: DyingEngine(settings, requests=2))
    assert ex.run() == EXIT_FAILED
    publisher.join(timeout=10)

    assert sorted(g.task_id for g in groups(run)) == ["arith/0", "arith/1"]
    state = claims_state(run, "arith")
    assert state["completed"] == 2 and state["failed"] == 0 and state["outstanding"] == {}
    assert sorted(serial for _, _, serial in state["returned"]) == [2, 3]

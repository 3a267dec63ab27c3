"""When an explorer takes new weights (`synchronizer.sync_style`): a real explorer and engine in this
process, a stand-in trainer publishing (and answering requests) through the run directory."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from rfthpc.engines.base import EngineSettings, GenerateRequest
from rfthpc.engines.hf_engine import TransformersEngine
from rfthpc.engines.sampling import Completion
from rfthpc.explorer.sync import is_sync_point
from rfthpc.weights import asking as weight_requests
from rfthpc.weights import published as weights
from tests.engines.helpers import publish_changed
from tests.explorer_loop.conftest import explorer, make_run, metrics, progress, taskset, write_jsonl


class PublishingEngine(TransformersEngine):
    """The transformers engine, which in the explorer's first engine call publishes version 1 (as the
    trainer would while the explorer generates) and returns once the explorer has it staged: from
    the next batch on, the explorer could load it without waiting."""

    def __init__(self, settings: EngineSettings, run: Path, model_dir: Path, explorer_of: list) -> None:
        super().__init__(settings)
        self.run, self.model_dir, self.explorer_of = run, model_dir, explorer_of
        self.published = False

    def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[list[Completion]]:
        out = super().generate_batch(requests)
        if not self.published:
            self.published = True
            publish_changed(self.run, 1, self.model_dir, seed=1)
            deadline = time.monotonic() + 120
            while self.explorer_of[0].follower.ready() != 1:
                assert time.monotonic() < deadline, "version 1 was never staged"
                time.sleep(0.05)
        return out


def _explorer_with_publishing_engine(run: Path, model_dir: Path):
    holder: list = []
    ex = explorer(run, engine_factory=lambda engine_type, settings: PublishingEngine(settings, run, model_dir,
                                                                                      holder))
    holder.append(ex)
    return ex


def _rollouts(run: Path) -> list[dict]:
    return [r for r in metrics(run) if "rollout/version" in r]


def test_sync_points_follow_trinity_need_sync() -> None:
    # Trinity-RFT's documented example: interval 10, offset 5: the explorer runs 5 steps first, then
    # syncs every 10.
    assert [b for b in range(1, 40) if is_sync_point(b, 10, 5)] == [15, 25, 35]
    assert [b for b in range(1, 6) if is_sync_point(b, 1, 0)] == [1, 2, 3, 4, 5]
    assert [b for b in range(1, 8) if is_sync_point(b, 2, 1)] == [3, 5, 7]


@pytest.mark.parametrize(("style", "versions"), [
    # fixed: the newest publication before every batch.
    ("fixed", [0, 1, 1]),
    # trainer_driven, sync_interval 2: version 1 is staged during batch 1, but taken only at the
    # sync point after batch 2.
    ("trainer_driven", [0, 0, 1]),
])
def test_when_an_explorer_takes_a_publication(tmp_path: Path, tiny_model: Path, questions, style: str,
                                              versions: list[int]) -> None:
    data = write_jsonl(tmp_path / "train.jsonl", questions)
    run = make_run(tmp_path, tiny_model, [taskset("arith", data)], buffer={"batch_size": 2},
                   synchronizer={"sync_style": style, "sync_interval": 2, "sync_offset": 0})
    assert _explorer_with_publishing_engine(run, tiny_model).run() == 0

    rollouts = _rollouts(run)
    assert [r["rollout/version"] for r in rollouts] == versions
    # Neither waited: the staleness bound (fixed 1, trainer_driven 3) allows version 0 for every batch.
    assert all(r["rollout/wait_s"] == 0.0 for r in rollouts)


def test_explorer_driven_asks_at_its_sync_points(tmp_path: Path, tiny_model: Path, questions, caplog) -> None:
    """sync_interval 2, sync_offset 0 (max_staleness 1), 4 batches:

    - version 1 is published and staged during batch 1, but batch 2 still uses version 0: the
      explorer takes weights only at its sync points;
    - after batch 2 it asks and waits (the stand-in trainer answers after 1 s), then loads the
      version of the answer: batch 3 uses version 1;
    - batch 4 needs version 2 (the staleness bound): waiting for it asks too; the trainer
      publishes version 2 on being asked;
    - after batch 4 it asks again; nobody answers: after sync_timeout it goes on (and finishes).
    """
    data = write_jsonl(tmp_path / "train.jsonl", questions + questions[:2])
    run = make_run(tmp_path, tiny_model, [taskset("arith", data)], buffer={"batch_size": 2},
                   explorer={"weights_poll_interval": 0.2},
                   synchronizer={"sync_style": "explorer_driven", "sync_interval": 2, "sync_offset": 0,
                                 "sync_timeout": 10})
    seen: list[dict] = []

    def trainer() -> None:
        desk = weight_requests.RequestDesk(run, reread_s=0.5)
        deadline = time.monotonic() + 300
        while len(seen) < 2 and time.monotonic() < deadline:
            if desk.pending():
                request = weight_requests.requests(run)["explorer-0"]
                seen.append({"held": request["held"], **{k: progress(run).get(k) for k in ("state", "need_version",
                                                                                          "steps")}})
                if len(seen) == 1:
                    time.sleep(1.0)
                else:
                    publish_changed(run, 2, tiny_model, seed=2)
                desk.answer(weights.read_latest(run))
            time.sleep(0.05)

    stand_in = threading.Thread(target=trainer, daemon=True)
    stand_in.start()
    with caplog.at_level(logging.WARNING, logger="rfthpc"):
        assert _explorer_with_publishing_engine(run, tiny_model).run() == 0
    stand_in.join(timeout=10)

    assert seen == [
        {"held": 0, "state": "asking_for_weights", "need_version": None, "steps": 2},
        {"held": 1, "state": "waiting_for_weights", "need_version": 2, "steps": 3},
    ]
    rollouts = _rollouts(run)
    assert [r["rollout/version"] for r in rollouts] == [0, 0, 1, 2]
    assert rollouts[1]["rollout/wait_s"] == 0.0 and rollouts[2]["rollout/wait_s"] >= 1.0
    assert rollouts[3]["rollout/wait_s"] > 0.0
    assert "did not answer a request for weights within synchronizer.sync_timeout=10 s" in caplog.text
    assert weight_requests.requests(run) == {}  # the stopped explorer took its request back

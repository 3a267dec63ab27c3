"""Explorers asking the trainer for weights (`sync_style: explorer_driven`) through the run directory."""

from __future__ import annotations

import json
from pathlib import Path

from rfthpc.weights import asking as wr


def test_a_request_is_pending_until_answered(tmp_path: Path) -> None:
    desk = wr.RequestDesk(tmp_path)
    assert not desk.pending()
    first = wr.ask(tmp_path, "ex", 0, held=0)
    assert json.loads(wr.request_file(tmp_path, "ex", 0).read_text())["held"] == 0
    assert desk.pending() and wr.answer_to(tmp_path, "ex", 0, first) is None
    desk.answer(3)
    assert not desk.pending()
    assert wr.answer_to(tmp_path, "ex", 0, first) == 3
    # Asking again is a new request: pending again, and the old answer is not an answer to it.
    second = wr.ask(tmp_path, "ex", 0, held=3)
    assert desk.pending() and wr.answer_to(tmp_path, "ex", 0, second) is None
    desk.answer(5)
    assert wr.answer_to(tmp_path, "ex", 0, second) == 5 and wr.answer_to(tmp_path, "ex", 0, first) is None


def test_every_request_seen_is_answered_at_once(tmp_path: Path) -> None:
    desk = wr.RequestDesk(tmp_path)
    ids = {rank: wr.ask(tmp_path, "ex", rank, held=0) for rank in range(3)}
    other = wr.ask(tmp_path, "late-array", 0, held=0)
    assert desk.pending()
    desk.answer(1)
    assert not desk.pending()
    assert [wr.answer_to(tmp_path, "ex", r, i) for r, i in ids.items()] + [
        wr.answer_to(tmp_path, "late-array", 0, other)] == [1, 1, 1, 1]


def test_a_requeued_trainer_does_not_answer_again(tmp_path: Path) -> None:
    rid = wr.ask(tmp_path, "ex", 0, held=0)
    desk = wr.RequestDesk(tmp_path)
    assert desk.pending()
    desk.answer(2)
    assert not wr.RequestDesk(tmp_path).pending()
    assert wr.answer_to(tmp_path, "ex", 0, rid) == 2


def test_the_trainer_lists_requests_only_when_the_doorbell_rang(tmp_path: Path) -> None:
    now = [0.0]
    desk = wr.RequestDesk(tmp_path, reread_s=10.0, clock=lambda: now[0])
    assert not desk.pending()
    # A request written without its ring (a ring a file cache hid) is seen at the re-read interval.
    path = wr.request_file(tmp_path, "ex", 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"id": "abc", "held": 0, "time": 0.0}))
    now[0] = 9.0
    assert not desk.pending()
    now[0] = 10.0
    assert desk.pending()
    desk.answer(1)
    # A rung request is seen at once.
    wr.ask(tmp_path, "ex", 1, held=0)
    assert desk.pending()


def test_withdrawn_and_foreign_files_are_not_requests(tmp_path: Path) -> None:
    desk = wr.RequestDesk(tmp_path)
    wr.ask(tmp_path, "ex", 0, held=0)
    wr.withdraw(tmp_path, "ex", 0)
    wr.withdraw(tmp_path, "ex", 0)  # twice: nothing to remove
    directory = wr.request_file(tmp_path, "ex", 0).parent
    (directory / ".tmp-ex-1.json.123").write_text("{")
    (directory / "notes.txt").write_text("x")
    (directory / "broken.json").write_text("{")
    assert not desk.pending()

"""Explorers asking the trainer for weights (`sync_style: explorer_driven`) through the run directory."""

from __future__ import annotations

from pathlib import Path

from rfthpc.weights import asking as wr


def test_a_request_is_pending_until_answered(tmp_path: Path) -> None:
    desk = wr.RequestDesk(tmp_path)
    assert not desk.pending()
    first = wr.ask(tmp_path, "ex", 0, held=0)
    assert wr.requests(tmp_path)["ex-0"]["held"] == 0
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


def test_the_trainer_reads_requests_only_when_a_new_one_came(tmp_path: Path) -> None:
    now = [0.0]
    desk = wr.RequestDesk(tmp_path, reread_s=10.0, clock=lambda: now[0])
    reads = []
    read = desk._read
    desk._read = lambda: reads.append(now[0]) or read()
    assert not desk.pending() and reads == [0.0]
    assert not desk.pending() and reads == [0.0]  # nothing new: one stat, no read
    wr.ask(tmp_path, "ex", 0, held=0)
    assert desk.pending() and reads == [0.0, 0.0]  # a new request is read at once
    desk.answer(1)
    now[0] = 10.0
    assert not desk.pending() and reads == [0.0, 0.0, 10.0]  # and everything again every reread_s


def test_withdrawn_requests_and_foreign_entries_are_not_requests(tmp_path: Path) -> None:
    desk = wr.RequestDesk(tmp_path)
    wr.ask(tmp_path, "ex", 0, held=0)
    wr.withdraw(tmp_path, "ex", 0)
    wr.withdraw(tmp_path, "ex", 0)  # twice: nothing more to take back
    bell = wr.requests_doorbell(tmp_path)
    for junk in (b"{", b'["not", "a", "request"]', b'{"id": "no-owner"}'):
        bell.ring(junk)
    (bell.path / ".tmp-entry.host-1-abc").write_text("{")
    assert not desk.pending() and wr.requests(tmp_path) == {}

"""Journals: numbered entries under new names, appends that are a compare-and-swap, readers that catch
up with what writers removed (rfthpc.sharedfs.journal)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from rfthpc.sharedfs.journal import EntryTaken, Journal, entry_name, journal_at


def test_entries_are_new_names_and_the_newest_is_read(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j")
    assert j.newest() == 0 and j.latest() == (0, None)
    assert [j.append(f"{i}".encode()) for i in range(3)] == [1, 2, 3]
    assert sorted(os.listdir(j.path)) == [entry_name(1), entry_name(2), entry_name(3)]  # no temporary left
    assert j.latest() == (3, b"2") and j.read(1) == b"0" and j.read(9) is None
    # Another process's journal of the same directory sees each entry by name.
    other = Journal(tmp_path / "j")
    assert other.latest() == (3, b"2")
    j.append(b"3")
    assert other.newest() == 4


def test_an_expected_entry_is_written_once(tmp_path: Path) -> None:
    a, b = Journal(tmp_path / "j"), Journal(tmp_path / "j")
    a.append(b"v1")
    n, _ = b.latest()
    a.append(b"v2 by a", expect=n + 1)
    with pytest.raises(EntryTaken):
        b.append(b"v2 by b", expect=n + 1)
    assert b.latest() == (2, b"v2 by a")  # b reads the newer state after its refusal
    assert b.append(b"v3 by b", expect=3) == 3


def test_racing_appenders_each_get_their_own_number(tmp_path: Path) -> None:
    journals = [Journal(tmp_path / "j", keep=1000) for _ in range(8)]
    got: list[int] = []
    lock = threading.Lock()

    def run(j: Journal) -> None:
        for _ in range(25):
            n = j.append(b"x", durable=False)
            with lock:
                got.append(n)

    threads = [threading.Thread(target=run, args=(j,)) for j in journals]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(1, 201))


def test_writers_remove_old_entries_and_readers_catch_up(tmp_path: Path) -> None:
    writer, reader = Journal(tmp_path / "j", keep=4), Journal(tmp_path / "j", keep=4)
    writer.append(b"1")
    assert reader.latest() == (1, b"1")
    for i in range(2, 21):
        writer.append(f"{i}".encode())
    remaining = sorted(int(n) for n in os.listdir(writer.path))
    assert remaining == list(range(remaining[0], 21)) and len(remaining) <= 8  # contiguous, up to the newest
    # The reader's last entry is gone: it lists the directory and finds the newest.
    assert reader.latest() == (20, b"20")


def test_one_journal_per_directory_in_a_process(tmp_path: Path) -> None:
    assert journal_at(tmp_path / "j") is journal_at(tmp_path / "x" / ".." / "j")
    assert journal_at(tmp_path / "j") is not journal_at(tmp_path / "k")

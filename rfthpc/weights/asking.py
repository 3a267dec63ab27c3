"""Explorers asking the trainer for weights (`synchronizer.sync_style: explorer_driven`).

    weights/.requests/<explorer>-<rank>.json   one explorer process's newest request: {"id", "held", "time"}
    weights/.requests/answers.json             the trainer's answers: {"answered": {"<explorer>-<rank>": id},
                                               "version": N, "time"}
    weights/.requests/asked                    the doorbell an explorer rings after writing a request

In Trinity-RFT an explorer at its sync point marks itself REQUIRE_SYNC in the Synchronizer (a Ray
actor) and blocks on the actor's condition; the trainer asks the actor between steps, and every
second while it waits for experience, whether any explorer requires a sync, then saves its weights
(which wakes the explorers) or, when it trained nothing since its last sync, wakes them with
nothing new. rfthpc has no actor: its state is these files. Each has one writer and is replaced
whole (`os.replace`), never modified in place: an explorer process writes its own request, the
trainer (rank 0) writes the answers. A request is pending while the answers do not name its id; the
trainer answers every request it has seen, with the newest published version, after publishing.

The trainer stats the doorbell each time it looks and lists the requests only when it rang (or
every `reread_s`, in case a file cache hid a ring), so a waiting trainer costs one metadata
operation per look however many explorers there are. An explorer waits on the answers file's own
changes (`answers_doorbell`) through `rfthpc.sharedfs.handoff`.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.fileops import TMP_PREFIX, make_dirs, read_json, write_json_atomic
from rfthpc.sharedfs.handoff import Doorbell

REQUESTS = ".requests"
ANSWERS = "answers.json"
ASKED = "asked"


def _dir(run_dir: Path) -> Path:
    return RunDir(run_dir).weights / REQUESTS


def owner(explorer: str, rank: int) -> str:
    """The name one explorer process asks under."""
    return f"{explorer}-{rank}"


def request_file(run_dir: Path, explorer: str, rank: int) -> Path:
    """Where explorer `explorer` rank `rank` writes its request."""
    return _dir(run_dir) / f"{owner(explorer, rank)}.json"


def answers_doorbell(run_dir: Path) -> Doorbell:
    """What changes when the trainer answers: the answers file, replaced on every answer."""
    return Doorbell(_dir(run_dir) / ANSWERS)


def ask(run_dir: Path, explorer: str, rank: int, held: int) -> str:
    """Ask the trainer for weights (this process holds version `held`); return the request's id."""
    request_id = uuid.uuid4().hex
    path = request_file(run_dir, explorer, rank)
    make_dirs(path.parent)
    write_json_atomic(path, {"id": request_id, "held": int(held), "time": time.time()})
    Doorbell(_dir(run_dir) / ASKED).ring()
    return request_id


def answer_to(run_dir: Path, explorer: str, rank: int, request_id: str) -> int | None:
    """The version the trainer answered request `request_id` with (the newest published then), or
    None while it has not answered it."""
    try:
        answers = read_json(_dir(run_dir) / ANSWERS, {}) or {}
    except ValueError:
        return None
    if answers.get("answered", {}).get(owner(explorer, rank)) != request_id:
        return None
    return int(answers["version"])


def withdraw(run_dir: Path, explorer: str, rank: int) -> None:
    """Remove this process's request (it stops and needs no answer)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(request_file(run_dir, explorer, rank))


class RequestDesk:
    """The trainer's side (rank 0): whether an explorer waits for an answer, and answering."""

    def __init__(self, run_dir: Path, reread_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.dir = _dir(run_dir)
        self.bell = Doorbell(self.dir / ASKED)
        self.reread_s = reread_s
        self.clock = clock
        try:
            answers = read_json(self.dir / ANSWERS, {}) or {}
        except ValueError:
            answers = {}
        # A requeued trainer does not answer again what it answered before it stopped.
        self.answered: dict[str, str] = dict(answers.get("answered", {}))
        self._seen: dict[str, str] = {}
        self._signature = None
        self._read_at: float | None = None

    def pending(self) -> bool:
        """True if an explorer asked and has not been answered yet."""
        signature = self.bell.signature()
        now = self.clock()
        if signature != self._signature or self._read_at is None or now - self._read_at >= self.reread_s:
            self._signature, self._read_at = signature, now
            self._seen = self._read()
        return any(self.answered.get(who) != rid for who, rid in self._seen.items())

    def answer(self, version: int) -> None:
        """Answer every request seen with `version`, the newest published policy."""
        self.answered.update(self._seen)
        make_dirs(self.dir)
        write_json_atomic(self.dir / ANSWERS, {"answered": self.answered, "version": int(version),
                                               "time": time.time()})

    def _read(self) -> dict[str, str]:
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return {}
        seen = {}
        for name in names:
            if not name.endswith(".json") or name == ANSWERS or name.startswith(TMP_PREFIX):
                continue
            try:
                request = read_json(self.dir / name)
            except ValueError:
                continue
            if isinstance(request, dict) and isinstance(request.get("id"), str):
                seen[name.removesuffix(".json")] = request["id"]
        return seen

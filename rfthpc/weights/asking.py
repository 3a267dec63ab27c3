"""Explorers asking the trainer for weights (`synchronizer.sync_style: explorer_driven`).

    weights/.requests/asked/<n>     requests, each a new entry: {"owner": "<explorer>-<rank>", "id",
                                    "held", "time"} (an `id` of null withdraws the owner's request)
    weights/.requests/answers/<n>   the trainer's answers, the newest entry current: {"answered":
                                    {"<explorer>-<rank>": id}, "version": N, "time"}

In Trinity-RFT an explorer at its sync point marks itself REQUIRE_SYNC in the Synchronizer (a Ray
actor) and blocks on the actor's condition; the trainer asks the actor between steps, and every
second while it waits for experience, whether any explorer requires a sync, then saves its weights
(which wakes the explorers) or, when it trained nothing since its last sync, wakes them with
nothing new. rfthpc has no actor: its state is these two journals (`rfthpc.sharedfs.journal`), every
request and answer a new entry, so the other side sees it at once on any node. A request is
pending while the newest answers do not name its id; the trainer answers every request it has
seen, with the newest published version, after publishing.

The trainer looks for the next request by name each time it looks and reads the requests only when
one came (or every `reread_s`), so a waiting trainer costs one metadata operation per look however
many explorers there are. An explorer waits on the answers journal (`answers_doorbell`) through
`rfthpc.sharedfs.handoff`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.handoff import Doorbell
from rfthpc.sharedfs.journal import journal_at

REQUESTS = ".requests"
ANSWERS = "answers"
ASKED = "asked"
REQUESTS_KEPT = 1024
"""Requests left behind the newest: a trainer that starts late still reads this many."""
ANSWERS_KEPT = 16


def _dir(run_dir: Path) -> Path:
    return RunDir(run_dir).weights / REQUESTS


def owner(explorer: str, rank: int) -> str:
    """The name one explorer process asks under."""
    return f"{explorer}-{rank}"


def requests_doorbell(run_dir: Path) -> Doorbell:
    """The requests' journal: every request (or withdrawal) is an entry."""
    return Doorbell(_dir(run_dir) / ASKED, keep=REQUESTS_KEPT)


def answers_doorbell(run_dir: Path) -> Doorbell:
    """What rings when the trainer answers: the answers' journal."""
    return Doorbell(_dir(run_dir) / ANSWERS, keep=ANSWERS_KEPT)


def _request(run_dir: Path, who: str, request_id: str | None, held: int | None) -> None:
    note = {"owner": who, "id": request_id, "held": held, "time": time.time()}
    # A whole entry (written, then named), not a bare ring: the trainer reads what it says.
    requests_doorbell(run_dir).journal.append(json.dumps(note).encode())


def ask(run_dir: Path, explorer: str, rank: int, held: int) -> str:
    """Ask the trainer for weights (this process holds version `held`); return the request's id."""
    request_id = uuid.uuid4().hex
    _request(run_dir, owner(explorer, rank), request_id, int(held))
    return request_id


def _answers(run_dir: Path) -> dict:
    _, data = journal_at(_dir(run_dir) / ANSWERS, keep=ANSWERS_KEPT).latest()
    try:
        answers = None if data is None else json.loads(data)
    except ValueError:
        return {}
    return answers if isinstance(answers, dict) else {}


def answer_to(run_dir: Path, explorer: str, rank: int, request_id: str) -> int | None:
    """The version the trainer answered request `request_id` with (the newest published then), or
    None while it has not answered it."""
    answers = _answers(run_dir)
    if answers.get("answered", {}).get(owner(explorer, rank)) != request_id:
        return None
    return int(answers["version"])


def requests(run_dir: Path) -> dict[str, dict]:
    """Each owner's newest request among the entries kept, withdrawn ones left out (what `rfthpc
    status` and tests look at; the trainer reads them as they come, `RequestDesk`)."""
    _, notes = requests_doorbell(run_dir).notes_after(0)
    newest: dict[str, dict] = {}
    for request in filter(None, map(_parsed, notes)):
        newest[request["owner"]] = request
    return {who: r for who, r in newest.items() if isinstance(r.get("id"), str)}


def _parsed(note: bytes) -> dict | None:
    """A request (or withdrawal) entry; None for anything else."""
    try:
        request = json.loads(note)
    except ValueError:
        return None
    return request if isinstance(request, dict) and isinstance(request.get("owner"), str) else None


def withdraw(run_dir: Path, explorer: str, rank: int) -> None:
    """Take back this process's request (it stops and needs no answer)."""
    _request(run_dir, owner(explorer, rank), None, None)


class RequestDesk:
    """The trainer's side (rank 0): whether an explorer waits for an answer, and answering."""

    def __init__(self, run_dir: Path, reread_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.run_dir = Path(run_dir)
        self.bell = requests_doorbell(run_dir)
        self.reread_s = reread_s
        self.clock = clock
        # A requeued trainer does not answer again what it answered before it stopped.
        self.answered: dict[str, str] = dict(_answers(run_dir).get("answered", {}))
        self._seen: dict[str, str] = {}
        self._read_upto = 0
        """The newest request entry read."""
        self._signature: int | None = None
        self._read_at: float | None = None

    def pending(self) -> bool:
        """True if an explorer asked and has not been answered yet."""
        signature = self.bell.signature()
        now = self.clock()
        if signature != self._signature or self._read_at is None or now - self._read_at >= self.reread_s:
            self._signature, self._read_at = signature, now
            self._read()
        return any(self.answered.get(who) != rid for who, rid in self._seen.items())

    def answer(self, version: int) -> None:
        """Answer every request seen with `version`, the newest published policy."""
        self.answered.update(self._seen)
        answers = {"answered": self.answered, "version": int(version), "time": time.time()}
        journal_at(_dir(self.run_dir) / ANSWERS, keep=ANSWERS_KEPT).append(json.dumps(answers).encode())

    def _read(self) -> None:
        """Take in the requests (and withdrawals) made since the last read, each owner's newest."""
        self._read_upto, notes = self.bell.notes_after(self._read_upto)
        for request in filter(None, map(_parsed, notes)):
            if isinstance(request.get("id"), str):
                self._seen[request["owner"]] = request["id"]
            else:
                self._seen.pop(request["owner"], None)

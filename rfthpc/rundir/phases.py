"""Start-up and shutdown phases of the run's processes: `monitor/phases/<role>.jsonl`.

Each process appends one line when it reaches a phase: `{"phase": ..., "time": <wall clock>, "pid": ...}`.
A process's first line is `process_start`: when the operating system started it, before the
interpreter and its imports. `rfthpc run` reads the lines back when the run ends and prints how long
start-up and shutdown took (`report`); the trainer and the explorers also log `startup/<phase>_s`
(seconds since their process started) with their first step (docs/performance.md).

Phases, in the order they happen:
- trainer: `imports` (its modules loaded), `model` (the policy built), `first_weights` (version 0
  published), `first_step`, then `last_step`, `final_checkpoint` (the run's last checkpoint
  written), `exit`;
- explorer: `imports`, `engine` (its engine started, holding its first policy), `startup_eval` (the
  start-up evaluation scored), `first_batch` (the first batch generated and scored), then
  `final_eval`, `exit`;
- `run` (the `rfthpc run` command): `roles_started`, `returned`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from rfthpc.sharedfs.fileops import append_line

PHASES_DIR = "phases"

_LABELS = {
    "imports": "imports", "model": "model built", "first_weights": "first weights published",
    "first_step": "first step", "engine": "engine started", "startup_eval": "start-up evaluation",
    "first_batch": "first batch", "last_step": "last step", "final_checkpoint": "final checkpoint",
    "final_eval": "final evaluation", "exit": "exited",
}
_STARTUP = ("imports", "model", "first_weights", "engine", "startup_eval", "first_batch", "first_step")
_SHUTDOWN = ("final_checkpoint", "final_eval", "exit")


_IMPORTED = time.time()


def process_start_time() -> float:
    """Wall-clock time at which the operating system started this process (Linux: from /proc);
    elsewhere the time this module was first imported."""
    try:
        # starttime, field 22 of /proc/self/stat, in clock ticks after boot; the command name (field 2)
        # may hold spaces, so count from the ")" that closes it.
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return _IMPORTED


class PhaseLog:
    """Appends this process's phases to `<run>/monitor/phases/<role>.jsonl` (`enabled=False`: only
    remembers them, for a process whose rank does not report)."""

    def __init__(self, run_root: Path, role: str, enabled: bool = True) -> None:
        self.path = Path(run_root) / "monitor" / PHASES_DIR / f"{role}.jsonl"
        self.enabled = enabled
        self.start = process_start_time()
        self.times: dict[str, float] = {}
        self._write("process_start", self.start)

    def mark(self, phase: str, when: float | None = None) -> None:
        """Record that this process reached `phase` now (or at wall-clock time `when`); only the first
        time counts."""
        if phase in self.times:
            return
        self._write(phase, time.time() if when is None else when)

    def seconds(self) -> dict[str, float]:
        """`startup/<phase>_s`: seconds from the process's start to each phase reached so far."""
        return {f"startup/{p}_s": t - self.start for p, t in self.times.items() if p != "process_start"}

    def _write(self, phase: str, when: float) -> None:
        self.times[phase] = when
        if self.enabled:
            append_line(self.path, json.dumps({"phase": phase, "time": when, "pid": os.getpid()}))


def read_phases(run_root: Path, since: float = 0.0) -> dict[str, dict[str, float]]:
    """{role: {phase: time}} of the processes started at or after `since` (wall clock): a role
    restarted in a resumed run counts from its newest start."""
    out: dict[str, dict[str, float]] = {}
    for path in sorted((Path(run_root) / "monitor" / PHASES_DIR).glob("*.jsonl")):
        phases: dict[str, float] = {}
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:  # a torn last line (a killed writer)
                continue
            if rec["phase"] == "process_start":
                phases = {}
            phases.setdefault(rec["phase"], float(rec["time"]))
        if phases.get("process_start", since) >= since - 1.0 and phases:
            out[path.stem] = phases
    return out


def report(phases: dict[str, dict[str, float]], roles_started: float, returned: float) -> list[str]:
    """Two lines: each role's start-up phases in seconds after the roles started, and its shutdown
    phases after the trainer's last step (or, without a trainer, after the first explorer's last phase)."""
    def line(role: str, names: tuple[str, ...], origin: float) -> str:
        done = [(p, phases[role][p]) for p in names if p in phases[role]]
        return f"{role}: " + ", ".join(f"{_LABELS[p]} {t - origin:.1f}" for p, t in done) if done else ""

    roles = sorted(phases, key=lambda r: (r != "trainer", r))
    startup = "; ".join(filter(None, (line(r, _STARTUP, roles_started) for r in roles)))
    lines = [f"start-up, seconds after the roles started: {startup}"]
    last = phases.get("trainer", {}).get("last_step")
    if last is not None:
        shutdown = "; ".join(filter(None, (line(r, _SHUTDOWN, last) for r in roles)))
        lines.append(f"shutdown, seconds after the last step: {shutdown}; command returned {returned - last:.1f}")
    return lines

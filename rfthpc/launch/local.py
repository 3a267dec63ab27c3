"""Run a config's roles as local processes (`rfthpc run`): the same commands Slurm starts.

The trainer is `python -m rfthpc train` (under torchrun when it has several processes), each
explorer `python -m rfthpc explore --rank k`, and each engine of an auxiliary model with
`placement: shared` `python -m rfthpc serve --model NAME --engine k` (started first: it takes
longest to start; explorers wait for its address). Their output goes to `<run dir>/log/<role>.log`.
A compact progress line is printed while they run. Ctrl-C (or SIGTERM, or SIGHUP) asks every role to stop
cleanly (the trainer checkpoints, explorers commit finished groups and release their claims);
`rfthpc run --resume` continues. When a role fails, the others are stopped and its log tail is
shown.

When the run ends: with a trainer, once it is done and the explorers have finished (rank 0 of
each explorer array evaluates the final policy after the trainer is done, so they are given time
to do it); without one (`mode: explore`), once every explorer has finished. The servers of shared
auxiliary models are services: the run does not wait for them, it stops them when it ends.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from rfthpc.config import Stage
from rfthpc.config.derive import shared_models
from rfthpc.config.schema import explores, trains
from rfthpc.errors import EXIT_PREEMPTED
from rfthpc.launch.torchrun import SHUTDOWN_TIMEOUT_VAR, torchrun_env
from rfthpc.rundir.metrics import read_metrics
from rfthpc.rundir.paths import RunDir
from rfthpc.rundir.phases import PhaseLog
from rfthpc.rundir.trainer_meta import read_trainer_meta
from rfthpc.sharedfs.fileops import make_dirs

STOP_GRACE_S = 120.0
"""Seconds a role may take to save its state after SIGTERM before it is killed."""
DRAIN_S = 600.0
"""Seconds explorers may keep running after the trainer is done (final evaluation)."""
EXIT_INTERRUPTED = 130
"""Exit code of `rfthpc run` stopped by Ctrl-C or SIGTERM (the shell's code for SIGINT)."""
EXIT_FAILED = 1
"""Exit code of `rfthpc run` when a role failed."""
POLL_S = 0.1
"""Seconds between looks at the roles: the command returns this long at most after the last one exits."""


@dataclass
class Role:
    """One local process of the run."""

    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    service: bool = False
    """Serves the other roles (a shared auxiliary model's server): stopped when they are done."""
    proc: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = None

    def start(self) -> None:
        """Start the process, appending its output to its log file."""
        make_dirs(self.log_path.parent)
        self.log_file = open(self.log_path, "ab")
        self.log_file.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(self.argv)}\n".encode())
        self.log_file.flush()
        # A new session keeps the terminal's Ctrl-C away from the child: the runner stops it in order.
        self.proc = subprocess.Popen(
            self.argv, stdout=self.log_file, stderr=subprocess.STDOUT, env={**os.environ, **self.env},
            start_new_session=True,
        )

    def poll(self) -> int | None:
        """The exit code, or None while running (or before it started)."""
        return None if self.proc is None else self.proc.poll()

    @property
    def running(self) -> bool:
        """True while the process is alive."""
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        """Send `sig` to the role's whole process group (torchrun's workers included)."""
        if self.running:
            try:
                os.killpg(self.proc.pid, sig)  # type: ignore[union-attr]
            except ProcessLookupError:
                pass

    def close(self) -> None:
        """Close the runner's handle on the log file."""
        if self.log_file is not None:
            self.log_file.close()
            self.log_file = None

    def tail(self, lines: int = 40) -> str:
        """The last lines of the role's log."""
        try:
            with open(self.log_path, "rb") as f:
                return "".join(deque((ln.decode(errors="replace") for ln in f), maxlen=lines))
        except FileNotFoundError:
            return ""


def _python() -> list[str]:
    return [sys.executable, "-m", "rfthpc"]


def available_cores() -> int:
    """CPUs this process may run on: its affinity mask (what `taskset`, a Slurm allocation or a
    container allows), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def plan_roles(stages: list[Stage], run: RunDir, trainer_procs: int = 1, explorers: int | None = None,
               cores: int | None = None) -> list[Role]:
    """The processes a run's stages need on this machine: a trainer if any stage trains (mode
    `both` or `train`), explorers if any stage explores (`both` or `explore`).

    Each process gets `OMP_NUM_THREADS = cores // processes` (at least 1; `cores`: by default
    `available_cores()`) unless the caller set it, so the roles overlap on cores of their own
    instead of oversubscribing the ones they share (docs/performance.md).
    """
    cfg = stages[-1].config
    train = any(trains(s.config.mode) for s in stages)
    exploring = [s.config for s in stages if explores(s.config.mode)]
    count = (explorers if explorers is not None else cfg.slurm.explorer.array_size) if exploring else 0
    # The engines start once, from the first stage that explores (rfthpc.config.settings.explorer_settings).
    served = [(m.name, k) for m in (shared_models(exploring[0]) if exploring else []) for k in range(m.engine_num)]
    # The trainer and this command's explorers take turns on the machine's GPUs (a colocated run in sleep mode).
    time_share = bool(exploring and exploring[0].explorer.rollout_model.enable_sleep_mode)
    cores = available_cores() if cores is None else cores
    threads = str(max(1, cores // max(1, count + len(served) + (trainer_procs if train else 0))))
    base_env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", threads)}
    roles: list[Role] = []
    for model, engine in served:
        argv = [*_python(), "serve", "--run-dir", str(run.root), "--model", model, "--engine", str(engine),
                "--explorer", cfg.explorer.name]
        roles.append(Role(f"server_{model}_{engine}", argv, run.log / f"server_{model}_{engine}.log", base_env,
                          service=True))
    if train:
        # Explorers of this command run on this machine: they load the trainer's versions from node-local memory.
        train_args = ["train", "--run-dir", str(run.root), *(["--node-local-weights"] if count else []),
                      *(["--time-share-gpus"] if count and time_share else [])]
        if trainer_procs > 1:
            argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={trainer_procs}",
                    "-m", "rfthpc", *train_args]
            env = {**base_env, SHUTDOWN_TIMEOUT_VAR: torchrun_env(os.environ)[SHUTDOWN_TIMEOUT_VAR]}
        else:
            argv, env = [*_python(), *train_args], base_env
        roles.append(Role("trainer", argv, run.log / "trainer.log", env))
    name = cfg.explorer.name
    for rank in range(count):
        argv = [*_python(), "explore", "--run-dir", str(run.root), "--name", name, "--rank", str(rank),
                *(["--time-share-gpus"] if train and time_share else [])]
        roles.append(Role(f"{name}_{rank}", argv, run.log / f"{name}_{rank}.log", base_env))
    return roles


def _last(records: list[dict], *keys: str) -> float | None:
    for rec in reversed(records):
        for key in keys:
            if isinstance(rec.get(key), (int, float)):
                return float(rec[key])
    return None


def _last_eval(records: list[dict]) -> tuple[str, float] | None:
    """(taskset, accuracy) of the newest eval record with an accuracy."""
    for rec in reversed(records):
        for key, value in rec.items():
            if key.startswith("eval/") and key.endswith("/accuracy") and isinstance(value, (int, float)):
                return key[len("eval/"):-len("/accuracy")], float(value)
    return None


def progress_line(run: RunDir, roles: list[Role], stage_steps: dict[str, int | None] | None = None) -> str:
    """One line: trainer step (and step within its stage), reward or SFT loss, staleness, eval
    accuracy, tokens/s, live roles. `stage_steps` gives each stage's `total_steps` (None: by data)."""
    report = read_trainer_meta(run)
    meta = {} if report is None else dataclasses.asdict(report)
    trainer = read_metrics(run.monitor / "trainer.jsonl")
    explorer = [r for f in sorted(run.monitor.glob("explorer_*.jsonl")) for r in read_metrics(f)]
    step = int(meta.get("step") or 0)
    head = f"step {step}"
    if meta.get("stage"):
        total = (stage_steps or {}).get(meta["stage"])
        in_stage = step - int(meta.get("stage_start_step") or 0)
        head += f" ({meta['stage']} {in_stage}{f'/{total}' if total else ''})"
    parts = [head]
    latest = trainer[-1] if trainer else {}
    if "actor/sft_loss" in latest:
        parts.append(f"sft loss {latest['actor/sft_loss']:.3f}")
    else:
        reward = _last(trainer[-1:], "critic/score/mean")
        if reward is None:
            reward = _last(explorer, "rollout/reward_mean")
        if reward is not None:
            parts.append(f"reward {reward:.3f}")
    stale = _last(trainer[-1:], "staleness/mean")
    if stale is not None:
        parts.append(f"staleness {stale:.2f}")
    ev = _last_eval(explorer)
    if ev is not None:
        parts.append(f"eval {ev[0]} {ev[1]:.3f}")
    tps = _last(explorer, "rollout/tokens_per_s")
    if tps is not None:
        parts.append(f"{tps:.0f} tok/s")
    alive = sum(r.running for r in roles)
    parts.append(f"{alive}/{len(roles)} roles running")
    return " | ".join(parts)


class _Reporter:
    """Prints the progress line: rewritten in place on a terminal, else as a new line when it changes
    (at most every `quiet_s` seconds, so logs stay short)."""

    def __init__(self, every_s: float, quiet_s: float = 10.0) -> None:
        self.tty = sys.stdout.isatty()
        self.every_s = every_s if self.tty else quiet_s
        self.last_time = 0.0
        self.last_line = ""

    def due(self) -> bool:
        """True when the next line should be shown."""
        return time.monotonic() - self.last_time >= self.every_s

    def show(self, line: str) -> None:
        """Show `line` (in place on a terminal; on a new line elsewhere, if it changed)."""
        now = time.monotonic()
        if self.tty:
            print(f"\r{line}\033[K", end="", flush=True)
        elif line != self.last_line:
            print(line, flush=True)
        self.last_time, self.last_line = now, line

    def end(self) -> None:
        """Finish the line rewritten in place, so later output starts on a new line."""
        if self.tty and self.last_line:
            print()


def run_local(run: RunDir, roles: list[Role], stage_steps: dict[str, int | None] | None = None,
              resume_command: str = "rfthpc run --config ... --resume", progress_every_s: float = 2.0,
              drain_s: float = DRAIN_S, stop_grace_s: float = STOP_GRACE_S, phases: PhaseLog | None = None) -> int:
    """Start `roles`, show progress until the run is done; return the exit code.

    `stage_steps` ({stage name: total_steps}) only labels the progress line; `resume_command` is
    what the user is told to run after an interruption; `phases` is the runner's own (it marks when
    the roles started).

    0: done; 1: a role failed (its log tail is printed); 130: stopped by Ctrl-C/SIGTERM (the roles
    saved their state: `--resume` continues); 124: a role was stopped from outside (preempted).
    """
    stop_signal: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        stop_signal.append(signum)

    # A closed terminal (SIGHUP) stops the run like Ctrl-C: the roles, in their own sessions, would
    # otherwise outlive the runner. Under nohup (SIGHUP ignored) the run goes on.
    stopping = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        stopping.append(signal.SIGHUP)
    previous = {sig: signal.signal(sig, on_signal) for sig in stopping}
    reporter = _Reporter(progress_every_s)
    trainer = next((r for r in roles if r.name == "trainer"), None)
    workers = [r for r in roles if not r.service]
    drain_deadline: float | None = None
    try:
        (phases or PhaseLog(run.root, "run")).mark("roles_started")
        for role in roles:
            role.start()
        while True:
            codes = {r.name: r.poll() for r in roles}
            failed = [r for r in roles if codes[r.name] not in (None, 0, EXIT_PREEMPTED)]
            if failed:
                reporter.end()
                names = ", ".join(f"{r.name} (exit {codes[r.name]})" for r in failed)
                print(f"rfthpc run: {names} failed; stopping the other roles...", file=sys.stderr, flush=True)
                _stop(roles, stop_grace_s)
                for r in failed:
                    print(f"rfthpc run: {r.name} failed (exit {codes[r.name]}); last lines of {r.log_path}:\n"
                          f"{r.tail()}", file=sys.stderr)
                return EXIT_FAILED
            preempted = [r for r in roles if codes[r.name] == EXIT_PREEMPTED]
            if stop_signal or preempted:
                reporter.end()
                stopped = ", ".join(r.name for r in preempted)
                why = "interrupted" if stop_signal else f"{stopped} was stopped from outside"
                print(f"rfthpc run: {why}; stopping every role (each saves its state)...", file=sys.stderr, flush=True)
                _stop(roles, stop_grace_s)
                print(f"rfthpc run: stopped; continue with `{resume_command}` (run directory {run.root})",
                      file=sys.stderr)
                return EXIT_INTERRUPTED if stop_signal else EXIT_PREEMPTED
            if trainer is not None:
                if codes["trainer"] == 0 and drain_deadline is None:
                    drain_deadline = time.monotonic() + drain_s
                done = codes["trainer"] == 0 and not any(r.running for r in workers)
                if drain_deadline is not None and not done and time.monotonic() > drain_deadline:
                    print(f"rfthpc run: the trainer is done but explorers still run after {drain_s:.0f} s; "
                          "stopping them", file=sys.stderr)
                    _stop(workers, stop_grace_s)
                    done = True
            else:
                done = all(codes[r.name] == 0 for r in workers)
            if done:
                _stop([r for r in roles if r.service], stop_grace_s)
            if done or reporter.due():
                reporter.show(progress_line(run, roles, stage_steps))
            if done:
                reporter.end()
                return 0
            time.sleep(POLL_S)
    finally:
        # Roles run in their own sessions, out of Ctrl-C's reach: whatever ended the loop (a role that
        # could not start, an error here), none may outlive the runner.
        if any(r.running for r in roles):
            _stop(roles, stop_grace_s)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for r in roles:
            r.close()


def _stop(roles: list[Role], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM every running role, wait up to `grace_s` for them to save and exit, then SIGKILL."""
    for r in roles:
        r.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(r.running for r in roles):
        time.sleep(0.2)
    for r in roles:
        if r.running:
            print(f"rfthpc run: {r.name} did not stop within {grace_s:.0f} s; killing it", file=sys.stderr)
            r.signal(signal.SIGKILL)
        if r.proc is not None:
            r.proc.wait()

"""Time-sharing a node's GPUs between the trainer and the explorers colocated with it (vLLM's sleep mode).

A colocated run whose trainer and rollout engine fit on a GPU one at a time, not together
(`explorer.rollout_model.enable_sleep_mode`, rfthpc.config.colocation), takes turns on each GPU: the
explorer's engines sleep (weights to CPU memory, KV cache freed) whenever it gives its turn up, and the
trainer moves its weights and optimizer state to CPU memory whenever it gives up its own
(rfthpc.trainer.time_sharing). They still hand off through the run directory as in every layout; the
turns only decide who holds the GPUs' memory.

A turn on a GPU is an exclusive POSIX lock (`lockf`) of a file in node-local memory named for the run and
the GPU (`<staging root>/rfthpc-<run key>/turns/gpu-<id>`, the ids as CUDA_VISIBLE_DEVICES names them: a
colocated job shows every task the node's GPUs and each explorer a group of them). A process takes the turns
of the GPUs it uses in ascending order, so two processes never wait on each other in a circle. The lock is
the process's own: processes it forks (vLLM's engine core) do not hold it, as they would a `flock`'s open
file, and a process that dies loses it, so a killed role never leaves a GPU taken.

Each side gives its turn up only where it waits for the other: the trainer while it waits for experience,
the explorer once a batch is generated and whenever it waits (for tasks, for a policy version). Neither
ever waits for the other while holding a turn, so the two cannot block each other. Without GPUs (a CPU
run) the roles take turns on the one device all the same (nothing is released: there is no GPU memory).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Protocol

from rfthpc.engines.base import GenerateRequest, PolicyEngine
from rfthpc.engines.batching import GenerationCancelled
from rfthpc.engines.sampling import Completion, SamplingArgs
from rfthpc.weights import node_local

log = logging.getLogger(__name__)

POLL_S = 0.02
"""Seconds between tries while another process holds a turn."""
SLOW_WAIT_S = 60.0
"""A wait for a turn longer than this is logged (once per wait)."""


def device_ids(env: Mapping[str, str] = os.environ) -> list[str]:
    """The GPUs this process uses, as CUDA_VISIBLE_DEVICES names them, in the order turns are taken; ["node"]
    without it (no GPUs, or all of them: one turn for the whole node)."""
    visible = [d.strip() for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return sorted(set(visible), key=lambda d: (0, int(d), d) if d.isdigit() else (1, 0, d)) or ["node"]


def turns_dir(staging_root: Path, run_root: Path) -> Path:
    """Where the turn files of the run in `run_root` live on this node."""
    return staging_root / f"rfthpc-{node_local.run_key(run_root)}" / "turns"


class GpuTurns:
    """Exclusive turns of one process on a set of this node's GPUs."""

    def __init__(self, directory: Path, devices: Sequence[str], who: str) -> None:
        """`who`: the process, for the log."""
        self.directory = directory
        self.devices = list(devices)
        self.who = who
        self._files: list[IO[bytes]] = []

    @property
    def held(self) -> bool:
        """Whether this process holds its turns now."""
        return bool(self._files)

    def acquire(self, stop: Callable[[], bool] = lambda: False) -> float | None:
        """Wait for the turns of every device, in order; the seconds waited, or None if `stop()` became true
        first (nothing is then held)."""
        if self.held:
            return 0.0
        self.directory.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        logged = False
        for device in self.devices:
            f = open(self.directory / f"gpu-{device}", "ab")  # noqa: SIM115 (held open until released)
            while True:
                try:
                    fcntl.lockf(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if e.errno not in (errno.EACCES, errno.EAGAIN):
                        raise
                    if stop():
                        f.close()
                        self.release()
                        return None
                    if not logged and time.monotonic() - began > SLOW_WAIT_S:
                        log.info("%s: waiting for the turn on GPU %s (held by the role colocated with it)",
                                 self.who, device)
                        logged = True
                    time.sleep(POLL_S)
            self._files.append(f)
        return time.monotonic() - began

    def release(self) -> None:
        """Give the turns up (closing a file releases the process's lock on it)."""
        files, self._files = self._files, []
        for f in reversed(files):
            f.close()


class Sleeper(Protocol):
    """An engine that can free its GPU memory while another process uses the GPU, and take it back."""

    def sleep(self) -> None:
        """Free the GPU memory: weights to CPU memory, KV cache dropped."""
        ...

    def wake_up(self) -> None:
        """Take the memory back; the engine serves as before."""
        ...


class TimeShare:
    """An explorer process's side: its turns and its engines, which sleep whenever it gives the turns up.

    `turn()` scopes nest: the turns are taken by the outermost and given up (engines asleep) when it ends.
    Only one thread (the explorer's, which alone touches the engines) uses it."""

    def __init__(self, turns: GpuTurns, stop: Callable[[], bool],
                 cancelled: Callable[[], Exception] = lambda: GenerationCancelled("the explorer is stopping")) -> None:
        """`stop`: whether to give up waiting for a turn, raising `cancelled()` then."""
        self.turns = turns
        self.stop = stop
        self.cancelled = cancelled
        self.engines: list[Sleeper] = []
        self.waited_s = 0.0
        """Seconds spent waiting for turns, in all."""
        self.handoffs = 0
        """Turns taken."""
        self._depth = 0

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Hold the turns (and the engines awake) for the block."""
        if self._depth == 0:
            self._take()
        self._depth += 1
        try:
            yield
        except BaseException:
            self._depth -= 1
            if self._depth == 0:
                self._give(failing=True)
            raise
        self._depth -= 1
        if self._depth == 0:
            self._give()

    def wrap(self, engine: PolicyEngine) -> PolicyEngine:
        """`engine` taking a turn for every call made outside a `turn()` block, and sleeping between turns."""
        if hasattr(engine, "sleep") and hasattr(engine, "wake_up"):
            self.engines.append(engine)  # type: ignore[arg-type]
        return TurnTaking(engine, self)

    def _take(self) -> None:
        waited = self.turns.acquire(self.stop)
        if waited is None:
            raise self.cancelled()
        self.waited_s += waited
        self.handoffs += 1
        for engine in self.engines:
            engine.wake_up()

    def _give(self, failing: bool = False) -> None:
        """Put the engines to sleep and give the turns up; `failing`: as an error unwinds, whose report an engine
        failing to sleep too must not replace."""
        try:
            for engine in self.engines:
                engine.sleep()
        except Exception:
            if not failing:
                raise
            log.warning("an engine could not be put to sleep as an error unwinds", exc_info=True)
        finally:
            self.turns.release()


class TurnTaking:
    """A rollout engine used only while its process holds its turns (`TimeShare`)."""

    def __init__(self, engine: PolicyEngine, share: TimeShare) -> None:
        self.engine = engine
        self.share = share

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def generate(self, prompts_token_ids: Sequence[Sequence[int]], n: int,
                 params: SamplingArgs) -> list[list[Completion]]:
        """The engine's `generate`, in a turn."""
        with self.share.turn():
            return self.engine.generate(prompts_token_ids, n, params)

    def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[list[Completion]]:
        """The engine's `generate_batch`, in a turn."""
        with self.share.turn():
            return self.engine.generate_batch(requests)

    def load_weights(self, path: Path) -> None:
        """The engine's `load_weights`, in a turn."""
        with self.share.turn():
            self.engine.load_weights(path)

    def close(self, process_ending: bool = False) -> None:
        """Close the engine (no turn needed: it frees memory)."""
        self.engine.close(process_ending)

"""Turns on a node's GPUs (rfthpc.engines.time_sharing): one process at a time, in real processes; a forked
child (vLLM's engine core) does not keep its parent's turn; a killed holder loses it; an explorer's engines
sleep between its turns and wake for them, and a stop ends a wait for a turn."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rfthpc.engines.base import EngineSettings
from rfthpc.engines.batching import GenerationCancelled
from rfthpc.engines.hf_engine import TransformersEngine
from rfthpc.engines.sampling import SamplingArgs
from rfthpc.engines.time_sharing import GpuTurns, TimeShare, device_ids

ROOT = Path(__file__).resolve().parents[2]

HOLDER = """
import os, sys, time
from pathlib import Path
from rfthpc.engines.time_sharing import GpuTurns
turns = GpuTurns(Path(sys.argv[1]), ["0", "1"], "holder")
assert turns.acquire() is not None
if os.fork() == 0:  # a child as vLLM forks its engine core: it must not keep the turn
    time.sleep(120)
    os._exit(0)
print("held", flush=True)
sys.stdin.readline()
turns.release()
print("released", flush=True)
sys.stdin.readline()
"""


def _holder(directory: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(directory)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _end(proc: subprocess.Popen[str]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)  # the holder and its forked child
    proc.wait()


def test_the_devices_are_taken_in_one_order() -> None:
    assert device_ids({"CUDA_VISIBLE_DEVICES": "3,1,10,1"}) == ["1", "3", "10"]
    assert device_ids({"CUDA_VISIBLE_DEVICES": "GPU-b,GPU-a"}) == ["GPU-a", "GPU-b"]
    assert device_ids({}) == ["node"]


def test_one_process_holds_a_gpu_at_a_time_and_its_forked_child_does_not_keep_it(tmp_path: Path) -> None:
    holder = _holder(tmp_path)
    try:
        mine = GpuTurns(tmp_path, ["1"], "test")
        deadline = time.monotonic() + 0.5
        assert mine.acquire(stop=lambda: time.monotonic() > deadline) is None  # held by the other process
        assert not mine.held
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "released"
        # The holder's forked child is still alive, with the holder's files open: the turn is free all the same.
        waited = mine.acquire(stop=lambda: time.monotonic() > deadline + 60)
        assert waited is not None and mine.held
        mine.release()
    finally:
        _end(holder)


def test_a_killed_holder_leaves_the_gpu_free(tmp_path: Path) -> None:
    holder = _holder(tmp_path)
    _end(holder)
    mine = GpuTurns(tmp_path, ["0", "1"], "test")
    deadline = time.monotonic() + 60
    assert mine.acquire(stop=lambda: time.monotonic() > deadline) is not None
    mine.release()


class Recorded(TransformersEngine):
    """The transformers engine, noting when it is put to sleep and woken."""

    events: list[str]

    def sleep(self) -> None:
        self.events.append("sleep")
        super().sleep()

    def wake_up(self) -> None:
        self.events.append("wake")
        super().wake_up()

    def generate_batch(self, requests):  # type: ignore[no-untyped-def]
        self.events.append("generate")
        return super().generate_batch(requests)


def test_an_explorers_engines_sleep_between_its_turns(tmp_path: Path, tiny_model: Path) -> None:
    engine = Recorded(EngineSettings(str(tiny_model), enable_sleep_mode=True))
    engine.events = []
    stopping = [False]
    share = TimeShare(GpuTurns(tmp_path / "turns", ["0"], "explorer"), lambda: stopping[0])
    wrapped = share.wrap(engine)
    params = SamplingArgs(temperature=1.0, max_tokens=2)
    out = wrapped.generate([[1, 2, 3]], 1, params)  # outside a turn: one of its own
    assert len(out[0][0].token_ids) == 2
    assert engine.events == ["wake", "generate", "sleep"] and not share.turns.held
    engine.events.clear()
    with share.turn():
        with share.turn():
            wrapped.generate([[1, 2, 3]], 1, params)
        wrapped.generate([[4, 5]], 1, params)
        assert share.turns.held
    assert engine.events == ["wake", "generate", "generate", "sleep"]
    assert share.handoffs == 2
    assert wrapped.max_model_len == engine.max_model_len  # the rest of the engine shows through

    holder = _holder(tmp_path / "turns")
    try:
        stopping[0] = True
        with pytest.raises(GenerationCancelled):
            wrapped.generate([[1, 2, 3]], 1, params)
        assert engine.events[-1] == "sleep" and not share.turns.held  # nothing woken, nothing held
    finally:
        _end(holder)

"""Doorbells and the adaptive wait on them, on a simulated clock (no test here depends on real time)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rfthpc.sharedfs.handoff import Doorbell, Waiter, WaitPolicy


class SimulatedTime:
    """A clock that only moves when the waiter sleeps; events fire when the clock passes their time."""

    def __init__(self) -> None:
        self.now = 0.0
        self.events: list[tuple[float, Callable[[], None]]] = []
        self.sleeps: list[float] = []

    def at(self, t: float, action: Callable[[], None]) -> None:
        self.events.append((t, action))
        self.events.sort(key=lambda e: e[0])

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s
        while self.events and self.events[0][0] <= self.now:
            self.events.pop(0)[1]()


def waiter(sim: SimulatedTime, **policy: float) -> Waiter:
    return Waiter(WaitPolicy(**policy), clock=sim.clock, sleep=sim.sleep)


def test_a_ring_changes_the_signature_every_time(tmp_path: Path) -> None:
    bell = Doorbell(tmp_path / "bells" / "experience")
    assert bell.signature() == 0
    seen = set()
    for _ in range(5):
        bell.ring()
        seen.add(bell.signature())
    assert seen == {1, 2, 3, 4, 5}
    assert len(list((tmp_path / "bells" / "experience").iterdir())) == 5  # new names, no temporary left


def test_the_waiter_checks_at_once_and_returns_what_the_check_found(tmp_path: Path) -> None:
    sim = SimulatedTime()
    w = waiter(sim)
    assert w.wait(lambda: "ready", [Doorbell(tmp_path / "b")], timeout_s=10) == "ready"
    assert sim.sleeps == [] and w.stats.checks == 1


@pytest.mark.parametrize("ring_at", [0.5, 30.0, 600.0])
def test_a_ring_while_the_hand_off_is_due_is_noticed_within_the_fast_interval(tmp_path: Path, ring_at: float) -> None:
    """The producer rings (a hand-off due after `ring_at` s of waiting); the waiter checks right after,
    and only then (plus its slow ticks)."""
    sim = SimulatedTime()
    bell = Doorbell(tmp_path / "b")
    handed: list[float] = []
    sim.at(ring_at, lambda: (handed.append(sim.now), bell.ring()))
    w = waiter(sim, fast_s=0.02, due_s=2.0, slow_s=1.0)
    got = w.wait(lambda: "batch" if handed else None, [bell], timeout_s=None)
    assert got == "batch"
    # Noticed within one interval of the ring: fast while due, at most slow_s once idle.
    limit = 0.02 if ring_at < 2.0 else 1.0
    assert sim.now - ring_at <= limit + 1e-9
    # The costly check ran on the ring and on slow ticks only, never at the fast rate.
    assert w.stats.checks <= 2 + ring_at / 1.0


def test_an_idle_waiter_costs_a_bounded_number_of_metadata_operations(tmp_path: Path) -> None:
    """An hour of waiting with nothing handed over: stats and checks per second settle at 1 / slow_s."""
    sim = SimulatedTime()
    bells = [Doorbell(tmp_path / "a"), Doorbell(tmp_path / "b")]
    w = waiter(sim, fast_s=0.02, due_s=2.0, slow_s=1.0)
    assert w.wait(lambda: None, bells, timeout_s=3600) is None
    assert sim.now == pytest.approx(3600)
    due_looks = 2.0 / 0.02
    looks = w.stats.stats / len(bells)
    assert looks <= due_looks + 3600 / 1.0 + 20
    assert w.stats.checks <= 3600 / 1.0 + 2
    assert max(sim.sleeps) <= 1.0


def test_a_ring_that_does_not_satisfy_keeps_the_waiter_alert(tmp_path: Path) -> None:
    """A chunk of another stage arrives (ring, check fails); the wanted one follows 0.5 s later and is
    noticed at the fast rate, not after a slow interval."""
    sim = SimulatedTime()
    bell = Doorbell(tmp_path / "b")
    ready: list[bool] = []
    sim.at(100.0, bell.ring)
    sim.at(100.5, lambda: (ready.append(True), bell.ring()))
    w = waiter(sim, fast_s=0.02, due_s=2.0, slow_s=1.0)
    assert w.wait(lambda: "ok" if ready else None, [bell], timeout_s=None) == "ok"
    assert sim.now - 100.5 <= 0.02 + 1e-9


def test_a_missed_ring_is_found_by_the_slow_check(tmp_path: Path) -> None:
    """A producer that does not ring (an older version): the check still runs every slow_s."""
    sim = SimulatedTime()
    ready: list[bool] = []
    sim.at(10.0, lambda: ready.append(True))
    w = waiter(sim, fast_s=0.02, due_s=2.0, slow_s=1.0)
    assert w.wait(lambda: "ok" if ready else None, [Doorbell(tmp_path / "never")], timeout_s=None) == "ok"
    assert sim.now - 10.0 <= 1.0 + 1e-9


def test_timeout_and_stop_end_the_wait(tmp_path: Path) -> None:
    sim = SimulatedTime()
    w = waiter(sim)
    assert w.wait(lambda: None, [Doorbell(tmp_path / "b")], timeout_s=5.0) is None
    assert sim.now == pytest.approx(5.0)
    stop: list[bool] = []
    sim.at(7.0, lambda: stop.append(True))
    assert w.wait(lambda: None, [Doorbell(tmp_path / "b")], timeout_s=None, stop=lambda: bool(stop)) is None
    assert 7.0 <= sim.now <= 8.0
    assert w.stats.waits == 2 and w.stats.waited_s == pytest.approx(sim.now)

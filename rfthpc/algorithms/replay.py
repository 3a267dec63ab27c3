"""Experience replay (Trinity-RFT's `replay_buffer`): which experience groups the trainer reads next,
and how many times it may read each.

With `buffer.trainer_input.experience_buffer.replay_buffer.enable`, the trainer's store reader keeps a
replay buffer of groups (docs/store.md, "Replay"). Every training group the explorers commit enters
it, and each take reads the ready groups of highest priority:

- **Priority** `priority_fn(policy_version, uses, rng, **priority_fn_args)`, computed when a group
  enters (uses 0) and after each read (uses + 1); None instead of a number: the group leaves.
  `linear_decay`: `policy_version - decay * uses`, the newest policy's groups first, the less read
  ones first among them. `decay_limit_randomization` adds Gaussian noise of deviation `sigma` and
  returns None once `uses` reaches `use_count_limit` (<= 0: no limit).
- **Ties**: the group that entered (or re-entered) the buffer first is read first.
- **Reuse**: with `reuse_cooldown_time` None a group leaves once read (the buffer only orders
  reading). With a number, a group just read waits that many seconds outside the buffer, then
  enters again with its new priority.
- **Capacity**: at most `capacity` groups wait in the buffer (those cooling down are outside it). A
  group entering a full buffer pushes out the one of lowest priority (the earliest of equals), unless
  its own priority is lower: then it is turned away.

This module is the policy and its data structure, with no I/O: `ReplayBuffer` holds `Entry`s by
`Slot` (where the group is stored) and applies the rules above; the store's reader keeps the buffer
in its consumption state, reads the groups and counts every group that leaves. It imports neither
h5py nor torch: config validation builds a `ReplayPolicy` to check a config.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, NamedTuple

from rfthpc.errors import ConfigError
from rfthpc.registry import Registry

KEY = "buffer.trainer_input.experience_buffer"
"""The config section of the replay settings (`capacity`, `replay_buffer.*`)."""

PriorityFn = Callable[[int, int, random.Random], "float | None"]

PRIORITY_FNS: Registry[PriorityFn] = Registry(
    "replay priority function", f"{KEY}.replay_buffer.priority_fn",
    {
        "linear_decay": "rfthpc.algorithms.replay:linear_decay",
        "decay_limit_randomization": "rfthpc.algorithms.replay:decay_limit_randomization",
        # The name Trinity-RFT's configuration guide gives the same function.
        "linear_decay_use_count_control_randomization": "rfthpc.algorithms.replay:decay_limit_randomization",
    },
)
"""Priority functions by name: `fn(policy_version, uses, rng, *, <priority_fn_args>) -> float | None`."""


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def linear_decay(policy_version: int, uses: int, rng: random.Random, *, decay: float = 2.0) -> float | None:
    """priority = policy_version - decay * uses; a group read is always put back (Trinity-RFT's `linear_decay`)."""
    return policy_version - _number("decay", decay) * uses


def decay_limit_randomization(policy_version: int, uses: int, rng: random.Random, *, decay: float = 2.0,
                              use_count_limit: int = 3, sigma: float = 0.0) -> float | None:
    """priority = policy_version - decay * uses + N(0, sigma^2); None (the group leaves) once it was read
    `use_count_limit` times (<= 0: never). Trinity-RFT's `decay_limit_randomization`."""
    if isinstance(use_count_limit, bool) or not isinstance(use_count_limit, int):
        raise TypeError(f"use_count_limit must be a whole number (<= 0: no limit), got {use_count_limit!r}")
    if _number("sigma", sigma) < 0:
        raise ValueError(f"sigma must be >= 0, got {sigma!r}")
    if 0 < use_count_limit <= uses:
        return None
    priority = policy_version - _number("decay", decay) * uses
    return priority + rng.gauss(0.0, sigma) if sigma > 0 else priority


@dataclass(frozen=True)
class ReplayPolicy:
    """The replay settings of a trainer stage, checked (a bad value is a ConfigError naming its key)."""

    capacity: int = 10000
    """Groups the buffer holds at most (`experience_buffer.capacity`)."""
    reuse_cooldown_s: float | None = None
    """Seconds a group read waits before it may be read again; None: each group is read once."""
    priority_fn: str = "linear_decay"
    priority_fn_args: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({"decay": 2.0}))
    _fn: PriorityFn = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        found = policy_problems(self.capacity, self.reuse_cooldown_s, self.priority_fn, self.priority_fn_args)
        if found:
            raise ConfigError("\n".join(found))
        object.__setattr__(self, "_fn", PRIORITY_FNS.bind(self.priority_fn, self.priority_fn_args))

    @property
    def reuses(self) -> bool:
        """Whether a group may be read more than once."""
        return self.reuse_cooldown_s is not None

    def priority(self, policy_version: int, uses: int, rng: random.Random) -> float | None:
        """The priority of a group of `policy_version` read `uses` times; None: it leaves the buffer."""
        value = self._fn(policy_version, uses, rng)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"priority function {self.priority_fn!r} returned {value!r}, not a finite number or None")
        return float(value)


def policy_problems(capacity: Any, reuse_cooldown_s: Any, priority_fn: str, priority_fn_args: Mapping[str, Any]
                    ) -> list[str]:
    """What is wrong with these replay settings, each problem naming its config key and the fix."""
    found = []
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        found.append(f"{KEY}.capacity: {capacity!r}; the replay buffer must hold at least 1 group")
    cooldown = reuse_cooldown_s
    if cooldown is not None and (isinstance(cooldown, bool) or not isinstance(cooldown, (int, float))
                                 or not math.isfinite(cooldown) or cooldown < 0):
        found.append(f"{KEY}.replay_buffer.reuse_cooldown_time: {cooldown!r}; give seconds >= 0, or null to read "
                     "each group once")
    try:
        fn = PRIORITY_FNS.bind(priority_fn, priority_fn_args)
    except ConfigError as e:
        return [*found, str(e)]
    for uses in (0, 1):
        try:
            value = fn(0, uses, random.Random(0))
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise TypeError(f"it returned {value!r}, not a number or None")
        except (TypeError, ValueError) as e:
            found.append(f"{KEY}.replay_buffer.priority_fn_args: {dict(priority_fn_args)} do not suit priority "
                         f"function {priority_fn!r}: {e}")
            break
    return found


class Slot(NamedTuple):
    """Where a group is stored: the stream (writer process), its chunk `seq`, the group's position in it."""

    stream: str
    seq: int
    pos: int


@dataclass(frozen=True)
class Entry:
    """A group in the replay buffer (or cooling down before it re-enters)."""

    version: int
    """Its policy version (staleness is measured from it)."""
    uses: int
    """How many times the trainer has read it."""
    priority: float
    """Its priority, computed when it last entered (with the noise drawn then)."""
    since: float
    """Unix time it entered the buffer, or, cooling down, the time it enters again."""
    cooling: bool = False
    """True while it waits out `reuse_cooldown_time` outside the buffer."""
    task: tuple[str, int, int] | None = None
    """The claimed task it was made from (claim set, epoch, index); None for none."""


class ReplayBuffer:
    """The entries of a replay buffer by slot, with the buffer's rules (module docstring)."""

    def __init__(self, entries: Mapping[Slot, Entry] | None = None) -> None:
        self.entries: dict[Slot, Entry] = dict(entries or {})
        """Read it freely; change it only through the methods below (they keep the counts)."""
        self._waiting = sum(not e.cooling for e in self.entries.values())
        self._low: list[tuple[float, float, Slot, Entry]] | None = None
        """Min-heap of waiting entries by (priority, since): the next to push out. Stale items (the slot
        since removed or changed) are skipped when popped; None until a full buffer needs it."""

    def copy(self) -> ReplayBuffer:
        return ReplayBuffer(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def waiting(self) -> int:
        """Entries in the buffer (not cooling down): what `capacity` bounds."""
        return self._waiting

    def enter(self, slot: Slot, entry: Entry, capacity: int) -> list[tuple[Slot, Entry]]:
        """Put `entry` (not cooling) at `slot`, replacing a cooling entry there; return what the capacity
        pushed out: the lowest waiting entry, or `entry` itself when its priority is lower than all."""
        if slot in self.entries:
            self.remove(slot)
        out: list[tuple[Slot, Entry]] = []
        if self._waiting >= capacity:
            low = self._lowest()
            if low is not None and self.entries[low].priority > entry.priority:
                return [(slot, entry)]
            if low is not None:
                out.append((low, self.remove(low)))
        self.entries[slot] = entry
        self._waiting += 1
        if self._low is not None:
            heapq.heappush(self._low, (entry.priority, entry.since, slot, entry))
        return out

    def _lowest(self) -> Slot | None:
        if self._low is None:
            self._low = [(e.priority, e.since, s, e) for s, e in self.entries.items() if not e.cooling]
            heapq.heapify(self._low)
        while self._low:
            _, _, slot, entry = self._low[0]
            if self.entries.get(slot) is entry:
                return slot
            heapq.heappop(self._low)
        return None

    def due(self, now: float) -> list[Slot]:
        """Cooling entries whose cooldown is over at `now`, in the order they re-enter."""
        return [s for s, e in sorted(self.entries.items(), key=lambda kv: (kv[1].since, kv[0]))
                if e.cooling and e.since <= now]

    def order(self) -> Iterator[Slot]:
        """The waiting entries in reading order: highest priority first, then the earliest entered."""
        ready = [(-e.priority, e.since, s) for s, e in self.entries.items() if not e.cooling]
        ready.sort()
        return (s for _, _, s in ready)

    def remove(self, slot: Slot) -> Entry:
        entry = self.entries.pop(slot)
        self._waiting -= not entry.cooling
        return entry

    def read(self, slot: Slot, policy: ReplayPolicy, rng: random.Random, now: float) -> Entry | None:
        """Record a read of `slot` at `now`: it leaves (returned None) unless the policy reuses groups and
        its priority after the read is a number; then it cools down until `now + reuse_cooldown_s`."""
        entry = self.remove(slot)
        uses = entry.uses + 1
        if not policy.reuses:
            return None
        priority = policy.priority(entry.version, uses, rng)
        if priority is None:
            return None
        cooled = replace(entry, uses=uses, priority=priority, since=now + float(policy.reuse_cooldown_s or 0.0),
                         cooling=True)
        self.entries[slot] = cooled
        return cooled

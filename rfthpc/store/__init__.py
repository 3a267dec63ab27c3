"""The experience store: the only channel from explorers to the trainer (docs/store.md).

Explorers write groups with `ChunkWriter`; the trainer takes groups with `StoreReader`, exactly once (with experience replay, as often as its
`rfthpc.algorithms.replay.ReplayPolicy` allows), and checkpoints its `state()` (a `ReaderState`).
"""

from rfthpc.store.gc import collect_garbage
from rfthpc.store.inspect import format_inspect, inspect_store
from rfthpc.store.reader import StoreReader, StoreTimeout
from rfthpc.store.reader_files import ReaderState
from rfthpc.store.schema import Group, StoredExperience
from rfthpc.store.writer import ChunkWriter

__all__ = [
    "ChunkWriter",
    "Group",
    "ReaderState",
    "StoreReader",
    "StoreTimeout",
    "StoredExperience",
    "collect_garbage",
    "format_inspect",
    "inspect_store",
]

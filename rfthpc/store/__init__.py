"""The experience store: the only channel from explorers to the trainer (docs/store.md).

Explorers write groups with `ChunkWriter`; the trainer takes groups with `StoreReader`, exactly once
(with experience replay, as often as its `rfthpc.algorithms.replay.ReplayPolicy` allows), and
checkpoints its `state()` (a `ReaderState`).

| module         | does                                                                             |
| -------------- | -------------------------------------------------------------------------------- |
| `schema`       | what it holds: `StoredExperience`s in `Group`s, checked                          |
| `layout`       | where it keeps things; chunk names; the experience doorbell                      |
| `chunks`       | one chunk file: whole groups in plain HDF5 arrays                                |
| `writer`       | the explorer's end: groups buffered, committed in chunks, atomically              |
| `reader`       | the trainer's end: committed groups in commit order, each exactly once            |
| `reader_files` | the trainer's reader records (progress, checkpointed state)                     |
| `gc`           | consumed chunks and stale temporary files removed                                 |
| `inspect`      | `rfthpc store inspect`: what it holds, how fast it fills and drains              |
| `audit`        | what a finished run's trainer took                                              |
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

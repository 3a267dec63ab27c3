"""The trainer's side of weight hand-off: a full snapshot every K versions, deltas in between.

The publisher keeps the bits of the version it published last (in the published dtype, in CPU
memory of trainer rank 0: one model copy, 15 GB for a 7B model in bf16; while a version is
published, each old tensor is let go once its delta is written). Each new version is
written as a delta against it (`rfthpc.weights.delta`) and, every `full_every` versions, also as a
full snapshot, in the same pass over the gathered tensors. The first version after a start (or
after a version that was already published, as a resumed trainer meets them) is a full snapshot:
there is nothing to take a delta from.

Explorers follow the deltas only; full snapshots are for explorers that start late or are
requeued, for fallback after a checksum mismatch, and for `rfthpc convert` and `rfthpc weights
materialize`.

A LoRA run publishes its adapter (PEFT layout, `published.write_adapter_dir`) whole at every version:
at a few megabytes a delta would save nothing worth a chain to rebuild.

Where explorers share the trainer's node, each version is also copied into node-local memory in the
same pass (`rfthpc.weights.node_local`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from rfthpc.weights import node_local, published
from rfthpc.weights.delta import DeltaWriter, version_checksum

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

DeltaMode = Literal["auto", "on", "off"]


def deltas_pay(mode: DeltaMode, dtype: torch.dtype) -> bool:
    """Whether versions in `dtype` are published as deltas: `auto` does for 16-bit dtypes (bf16 on
    GPUs), where an RL step leaves most bit patterns unchanged; float32 low bits change with
    almost every update, so its deltas save little (`tools/bench_weights.py`)."""
    return mode == "on" or (mode == "auto" and dtype.itemsize == 2)


@dataclass(frozen=True)
class Publication:
    """What one `publish` wrote."""

    version: int
    full_bytes: int
    """Bytes of the full snapshot (0: none written)."""
    delta_bytes: int
    """Bytes of the delta file (0: none written)."""
    seconds: float


class Publisher:
    """Publishes successive versions of one model (trainer rank 0)."""

    def __init__(self, run_dir: Path, config_dir: Path, dtype: torch.dtype, delta: DeltaMode = "auto",
                 full_every: int = 10, stripe_count: int = 0, adapter_config: Mapping[str, object] | None = None,
                 node_local_root: Path | None = None) -> None:
        """`adapter_config`: versions are LoRA adapters with this adapter_config.json (always whole).
        `node_local_root`: also copy each version there (`node_local.node_local_dir`; not for adapters)."""
        if full_every < 1:
            raise ValueError(f"full_every={full_every}: use 1 (every version full) or more")
        self.run_dir = Path(run_dir)
        self.config_dir = Path(config_dir)
        self.dtype = dtype
        self.adapter_config = adapter_config
        self.deltas = adapter_config is None and deltas_pay(delta, dtype)
        self.full_every = full_every
        self.stripe_count = stripe_count
        self._bits: dict[str, torch.Tensor] | None = None
        self._crcs: dict[str, int] = {}
        self._version: int | None = None
        self._since_full = 0
        self._staged: Path | None = None
        self.node_local_root = node_local_root if adapter_config is None else None
        if self.node_local_root is not None:
            node_local.clear(self.node_local_root)  # copies of an earlier trainer process of this run

    def publish(self, version: int, stream: published.TensorStream) -> Publication | None:
        """Publish `stream` as `version` and point `latest` at it; None (and the stream not read) if
        the version is published already (its files stay as they are)."""
        if published.is_published(self.run_dir, version):
            self._forget()
            published.point_latest(self.run_dir, version)
            return None
        start = time.perf_counter()
        names = [e.name for e in stream.entries]
        base = self._bits if self._bits is not None and sorted(self._bits) == sorted(names) else None
        full = base is None or not self.deltas or self._since_full + 1 >= self.full_every
        delta: DeltaWriter | None = None
        if base is not None and self.deltas:
            final = published.delta_file(self.run_dir, version)
            tmp = published.temporary_path(self.run_dir, f"delta_{version}", ".rfd")
            published.set_stripe(tmp, self.stripe_count)
            assert self._version is not None
            delta = DeltaWriter(tmp, final, version, self._version, version_checksum(self._crcs))
        new_bits: dict[str, torch.Tensor] = {}
        new_crcs: dict[str, int] = {}
        owned = published.TensorStream([dataclasses.replace(e, dtype=self.dtype) for e in stream.entries],
                                       self._owned(stream))
        local = (node_local.NodeLocalCopy(self.node_local_root, version, owned.entries)
                 if self.node_local_root is not None else None)

        def keep(name: str, tensor: torch.Tensor, crc: int) -> None:
            if local is not None:
                local.add(name, tensor, crc)
            if delta is not None:
                assert base is not None
                # The writer holds the base tensor until its frame is written; dropping it here keeps
                # rank 0 at about one model copy rather than two.
                delta.add(name, base.pop(name), tensor, crc, self._crcs[name])
            if self.deltas:
                new_bits[name] = tensor
            new_crcs[name] = crc

        try:
            full_bytes = 0
            if full:
                if self.adapter_config is None and self._staged is None:
                    self._staged = published.staged_config(self.run_dir, self.config_dir,
                                                           str(self.dtype).removeprefix("torch."))
                path = published.write_snapshot(self.run_dir, version, owned, self._staged or self.config_dir,
                                              self.dtype, on_tensor=keep, stripe_count=self.stripe_count,
                                              adapter_config=self.adapter_config, staged=self._staged is not None)
                full_bytes = sum(p.stat().st_size for p in path.glob("*.safetensors"))
            else:
                from rfthpc.weights.delta import tensor_crc

                for name, tensor in owned.tensors:
                    keep(name, tensor, tensor_crc(tensor))
            delta_bytes = delta.commit() if delta is not None else 0
            if local is not None:
                local.commit()  # before `latest` names the version: explorers woken by it find the copy
        except BaseException:
            if delta is not None:
                delta.abort()
            if local is not None:
                local.abort()
            self._forget()
            raise
        published.point_latest(self.run_dir, version)
        self._bits = new_bits if self.deltas else None
        self._crcs = new_crcs
        self._version = version
        self._since_full = 0 if full else self._since_full + 1
        return Publication(version, full_bytes, delta_bytes, time.perf_counter() - start)

    def close(self) -> None:
        """Keep only the newest node-local copy (the trainer ends; explorers on its node may still load it)."""
        if self.node_local_root is not None:
            node_local.prune(self.node_local_root, 1)

    def _owned(self, stream: published.TensorStream) -> Iterator[tuple[str, torch.Tensor]]:
        """The stream's tensors in the published dtype; copies where a cast would alias the source (a
        live parameter of a one-rank model), since kept bits must not change with the model."""
        for name, tensor in stream.tensors:
            cast = tensor.to(self.dtype)
            if self.deltas and cast.data_ptr() == tensor.data_ptr():
                cast = cast.clone()
            yield name, cast.contiguous()

    def _forget(self) -> None:
        """Drop the kept bits: the next version is a full snapshot."""
        self._bits, self._crcs, self._version, self._since_full = None, {}, None, 0

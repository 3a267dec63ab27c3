"""rfthpc's own trainer checkpoints: the model as a torch.distributed.checkpoint (DCP) directory.

`global_step_<N>/actor/` holds `model/` (`.metadata` + `__<rank>_<i>.distcp` files, written by
`dcp.save` of the FSDP2 model state dict), `hf_config/` (config and tokenizer) and
`rfthpc_checkpoint.json` (written last; records the dtype among others).

FSDP saves each tensor as row blocks (one per rank); each block is read and written on its own,
so memory holds one block, not the model. Anything else is loaded one tensor at a time with
`dcp.load(..., no_dist=True)` (no process group needed).
"""

from __future__ import annotations

import io
import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

from rfthpc.convert.formats import StoredTensor, parse_dtype
from rfthpc.errors import UserError
from rfthpc.trainer.checkpoint_meta import META_FILE as CHECKPOINT_META

MODEL_DIR = "model"
METADATA_FILE = ".metadata"
HF_CONFIG_DIR = "hf_config"


def is_rfthpc_checkpoint(role_dir: Path) -> bool:
    """True if `role_dir` looks like an rfthpc checkpoint (it has `model/` or `rfthpc_checkpoint.json`)."""
    return (role_dir / MODEL_DIR).is_dir() or (role_dir / CHECKPOINT_META).is_file()


def config_dir_of(role_dir: Path) -> Path:
    """The directory of an rfthpc checkpoint that holds config.json and the tokenizer."""
    return role_dir / HF_CONFIG_DIR


def _model_name(key: str, path: tuple | None) -> str:
    """The model's own name for checkpoint key `key` (nested under `path` when it was saved).

    rfthpc's trainer saves `{"model": model_state_dict}`, which DCP flattens to `model.<name>`;
    the recorded path tells that wrapper from a name that merely starts with `model.`.
    """
    if path and len(path) >= 2 and path[0] == "model":
        return ".".join(str(p) for p in path[1:])
    return key


class _FileWindow(io.RawIOBase):
    """A read-only, seekable view of bytes [offset, offset + length) of an open file.

    `torch.load` reads a saved item through it straight into the tensor's memory.
    """

    def __init__(self, f: io.BufferedReader, offset: int, length: int) -> None:
        super().__init__()
        self.f, self.offset, self.length, self.pos = f, offset, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.length}[whence]
        self.pos = max(0, base + pos)
        return self.pos

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.length - self.pos)
        if n <= 0:
            return 0
        self.f.seek(self.offset + self.pos)
        got = self.f.readinto(memoryview(buffer).cast("B")[:n])
        self.pos += got
        return got


class DcpCheckpoint:
    """An rfthpc checkpoint's model, read tensor batch by tensor batch with DCP."""

    format_name = "rfthpc (torch.distributed.checkpoint)"

    def __init__(self, role_dir: Path, direct: bool = True) -> None:
        from torch.distributed.checkpoint import FileSystemReader
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata

        self.role_dir = Path(role_dir)
        self.model_dir = self.role_dir / MODEL_DIR
        self.direct = direct
        """Read row blocks straight from the shard files where possible (False: always `dcp.load`)."""
        meta_path = self.role_dir / CHECKPOINT_META
        try:
            self.meta = json.loads(meta_path.read_text())
        except FileNotFoundError:
            raise UserError(
                f"{meta_path} is missing: this checkpoint was not finished (the trainer writes it last); "
                "convert an older step or let the trainer save again"
            ) from None
        except ValueError as e:
            raise UserError(f"{meta_path} is not valid JSON ({e}); the file is truncated or corrupt") from None
        md_path = self.model_dir / METADATA_FILE
        if not md_path.is_file():
            raise UserError(f"{md_path} is missing: the model checkpoint in {self.model_dir} is incomplete")
        try:
            metadata = FileSystemReader(self.model_dir).read_metadata()
        except Exception as e:  # noqa: BLE001 — unpickling a damaged file raises anything from EOFError on
            raise UserError(
                f"{md_path} cannot be read ({type(e).__name__}: {e}); the file is truncated or corrupt"
            ) from None
        self._check_files(metadata)
        paths = metadata.planner_data if isinstance(metadata.planner_data, dict) else {}
        self._keys: dict[str, str] = {}
        """Model tensor name -> its key in the checkpoint."""
        self._tensors = []
        for key, md in metadata.state_dict_metadata.items():
            if isinstance(md, TensorStorageMetadata):
                name = _model_name(key, paths.get(key))
                self._keys[name] = key
                self._tensors.append(StoredTensor(name, tuple(md.size), md.properties.dtype))
        if not self._tensors:
            raise UserError(f"{md_path} lists no tensors: {self.model_dir} is not a model checkpoint")
        self._plan = self._direct_plan(metadata)

    def _check_files(self, metadata) -> None:
        """Every shard file the metadata names must exist and end exactly where its last item ends.

        DCP writes the items of a file back to back, so a shorter file is truncated and a file of
        another length was written by another save (e.g. one with a different world size).
        """
        ends: dict[str, int] = {}
        for info in metadata.storage_data.values():
            ends[info.relative_path] = max(ends.get(info.relative_path, 0), info.offset + info.length)
        for name, end in sorted(ends.items()):
            path = self.model_dir / name
            if not path.is_file():
                raise UserError(
                    f"missing shard {path}: the checkpoint's .metadata names it; restore it or convert another step"
                )
            size = path.stat().st_size
            if size < end:
                raise UserError(f"{path} is truncated ({size} bytes, the checkpoint's .metadata needs {end})")
            if size != end:
                raise UserError(
                    f"{path} does not belong to this checkpoint ({size} bytes, its .metadata says {end}): "
                    "it was written by another save, e.g. one with a different world size"
                )

    def tensors(self) -> list[StoredTensor]:
        """Every tensor of the model, in the order the checkpoint lists them."""
        return list(self._tensors)

    def read(self, names: list[str]) -> Iterator[tuple[str, Iterator[torch.Tensor]]]:
        """Tensors `names` in order, each as its saved row blocks (see `_direct_plan`), else whole."""
        by_name = {t.name: t for t in self._tensors}
        for name in names:
            plan = self._plan.get(self._keys[name]) if self.direct else None
            if plan is None:
                yield name, iter([self._load_with_dcp(by_name[name])])
            else:
                yield name, self._load_items(by_name[name], plan)

    def _direct_plan(self, metadata) -> dict[str, list]:
        """For each tensor saved as row blocks (FSDP's Shard(0)): the storage entries of its blocks in order.

        DCP's own `load` decodes each saved item and copies it into the full tensor; an item that
        is a whole row block can instead be decoded and written as it is, which saves a copy and
        keeps one block in memory rather than the tensor. Tensors saved any other way (or with
        storage transforms) are left to `dcp.load`.
        """
        from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata

        plans: dict[str, list] = {}
        for fqn, md in metadata.state_dict_metadata.items():
            if not isinstance(md, TensorStorageMetadata) or len(md.size) == 0:
                continue
            chunks = sorted(md.chunks, key=lambda c: c.offsets[0])
            row = 0
            infos = []
            for c in chunks:
                info = metadata.storage_data.get(MetadataIndex(fqn, c.offsets))
                if (
                    c.offsets[0] != row
                    or any(c.offsets[1:])
                    or tuple(c.sizes[1:]) != tuple(md.size[1:])
                    or info is None
                    or getattr(info, "transform_descriptors", None)
                ):
                    break
                infos.append((tuple(c.sizes), info))
                row += c.sizes[0]
            else:
                if row == md.size[0]:
                    plans[fqn] = infos
        return plans

    def _load_items(self, t: StoredTensor, plan: list) -> Iterator[torch.Tensor]:
        for sizes, info in plan:
            path = self.model_dir / info.relative_path
            try:
                with open(path, "rb") as f:
                    block = torch.load(_FileWindow(f, info.offset, info.length), map_location="cpu", weights_only=True)
            except Exception as e:  # noqa: BLE001 — any decoding failure means a damaged file
                raise UserError(
                    f"{path}: reading {t.name} failed ({type(e).__name__}: {e}); the file is corrupt"
                ) from None
            if not isinstance(block, torch.Tensor) or tuple(block.shape) != sizes or block.dtype != t.dtype:
                raise UserError(f"{path}: the block of {t.name} there is not the {sizes} {t.dtype} its .metadata says")
            yield block
            del block

    def _load_with_dcp(self, t: StoredTensor) -> torch.Tensor:
        import torch.distributed.checkpoint as dcp

        key = self._keys[t.name]
        state = {key: torch.empty(t.shape, dtype=t.dtype)}
        try:
            with warnings.catch_warnings():
                # Loading without a process group is the intent here, not an accident.
                warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
                dcp.load(state, checkpoint_id=self.model_dir, no_dist=True)
        except Exception as e:  # noqa: BLE001 — any decoding failure means a damaged file
            raise UserError(
                f"{self.model_dir}: reading {t.name} failed ({type(e).__name__}: {e}); a shard file is corrupt"
            ) from None
        return state[key]

    def training_dtype(self) -> torch.dtype | None:
        """The `dtype` recorded in rfthpc_checkpoint.json (None when absent or `auto`)."""
        return parse_dtype(self.meta.get("dtype"), f"{self.role_dir / CHECKPOINT_META}: dtype")

    def config_dir(self) -> Path | None:
        """`hf_config/` when it holds a config.json."""
        d = config_dir_of(self.role_dir)
        return d if (d / "config.json").is_file() else None

    def release(self, block: torch.Tensor) -> None:
        """Nothing to do: a block is freed when the writer drops it."""

    def close(self) -> None:
        """Nothing stays open between reads."""

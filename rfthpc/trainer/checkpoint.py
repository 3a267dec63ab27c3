"""Resumable trainer checkpoints: `global_step_<N>/actor/` (and `critic/` for PPO).

    actor/model/                           torch.distributed.checkpoint (DCP) of the sharded model
    actor/optim/                           DCP of the optimizer state
    actor/extra_state_world_size_<W>_rank_<R>.pt   RNG states (torch.load(weights_only=True))
    actor/hf_config/                       config, generation config, tokenizer, chat template
    actor/rfthpc_checkpoint.json           step, stage, dtype, schedule, store-reader state, SFT data position, ...
                                           (written last; critic/ has its own copy)
    actor/huggingface/                     optional merged HF copy (trainer.save_hf_checkpoint)

With LoRA (`model.lora`) the actor's `model/` holds the adapter's weights only (the frozen base is
`model.model_path`), `adapter_config.json` beside it describes the adapter, and
`trainer.save_hf_checkpoint` writes the adapter in PEFT's layout to `actor/lora_adapter/` (veRL's
name); `rfthpc convert` merges it into the base for `huggingface/`.

Writing: every rank writes into `.tmp-global_step_<N>-<tag>/`; after a barrier rank 0 renames it
to `global_step_<N>` and then replaces `latest_checkpointed_iteration.txt`. A process killed at
any moment (SIGKILL included) leaves the previous checkpoint untouched and only a `.tmp-`
directory, which the next start removes; a step saved again is moved aside to `.tmp-old-` first,
and the next start puts one of the two back if a kill came between the renames. DCP reshards on
load, so a run may resume on another number of ranks (RNG states are restored only on the same
number).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import shutil
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from rfthpc.config.lora import ADAPTER_CONFIG
from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.fileops import TMP_PREFIX, fsync_dir, make_dirs, write_json_atomic, write_text_atomic
from rfthpc.trainer.checkpoint_meta import META_FILE, CheckpointMeta, write_checkpoint_meta
from rfthpc.trainer.dist import DistEnv
from rfthpc.trainer.fsdp import drain, gathered, gathered_adapter
from rfthpc.trainer.lora import trainable_names
from rfthpc.weights.published import copy_config_files, write_adapter_dir, write_hf_dir

log = logging.getLogger(__name__)

_STEP_DIR = re.compile(r"^global_step_(\d+)$")
# A checkpoint moved aside while the same step is saved again (`<tag>` names the saving process).
_MOVED_ASIDE = re.compile(re.escape(TMP_PREFIX) + r"old-global_step_(\d+)-(.+)")
LORA_ADAPTER_DIR = "lora_adapter"


@dataclass
class Part:
    """One trained model of the checkpoint (`actor` or `critic`)."""

    name: str
    model: nn.Module
    optimizer: torch.optim.Optimizer | None
    config_dir: Path
    """Model directory whose config and tokenizer files are copied to `hf_config/`."""
    adapter_config: Mapping[str, object] | None = None
    """The model is a peft model whose adapter alone trains (LoRA): only the adapter is saved, and
    this is its adapter_config.json. None: the whole model."""


def _model_state(model: nn.Module, adapter_only: bool) -> dict[str, Any]:
    """The sharded model's state dict; `adapter_only`: its trainable (LoRA adapter) tensors alone, since
    the frozen base never changes (a tied output layer, which no option of torch's leaves out, too)."""
    state = get_model_state_dict(model)
    if adapter_only:
        keep = trainable_names(model)
        state = {k: v for k, v in state.items() if k in keep}
    return state


def _complete(run: RunDir, step: int) -> bool:
    return (run.checkpoint(step) / "actor" / META_FILE).is_file()


def latest_checkpoint(run_dir: Path) -> int | None:
    """Step of the newest complete checkpoint, or None.

    `latest_checkpointed_iteration.txt` names it; a process killed between the rename and that
    file leaves a newer complete directory, which counts too (every renamed directory is complete).
    """
    run = RunDir(run_dir)
    steps = []
    with contextlib.suppress(FileNotFoundError, ValueError):
        steps.append(int(run.latest_checkpoint_file.read_text().strip()))
    with contextlib.suppress(FileNotFoundError):
        steps += [int(m[1]) for m in map(_STEP_DIR.match, os.listdir(run.root)) if m]
    complete = [s for s in steps if _complete(run, s)]
    return max(complete) if complete else None


def _rng_state() -> dict[str, Any]:
    np_state = np.random.get_state()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": (np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _extra_state_name(env: DistEnv) -> str:
    return f"extra_state_world_size_{env.world_size}_rank_{env.rank}.pt"


def _write_fsynced(path: Path, obj: Any) -> None:
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def save_checkpoint(
    run_dir: Path,
    env: DistEnv,
    parts: list[Part],
    meta: CheckpointMeta,
    save_hf: bool = False,
    hf_dtype: torch.dtype | None = None,
) -> Path:
    """Write checkpoint `meta.step` (all ranks call this) and make it the latest; return its directory.

    `meta` (rank 0's) goes to `<part>/rfthpc_checkpoint.json`. An existing
    `global_step_<step>` is replaced (the same step saved again, e.g. marking its stage finished).
    """
    step = meta.step
    run = RunDir(run_dir)
    tag = env.broadcast_object(f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tmp = run.root / f"{TMP_PREFIX}global_step_{step}-{tag}"
    if env.is_main:
        for part in parts:
            make_dirs(tmp / part.name)
    env.barrier()
    for part in parts:
        root = tmp / part.name
        dcp.save({"model": _model_state(part.model, part.adapter_config is not None)},
                 checkpoint_id=str(root / "model"))
        if part.optimizer is not None:
            dcp.save({"optim": get_optimizer_state_dict(part.model, part.optimizer)}, checkpoint_id=str(root / "optim"))
        _write_fsynced(root / _extra_state_name(env), _rng_state())
        if save_hf and part.adapter_config is not None:
            stream = gathered_adapter(part.model, env, hf_dtype or torch.float32)
            if env.is_main:
                write_adapter_dir(root / LORA_ADAPTER_DIR, stream, part.adapter_config)
        elif save_hf:
            stream = gathered(part.model, env, hf_dtype or torch.float32)
            if env.is_main:
                write_hf_dir(root / "huggingface", stream, part.config_dir)
            else:
                drain(stream)
        if env.is_main:
            if part.adapter_config is not None:
                # `rfthpc convert` learns from it that model/ is an adapter, and of which base.
                write_json_atomic(root / ADAPTER_CONFIG, dict(part.adapter_config))
            copy_config_files(part.config_dir, root / "hf_config")
            for entry in os.scandir(root / "hf_config"):
                with open(entry.path, "rb") as f:
                    os.fsync(f.fileno())
    if env.is_main:
        # Written last in each part (the actor's decides completeness): `rfthpc convert` reads the dtype.
        record = meta.written(env.world_size)
        for part in sorted(parts, key=lambda p: p.name == "actor"):
            write_checkpoint_meta(tmp / part.name, record)
    env.barrier()
    final = run.checkpoint(step)
    if env.is_main:
        for d in [tmp, *(tmp / p.name for p in parts)]:
            fsync_dir(d)
        old = None
        if final.exists():
            old = run.root / f"{TMP_PREFIX}old-global_step_{step}-{tag}"
            os.rename(final, old)
        os.rename(tmp, final)
        fsync_dir(run.root)
        write_text_atomic(run.latest_checkpoint_file, f"{step}\n")
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    env.barrier()
    return final


def load_model_weights(dcp_dir: Path, model: nn.Module, adapter_only: bool = False) -> None:
    """Load a DCP model state dict (`global_step_<N>/<part>/model`) into a sharded `model` (all ranks);
    `adapter_only`: a LoRA checkpoint, which holds the trainable (adapter) weights alone."""
    state = {"model": _model_state(model, adapter_only)}
    dcp.load(state, checkpoint_id=str(dcp_dir))
    set_model_state_dict(model, state["model"], options=StateDictOptions(strict=not adapter_only))


def load_optimizer_state(dcp_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Load a DCP optimizer state (`global_step_<N>/<part>/optim`) into `optimizer` (all ranks)."""
    state = {"optim": get_optimizer_state_dict(model, optimizer)}
    dcp.load(state, checkpoint_id=str(dcp_dir))
    set_optimizer_state_dict(model, optimizer, state["optim"])


def restore_rng(run_dir: Path, step: int, env: DistEnv) -> bool:
    """Restore this rank's RNG states from checkpoint `step` if it was written by as many ranks."""
    extra = RunDir(run_dir).checkpoint(step) / "actor" / _extra_state_name(env)
    if not extra.is_file():
        log.warning("checkpoint %d was written by another number of ranks than %d: RNG states are not restored",
                    step, env.world_size)
        return False
    _set_rng_state(torch.load(extra, weights_only=True))
    return True


def remove_temporary(run_dir: Path) -> None:
    """Finish a replacement of `global_step_<N>` that a kill interrupted, then delete the `.tmp-`
    checkpoint directories left by a killed trainer (call on rank 0 before training).

    Saving a step again moves the old directory aside before renaming the new one in. Killed between
    the two renames, the step exists only as those two directories: the new one goes in place if it
    is complete, else the old one goes back.
    """
    run = RunDir(run_dir)
    for name in os.listdir(run.root):
        m = _MOVED_ASIDE.fullmatch(name)
        if not m or run.checkpoint(int(m[1])).exists():
            continue
        new = run.root / f"{TMP_PREFIX}global_step_{m[1]}-{m[2]}"
        restored = new if (new / "actor" / META_FILE).is_file() else run.root / name
        os.rename(restored, run.checkpoint(int(m[1])))
        fsync_dir(run.root)
        log.warning("checkpoint %s: a kill interrupted its replacement; the %s copy is back in place", m[1],
                    "new" if restored == new else "previous")
    for name in os.listdir(run.root):
        if name.startswith((f"{TMP_PREFIX}global_step_", f"{TMP_PREFIX}old-global_step_")):
            shutil.rmtree(run.root / name, ignore_errors=True)


def remove_old_checkpoints(run_dir: Path, keep: int | None, protect: set[int] = frozenset()) -> list[int]:
    """Delete complete checkpoints beyond the `keep` newest (None: keep all), except `protect`; return them.

    The metadata file goes first, so a half-deleted directory is never taken for a checkpoint.
    """
    if keep is None or keep < 1:
        return []
    run = RunDir(run_dir)
    steps = sorted(int(m[1]) for m in map(_STEP_DIR.match, os.listdir(run.root)) if m and _complete(run, int(m[1])))
    removed = []
    for step in steps[:-keep]:
        if step in protect:
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(run.checkpoint(step) / "actor" / META_FILE)
        shutil.rmtree(run.checkpoint(step), ignore_errors=True)
        removed.append(step)
    return removed

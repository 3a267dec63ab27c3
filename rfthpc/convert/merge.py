"""Merge sharded trainer checkpoints into Hugging Face model directories (`<role>/huggingface/`).

For each `global_step_<N>/<role>/` to convert: open the shards (format detected), gather the
config and tokenizer (checkpoint first, `--base-model-dir` for what is missing), check the tensor
names and shapes against the model class the config names, then stream the tensors into
safetensors shards inside `<role>/.tmp-huggingface.<tag>/` and rename that directory into place.
An interrupted or failed conversion leaves no `huggingface/` behind (or the previous one intact).
A LoRA run's checkpoint (`rfthpc.convert.lora`) is merged into its base model the same way, or, with
`--adapter-only`, exported as the adapter alone into `<role>/lora_adapter/`.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from rfthpc.convert import lora
from rfthpc.convert.formats import (
    ROLES,
    ShardedCheckpoint,
    checkpoint_config_dir,
    find_step_dirs,
    no_shards_error,
    open_checkpoint,
    parse_dtype,
)
from rfthpc.convert.hfdir import (
    UnknownModel,
    config_dtype,
    config_files,
    has_tokenizer,
    model_layout,
    tied_output_key,
    write_config_files,
)
from rfthpc.errors import UserError
from rfthpc.sharedfs.fileops import TMP_PREFIX, fsync_dir, temporary_name
from rfthpc.weights.safetensors_write import TensorEntry, has_complete_adapter, has_complete_weights, write_shards

HF_DIR = "huggingface"
LORA_ADAPTER_DIR = "lora_adapter"
"""Where `--adapter-only` exports a LoRA checkpoint's adapter (veRL's name; the trainer writes it too)."""
_REPLACED = "huggingface-replaced"
DEFAULT_MAX_SHARD_SIZE = 5 * 10**9


@dataclass
class ConvertOptions:
    """How to convert: see `rfthpc convert --help`."""

    base_model_dir: Path | None = None
    """Config and tokenizer for checkpoints that lack them."""
    force: bool = False
    """Convert again even where `huggingface/` already holds complete weights."""
    dtype: str | None = None
    """bf16, fp16 or fp32; None: the training dtype the checkpoint records, else config.json's."""
    roles: tuple[str, ...] = ("actor",)
    """Which models of each step to convert; "critic" must exist when named alone."""
    max_shard_size: int = DEFAULT_MAX_SHARD_SIZE
    """Bytes per safetensors file; above it the weights are split and indexed."""
    progress: bool = True
    """Show a progress bar per checkpoint."""
    adapter_only: bool = False
    """LoRA checkpoints: export the adapter (PEFT layout) to `lora_adapter/` instead of merging it."""


@dataclass
class Outcome:
    """What happened to one `global_step_<N>/<role>`."""

    role_dir: Path
    status: Literal["converted", "skipped", "failed"]
    detail: str
    notes: list[str] = field(default_factory=list)


def _label(role_dir: Path) -> str:
    return f"{role_dir.parent.name}/{role_dir.name}"


def convert_checkpoints(
    checkpoint_dir: str | Path, options: ConvertOptions, report: Callable[[Outcome], None] | None = None
) -> list[Outcome]:
    """Convert every checkpoint `checkpoint_dir` names; return (and `report`) one outcome per role dir.

    Before anything is converted, every checkpoint that lacks a config.json is listed in one error
    when no `--base-model-dir` is given. A checkpoint that fails (bad shard, mismatch) is reported
    and the others are still converted.
    """
    base = _check_base(options.base_model_dir)
    outcomes: list[Outcome] = []
    todo: list[Path] = []
    for step in find_step_dirs(checkpoint_dir):
        for role in options.roles:
            role_dir = step / role
            if not role_dir.is_dir():
                # With several roles (`all`), a run without a critic is normal; a role named alone must exist.
                if len(options.roles) == 1 or role == "actor":
                    outcomes.append(Outcome(role_dir, "failed", f"{role_dir} does not exist"))
                continue
            _recover_interrupted_swap(role_dir)
            _remove_stale_staging(role_dir)
            no_shards = no_shards_error(role_dir)
            if options.adapter_only and no_shards is None and not lora.is_lora_checkpoint(role_dir):
                outcomes.append(Outcome(role_dir, "failed", "--adapter-only: not a LoRA run's checkpoint (it has no "
                                                            "adapter_config.json); convert it without the option"))
            elif not options.force and _converted(role_dir, options):
                outcomes.append(Outcome(role_dir, "skipped", "already converted (--force converts again)"))
            elif no_shards is not None:
                outcomes.append(Outcome(role_dir, "failed", str(no_shards)))
            else:
                todo.append(role_dir)
    if base is None:
        lacking = [d for d in todo if checkpoint_config_dir(d) is None and not lora.is_lora_checkpoint(d)]
        if lacking:
            raise UserError(
                f"{len(lacking)} checkpoint(s) have no config.json (hf_config/ or huggingface/): "
                f"{', '.join(_label(d) for d in lacking)}; pass --base-model-dir with the model they were trained from"
            )
    for o in outcomes:
        if report:
            report(o)
    for role_dir in todo:
        try:
            detail, notes = convert_role(role_dir, base, options)
            outcome = Outcome(role_dir, "converted", detail, notes)
        except UserError as e:
            outcome = Outcome(role_dir, "failed", str(e))
        outcomes.append(outcome)
        if report:
            report(outcome)
    return outcomes


def _converted(role_dir: Path, options: ConvertOptions) -> bool:
    """Whether the output this conversion would write is there already (complete)."""
    if options.adapter_only:
        return has_complete_adapter(role_dir / LORA_ADAPTER_DIR)
    return has_complete_weights(role_dir / HF_DIR)


def _check_base(base: Path | None) -> Path | None:
    if base is None:
        return None
    base = Path(base).expanduser().absolute()
    if not (base / "config.json").is_file():
        raise UserError(f"--base-model-dir {base} has no config.json; name a Hugging Face model directory")
    return base


def _convert_lora(role_dir: Path, base: Path | None, options: ConvertOptions) -> tuple[str, list[str]]:
    """A LoRA checkpoint merged into `huggingface/`, or its adapter into `lora_adapter/`."""
    final = role_dir / (LORA_ADAPTER_DIR if options.adapter_only else HF_DIR)
    dtype = parse_dtype(options.dtype, "--dtype")
    staging = temporary_name(final)
    staging.mkdir()
    try:
        if options.adapter_only:
            detail = lora.write_adapter(role_dir, staging, dtype)
        else:
            detail = lora.write_merged(role_dir, staging, base, dtype, options.max_shard_size)
        _seal(staging, like=role_dir)
        _publish(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return f"{detail} -> {final}", []


def convert_role(role_dir: Path, base: Path | None, options: ConvertOptions) -> tuple[str, list[str]]:
    """Merge the model in `role_dir` into `role_dir/huggingface/` (a LoRA checkpoint: see
    `rfthpc.convert.lora`); return a summary and notes."""
    if lora.is_lora_checkpoint(role_dir):
        return _convert_lora(role_dir, base, options)
    final = role_dir / HF_DIR
    source = open_checkpoint(role_dir)
    notes: list[str] = []
    try:
        # A previous output (or veRL's huggingface/) also carries the config when --force redoes a step.
        files = config_files([d for d in (source.config_dir(), final, base) if d is not None])
        if "config.json" not in files:
            raise UserError(
                f"{_label(role_dir)} has no config.json; pass --base-model-dir with the model it was trained from"
            )
        if not has_tokenizer(files):
            notes.append("no tokenizer files found; pass --base-model-dir to add them")
        dtype = parse_dtype(options.dtype, "--dtype") or source.training_dtype() or config_dtype(files["config.json"])
        staging = temporary_name(final)
        staging.mkdir()
        try:
            write_config_files(staging, files, dtype, value_model=role_dir.name == "critic")
            entries = _entries(source, staging, dtype, files["config.json"], notes)
            total = sum(e.nbytes for e in entries)
            with _progress(total, _label(role_dir), options.progress) as bar:
                written = write_shards(
                    staging, entries, source.read([e.name for e in entries]), options.max_shard_size, bar.update,
                    source.release,
                )
            _seal(staging, like=role_dir)
            _publish(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    finally:
        source.close()
    n_shards = len([w for w in written if w.endswith(".safetensors")])
    dtypes = sorted({str(e.dtype).removeprefix("torch.") for e in entries})
    detail = (
        f"{source.format_name}: {len(entries)} tensors, {total / 2**20:.1f} MiB {'/'.join(dtypes)} "
        f"in {n_shards} file(s) -> {final}"
    )
    return detail, notes


def _entries(
    source: ShardedCheckpoint, hf_dir: Path, dtype: torch.dtype | None, config_path: Path, notes: list[str]
) -> list[TensorEntry]:
    """The tensors to write, checked against the model the config describes, in checkpoint order."""
    stored = source.tensors()
    try:
        layout = model_layout(hf_dir)
    except UnknownModel as e:
        notes.append(f"tensor names not checked against the config: {e}")
        tied = tied_output_key(hf_dir / "config.json")
        keep = [t for t in stored if t.name != tied]
    else:
        names = {t.name for t in stored}
        missing = [k for k in layout.shapes if k not in names]
        unexpected = [t.name for t in stored if t.name not in layout.shapes and t.name not in layout.aliases]
        wrong = [
            f"{t.name} {t.shape} (config: {layout.shapes[t.name]})"
            for t in stored
            if t.name in layout.shapes and t.shape != layout.shapes[t.name]
        ]
        problems = []
        if missing:
            problems.append(f"{len(missing)} missing (e.g. {missing[0]})")
        if unexpected:
            problems.append(f"{len(unexpected)} unexpected (e.g. {unexpected[0]})")
        if wrong:
            problems.append(f"{len(wrong)} of another shape (e.g. {wrong[0]})")
        if problems:
            raise UserError(
                f"{source.role_dir}: the checkpoint's tensors do not fit the {layout.architecture} described by "
                f"{config_path}: {'; '.join(problems)}; the config (or --base-model-dir) is not this checkpoint's model"
            )
        keep = [t for t in stored if t.name in layout.shapes]
    return [
        TensorEntry(t.name, t.shape, dtype if dtype is not None and t.dtype.is_floating_point else t.dtype)
        for t in keep
    ]


def _progress(total: int, label: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(
        total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=label, disable=not enabled, file=sys.stderr
    )


def _seal(staging: Path, like: Path) -> None:
    """fsync every file and give the output the permissions of the checkpoint directory it joins."""
    mode = like.stat().st_mode
    for p in staging.iterdir():
        with open(p, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(p, mode & 0o666)
    os.chmod(staging, mode & 0o7777)
    fsync_dir(staging)


def _publish(staging: Path, final: Path) -> None:
    """Rename the finished `staging` directory to `final`, replacing a previous one."""
    if final.exists():
        # Directories cannot be replaced in one rename: move the old one aside first. A crash
        # between the two renames is undone by `_recover_interrupted_swap`.
        replaced = temporary_name(final.with_name(_REPLACED))
        os.rename(final, replaced)
        os.rename(staging, final)
        shutil.rmtree(replaced, ignore_errors=True)
    else:
        os.rename(staging, final)
    fsync_dir(final.parent)


def _recover_interrupted_swap(role_dir: Path) -> None:
    """Put back a `huggingface/` that was moved aside by a conversion killed before its second rename."""
    final = role_dir / HF_DIR
    if final.exists():
        return
    aside = sorted(role_dir.glob(f"{TMP_PREFIX}{_REPLACED}.*"), key=lambda p: p.stat().st_mtime)
    if aside:
        os.rename(aside[-1], final)


def _remove_stale_staging(role_dir: Path) -> None:
    """Delete temporary output of conversions on this host whose process is gone (killed -9)."""
    host = socket.gethostname()
    for p in [*role_dir.glob(f"{TMP_PREFIX}{HF_DIR}*"), *role_dir.glob(f"{TMP_PREFIX}{LORA_ADAPTER_DIR}*")]:
        try:
            tag = p.name[len(TMP_PREFIX) :].split(".", 1)[1]  # .tmp-<name>.<host>-<pid>-<uuid>
            owner, pid, _ = tag.rsplit("-", 2)
            alive = owner != host or _pid_alive(int(pid))
        except (IndexError, ValueError):
            continue
        if not alive:
            shutil.rmtree(p, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def roles_for(choice: str) -> tuple[str, ...]:
    """The role directories a `--role` choice converts."""
    return ROLES if choice == "all" else (choice,)

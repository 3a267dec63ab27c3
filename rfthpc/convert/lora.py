"""LoRA checkpoints (`model.lora`): the adapter merged into its base model, or the adapter alone.

A LoRA run's `global_step_<N>/actor/` holds the adapter's weights only (`model/`, under the peft
model's state-dict names), its `adapter_config.json` (which names the base model) and the base
model's config in `hf_config/`. Merging reads the base model's weights from `--base-model-dir`, or
else from the directory the adapter config names, applies the adapter with peft and writes a plain
Hugging Face model; `--adapter-only` writes the adapter in PEFT's layout (adapter_config.json,
adapter_model.safetensors), as the trainer publishes it.

Merging holds the base model in memory once (peft merges layer by layer, in place).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rfthpc.config.lora import ADAPTER_CONFIG, read_adapter_config
from rfthpc.convert.hfdir import tied_output_key
from rfthpc.convert.rfthpc_dcp import DcpCheckpoint, config_dir_of, is_rfthpc_checkpoint
from rfthpc.errors import UserError
from rfthpc.weights.published import TensorStream, write_adapter_dir, write_hf_dir


def is_lora_checkpoint(role_dir: Path) -> bool:
    """True for an rfthpc checkpoint of a LoRA run (its model is an adapter)."""
    return is_rfthpc_checkpoint(role_dir) and (Path(role_dir) / ADAPTER_CONFIG).is_file()


def _adapter(role_dir: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor], DcpCheckpoint]:
    """The adapter config and the adapter's tensors (peft model names) of LoRA checkpoint `role_dir`."""
    try:
        config = read_adapter_config(role_dir)
    except ValueError as e:
        raise UserError(str(e)) from None
    source = DcpCheckpoint(role_dir)
    try:
        names = [t.name for t in source.tensors()]
        tensors = {name: torch.cat(list(blocks)) for name, blocks in source.read(names)}
    finally:
        source.close()
    return config, tensors, source


def _peft_model(role_dir: Path, config_dir: Path, weights_dir: Path | None):
    """A peft model of the base whose config is in `config_dir`, with the adapter of checkpoint
    `role_dir`: on the meta device (names only), or with the base's weights from `weights_dir`."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    lora = LoraConfig.from_pretrained(str(role_dir))
    if weights_dir is None:
        with torch.device("meta"):
            base = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(config_dir), dtype=torch.float32)
    else:
        base = AutoModelForCausalLM.from_pretrained(weights_dir, config=AutoConfig.from_pretrained(config_dir),
                                                    dtype=torch.float32)
    return get_peft_model(base, lora)


def base_model_dir(role_dir: Path, adapter_config: dict[str, Any], given: Path | None) -> Path:
    """Where the base model's weights are: `--base-model-dir`, else the adapter config's base model."""
    named = given or adapter_config.get("base_model_name_or_path")
    path = Path(str(named)).expanduser() if named else None
    if path is None or not (path / "config.json").is_file():
        raise UserError(
            f"{role_dir} holds a LoRA adapter; merging it needs its base model's weights, but "
            f"{str(path) if path else 'no base model'} is not a model directory: pass --base-model-dir with the model "
            "the run trained (model.model_path), or --adapter-only to export the adapter alone"
        )
    return path


def write_merged(role_dir: Path, out: Path, given_base: Path | None, dtype: torch.dtype | None,
                 max_shard_size: int) -> str:
    """Write the base model with the checkpoint's adapter merged in, as a Hugging Face directory in
    `out` (weights in `dtype`, default the training dtype); return a summary."""
    config, tensors, source = _adapter(role_dir)
    base = base_model_dir(role_dir, config, given_base)
    config_dir = config_dir_of(role_dir) if (config_dir_of(role_dir) / "config.json").is_file() else base
    model = _peft_model(role_dir, config_dir, base)
    result = model.load_state_dict(tensors, strict=False)
    missing = [k for k in result.missing_keys if ".lora_" in k]
    if missing or result.unexpected_keys:
        raise UserError(f"{role_dir}: the adapter does not fit its adapter_config.json on {base}: missing "
                        f"{missing[:3]}, unexpected {sorted(result.unexpected_keys)[:3]}")
    merged = model.merge_and_unload()
    tied = tied_output_key(config_dir / "config.json")
    state = {k: v for k, v in merged.state_dict().items() if k != tied}
    dtype = dtype or source.training_dtype() or torch.float32
    write_hf_dir(out, TensorStream.of(state, dtype), config_dir, max_shard_bytes=max_shard_size)
    return (f"LoRA adapter (rank {config['r']}, {len(tensors)} tensors) merged into {base}: {len(state)} tensors "
            f"{str(dtype).removeprefix('torch.')}")


def write_adapter(role_dir: Path, out: Path, dtype: torch.dtype | None) -> str:
    """Write the checkpoint's adapter in PEFT's layout into `out`; return a summary."""
    from rfthpc.trainer.lora import peft_state

    config, tensors, source = _adapter(role_dir)
    model = _peft_model(role_dir, config_dir_of(role_dir), None)
    dtype = dtype or source.training_dtype() or torch.float32
    write_adapter_dir(out, TensorStream.of(peft_state(model, tensors), dtype), config)
    return f"LoRA adapter (rank {config['r']}): {len(tensors)} tensors {str(dtype).removeprefix('torch.')}"

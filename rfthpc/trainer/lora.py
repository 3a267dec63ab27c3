"""LoRA on the sharded policy (`model.lora`): a peft adapter trains, the base model stays frozen.

The adapter is added to the model before FSDP2 shards it, so every decoder block is one FSDP2 unit
holding frozen base weights and trainable adapter weights side by side; only the adapter gets
gradients and optimizer state. The KL reference is the same model with the adapter switched off
(`AdapterDisabled`): no second copy of the base is built.

What leaves the trainer is the adapter alone, in PEFT's layout: `adapter_config.json` and the
adapter's tensors under PEFT's names (no adapter name: `...q_proj.lora_A.weight`), which peft's
`PeftModel.from_pretrained` and vLLM's LoRA loader read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rfthpc.config.lora import ADAPTER_WEIGHTS, LoRASettings


def add_adapter(model: nn.Module, lora: LoRASettings) -> nn.Module:
    """`model` wrapped in a peft model with a new adapter (B = 0: the output is the model's own);
    every base weight is frozen. Works on the meta device too (nothing is allocated)."""
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(**lora.peft_kwargs()))


def load_adapter_weights(model: nn.Module, path: Path) -> None:
    """Copy the adapter weights of PEFT directory `path` into peft model `model`'s adapter."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    result = set_peft_model_state_dict(model, load_file(str(Path(path) / ADAPTER_WEIGHTS)))
    if result.unexpected_keys:
        raise ValueError(f"the adapter in {path} does not fit model.lora's layers: unexpected "
                         f"{sorted(result.unexpected_keys)[:3]}")


def adapter_config(model: nn.Module, base_model: Path) -> dict[str, Any]:
    """The adapter_config.json of `model`'s adapter (for inference, on base model `base_model`)."""
    config = model.peft_config["default"].to_dict()  # type: ignore[union-attr,index]
    config.update(base_model_name_or_path=str(base_model), inference_mode=True)
    # Sets (peft's target_modules once resolved) in a stable order, so equal adapters get equal files.
    return json.loads(json.dumps(config, default=lambda v: sorted(v) if isinstance(v, set) else str(v)))


def trainable_names(model: nn.Module) -> set[str]:
    """State-dict names of the adapter's parameters (the only trainable ones)."""
    return {name for name, p in model.named_parameters() if p.requires_grad}


def peft_state(model: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapter tensors `state` (under `model`'s state-dict names) under the names of PEFT's files."""
    from peft import get_peft_model_state_dict

    return get_peft_model_state_dict(model, state_dict=state)


class AdapterDisabled:
    """The policy with its adapter switched off for each call: the frozen base model, LoRA's KL
    reference (veRL's `ref_in_actor`). Called like the model; every rank must call it alike (FSDP2)."""

    def __init__(self, policy: nn.Module) -> None:
        self.policy = policy

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # peft switches an adapter off and on by its parameters' requires_grad, and FSDP2 copies that
        # flag from the sharded parameters at every unshard: switch while the sharded ones are the
        # module's (one rank keeps the unsharded ones after a forward), or the adapter stays frozen.
        _reshard(self.policy)
        with self.policy.disable_adapter():  # type: ignore[operator]
            try:
                return self.policy(*args, **kwargs)
            finally:
                _reshard(self.policy)

    @property
    def training(self) -> bool:
        """The policy's mode (the forward passes read it)."""
        return self.policy.training

    @property
    def is_gradient_checkpointing(self) -> bool:
        """Whether the policy drops activations for recomputation (the forward passes read it)."""
        return bool(getattr(self.policy, "is_gradient_checkpointing", False))


def _reshard(model: nn.Module) -> None:
    """Register the sharded parameters of every FSDP2 unit of `model` (freeing unsharded copies)."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()

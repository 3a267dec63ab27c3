"""Sharded models: a Hugging Face directory -> an FSDP2 (`fully_shard`) module on every rank.

Every rank builds the model on the meta device (no memory), shards each decoder layer and then the
root, allocates only its own shards on its device, and receives the weights from rank 0, which
alone reads the safetensors. So a node's CPU memory holds one full copy, not one per GPU.

Precision: parameters (and the optimizer state) stay float32; on GPU the forward and backward
run in bfloat16 (`model.dtype: auto` or bfloat16) with gradients reduced in float32 (FSDP2's
MixedPrecisionPolicy). On CPU everything is float32 (no fast bfloat16 there).

One process computing in float32 without offloading (`rfthpc run` on a CPU) has nothing to shard,
gather or cast: it gets the model unwrapped, which spares FSDP2's hooks and DTensor dispatch on
every parameter (a fifth of a demo step's forward, backward and optimizer step). Names, state dicts
and checkpoints are the same either way.

LoRA (`model.lora`): the adapter is added before sharding (`rfthpc.trainer.lora`), so each block's
FSDP2 unit holds its frozen base weights and its trainable adapter weights; rank 0's copy gets the
same adapter (and the starting adapter's weights) before the weights are sent out.
"""

from __future__ import annotations

import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeVar

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
    register_fsdp_forward_method,
)

from rfthpc.config.lora import LoRASettings
from rfthpc.errors import UserError
from rfthpc.trainer import packed_attention, sequence_parallel
from rfthpc.trainer.dist import DistEnv
from rfthpc.weights.published import TensorStream
from rfthpc.weights.publisher import Publication, Publisher

ModelKind = Literal["causal_lm", "value"]
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
_ROOT_CALL = "rfthpc_root_call"
T = TypeVar("T")


def compute_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The dtype of forward/backward for `model.dtype`: auto is bfloat16 on GPU, float32 on CPU."""
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[dtype]


def _auto_class(kind: ModelKind):
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    return AutoModelForCausalLM if kind == "causal_lm" else AutoModelForTokenClassification


def _load_config(path: Path, kind: ModelKind):
    from transformers import AutoConfig

    if not Path(path).is_dir():
        raise UserError(
            f"model directory {path} does not exist; set model.model_path (or model.critic_model_path) "
            "to a local Hugging Face model directory"
        )
    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise UserError(f"{path} is not a Hugging Face model directory a trainer can load: {e}") from None
    if kind == "value":
        config.num_labels = 1
        # transformers' token-classification head drops 10 % of its inputs by default: values would
        # be noisy, and differ with how a batch is split (veRL's critic sets it to 0 too).
        config.classifier_dropout = 0.0
    config.use_cache = False
    return config


def layer_classes(model: nn.Module) -> set[str]:
    """Names of the block classes FSDP2 shards one by one (the model's `_no_split_modules`)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    if not names:
        raise UserError(
            f"{type(model).__name__} does not name its transformer blocks (_no_split_modules); "
            "rfthpc shards models per block and supports Hugging Face decoder models"
        )
    return names


def build_sharded_model(
    path: Path | str,
    env: DistEnv,
    *,
    kind: ModelKind = "causal_lm",
    dtype: str = "auto",
    gradient_checkpointing: bool = False,
    trainable: bool = True,
    cpu_offload: bool = False,
    lora: LoRASettings | None = None,
) -> nn.Module:
    """The model in `path`, sharded over every rank with FSDP2, weights loaded from rank 0.

    `kind="value"` builds a token-classification model with one label (a value head, as veRL's
    critic; the head is freshly initialised when `path` is a causal LM). Non-trainable models
    (the frozen reference) get `requires_grad=False` and eval mode. `cpu_offload` keeps parameters,
    gradients and optimizer state in CPU memory between uses (FSDP2's CPUOffloadPolicy; GPU only).
    `lora`: a peft model whose adapter alone trains (`rfthpc.trainer.lora`). With a sequence-parallel
    group in `env`, the model attends across it (`sequence_parallel`); FSDP2 still shards over every rank.
    """
    path = Path(path)
    param_dtype = compute_dtype(dtype, env.device)
    if env.world_size == 1 and env.sequence is None and param_dtype == torch.float32 and not cpu_offload:
        return _plain_model(path, env, kind, gradient_checkpointing and trainable, trainable, lora)
    if kind == "value":
        # A token-classification head returns a view; the trainer never modifies outputs in place,
        # which is what FSDP2's warning is about.
        warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    config = _load_config(path, kind)
    auto = _auto_class(kind)
    with torch.device("meta"):
        model = auto.from_config(config, dtype=torch.float32)
    packed_attention.adopt(model)
    if env.sequence is not None:
        sequence_parallel.adopt(model, env.sequence.size)
    if gradient_checkpointing and trainable:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if lora is not None:
        from rfthpc.trainer import lora as adapters

        model = adapters.add_adapter(model, lora)
    mesh = init_device_mesh(env.device.type, (env.world_size,))
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32) if param_dtype != torch.float32 \
        else MixedPrecisionPolicy()
    blocks = layer_classes(model)
    # With one rank a "shard" is the whole parameter: freeing it after the forward only forces a
    # second copy for the backward.
    reshard = env.world_size > 1
    offload = CPUOffloadPolicy() if cpu_offload and env.device.type != "cpu" else OffloadPolicy()
    for module in model.modules():
        if type(module).__name__ in blocks:
            fully_shard(module, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard, offload_policy=offload)
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard, offload_policy=offload)
    _allow_root_calls(model)
    # Offloaded shards live in CPU memory and FSDP2 moves them to the GPU for each use; buffers
    # (rotary frequencies) are not FSDP2's and must be on the GPU.
    model.to_empty(device="cpu" if isinstance(offload, CPUOffloadPolicy) else env.device)
    for module in model.modules():
        for name, buf in module.named_buffers(recurse=False):
            module.register_buffer(name, buf.to(env.device), persistent=name not in module._non_persistent_buffers_set)
    _load_from_rank0(model, path, auto, config, env, lora)
    if not trainable:
        model.requires_grad_(False)
        model.eval()
    else:
        model.train()
    return model


def _plain_model(path: Path, env: DistEnv, kind: ModelKind, gradient_checkpointing: bool, trainable: bool,
                 lora: LoRASettings | None) -> nn.Module:
    """The model in `path` for a single float32 process, unwrapped: built as rank 0 builds the copy
    it sends out in the sharded case (same seed, same adapter), so the weights are the same."""
    config = _load_config(path, kind)
    auto = _auto_class(kind)
    # Seeded so a freshly initialised value head (and adapter) is the same in every run.
    torch.manual_seed(0)
    model = auto.from_pretrained(path, config=config, dtype=torch.float32)
    packed_attention.adopt(model)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if lora is not None:
        from rfthpc.trainer import lora as adapters

        model = adapters.add_adapter(model, lora)
        if lora.init_path is not None:
            adapters.load_adapter_weights(model, lora.init_path)
    model.to(env.device)
    if not trainable:
        model.requires_grad_(False)
        model.eval()
    else:
        model.train()
    return model


def _root_call(self: nn.Module, fn: Callable[[], T]) -> T:
    """`fn()`, run as a forward of the module it is bound to."""
    return fn()


def _allow_root_calls(model: nn.Module) -> None:
    """Give the sharded `model` a forward method that runs any function (`in_root_forward`)."""
    setattr(model, _ROOT_CALL, types.MethodType(_root_call, model))
    register_fsdp_forward_method(model, _ROOT_CALL)


def in_root_forward(model: nn.Module, fn: Callable[[], T]) -> T:
    """`fn()` run as a forward of the root module `model`: under FSDP2 the root's own parameters
    (embedding, final norm, LM head) are whole inside a forward and sharded DTensors outside it, so a
    computation that uses them apart from `model(...)` (the LM head applied in chunks) runs here.
    The function is passed as a closure, not through FSDP2's input casting: a float32 tensor it uses
    (the sampling temperature) stays float32 under bfloat16 mixed precision. Plain models just call it."""
    call = getattr(model, _ROOT_CALL, None)
    return fn() if call is None else call(fn)


def _load_from_rank0(model: nn.Module, path: Path, auto, config, env: DistEnv, lora: LoRASettings | None) -> None:
    """Fill the sharded `model` with the weights in `path` (and `lora`'s adapter): rank 0 reads,
    every rank gets its shards.

    Buffers that are not in the state dict (rotary frequencies) are recomputed by the model's
    constructor on rank 0 and broadcast, since `to_empty` left them uninitialised.
    """
    full: dict[str, torch.Tensor] = {}
    buffers: dict[str, torch.Tensor] = {}
    if env.is_main:
        # Seeded so a freshly initialised value head is the same in every run.
        torch.manual_seed(0)
        source = auto.from_pretrained(path, config=config, dtype=torch.float32)
        if lora is not None:
            from rfthpc.trainer import lora as adapters

            source = adapters.add_adapter(source, lora)
            if lora.init_path is not None:
                adapters.load_adapter_weights(source, lora.init_path)
        full = source.state_dict()
        buffers = {k: v for k, v in source.named_buffers()}
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    for name, buf in model.named_buffers():
        if env.is_main:
            buf.copy_(buffers[name].to(buf.device))
        dist.broadcast(buf, src=0)


def gathered(model: nn.Module, env: DistEnv, dtype: torch.dtype, only: set[str] | None = None) -> TensorStream:
    """The unsharded weights of `model` (those named in `only`, if given), one tensor at a time, stored
    in `dtype` (tied aliases left out).

    Every rank must consume the stream in full (each tensor is an all-gather); the tensors are
    meaningful on rank 0. With one rank the local shard is the whole tensor: nothing is copied.
    """
    from torch.distributed.tensor import DTensor

    from rfthpc.weights.safetensors_write import TensorEntry

    # FSDP2 shards parameters in place and keeps their names: the module's own state dict has the
    # Hugging Face names, at a fifth of the cost of get_model_state_dict's name bookkeeping.
    state = model.state_dict()
    skip = tied_keys(model)
    names = sorted(k for k in state if k not in skip and (only is None or k in only))

    def full(t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, DTensor):
            t = t.to_local() if t.device_mesh.size() == 1 else t.full_tensor()
        return t.detach().to("cpu")

    return TensorStream([TensorEntry(k, tuple(state[k].shape), dtype) for k in names],
                        ((k, full(state[k])) for k in names))


def gathered_adapter(model: nn.Module, env: DistEnv, dtype: torch.dtype) -> TensorStream:
    """The adapter of peft model `model`, unsharded, under the names of PEFT's files, stored in
    `dtype` (every rank takes part; rank 0 gets the tensors, the others an empty stream)."""
    from rfthpc.trainer import lora as adapters

    full = dict(gathered(model, env, dtype, adapters.trainable_names(model)).tensors)
    return TensorStream.of(adapters.peft_state(model, full), dtype) if env.is_main else TensorStream([], [])


def drain(stream: TensorStream) -> None:
    """Take part in the collectives of a stream whose tensors this rank does not write."""
    for _ in stream.tensors:
        pass


def tied_keys(model: nn.Module) -> set[str]:
    """State-dict keys that alias another weight (e.g. lm_head with tied embeddings): HF files omit them."""
    config = getattr(model, "config", None)
    if not getattr(config, "tie_word_embeddings", False):
        return set()
    tied = getattr(model, "_tied_weights_keys", None) or {}
    return set(tied.keys() if isinstance(tied, dict) else tied)


def vocab_size(model: nn.Module) -> int:
    """Rows of the input embedding: token ids must be below this."""
    return int(model.get_input_embeddings().num_embeddings)


def publish_model(model: nn.Module, env: DistEnv, run_dir: Path, step: int, publisher: Publisher | None,
                  adapter: bool = False) -> Publication | None:
    """Publish the sharded `model` as version `step` (all ranks gather; rank 0's `publisher` writes a
    full snapshot or a delta; `adapter`: the LoRA adapter alone); what was written on rank 0, None
    elsewhere or if the version was published already (its files are kept)."""
    from rfthpc.weights import published

    exists = env.broadcast_object(published.is_published(run_dir, step) if env.is_main else None)
    assert publisher is not None or not env.is_main, "rank 0 publishes"
    dtype = publisher.dtype if publisher is not None else torch.float32
    if adapter:
        # Small enough to gather whole: the ranks gather even if rank 0 then keeps what it has.
        stream = gathered_adapter(model, env, dtype)
        return publisher.publish(step, stream) if publisher is not None else None
    stream = gathered(model, env, dtype)
    if env.is_main:
        assert publisher is not None
        return publisher.publish(step, stream)
    if not exists:
        drain(stream)
    return None

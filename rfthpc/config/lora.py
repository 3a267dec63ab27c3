"""`model.lora`: train a LoRA adapter (peft) on the frozen policy, and hand explorers the adapter only.

Trinity-RFT's `model.lora_configs` (one entry), veRL's `actor_rollout_ref.model.lora_rank` /
`lora_alpha` / `target_modules` / `exclude_modules` / `lora_adapter_path` and ROLL's
`actor_train.model_args.lora_*` are read into this one section (`rfthpc.dialects`). The checks here read
only the model's config.json and an adapter's adapter_config.json: validating a config imports
neither torch nor peft.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

ALL_LINEAR = "all-linear"
"""peft's name for every linear layer but the output layer."""

VLLM_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The values vLLM accepts for `max_lora_rank`; an engine serves adapters of rank up to the one set."""

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


@dataclass
class LoRAConfig:
    """A LoRA adapter trained instead of the model's weights (Trinity-RFT's `model.lora_configs[0]`)."""

    name: str | None = None
    """Name of the adapter in the rollout engine (vLLM's LoRA name; default `policy`)."""
    path: str | None = None
    """A PEFT adapter directory (adapter_config.json, adapter_model.safetensors) to start from; its rank,
    alpha and target modules are then the adapter's (veRL's `lora_adapter_path`). Default: a new adapter
    whose output is zero, so training starts from the model itself."""
    lora_rank: int = 32
    """Rank r of each adapter's low-rank update B A (A: r x in, B: out x r)."""
    lora_alpha: float = 32
    """Scale of the update: the layer computes W x + (lora_alpha / r) B A x."""
    lora_dropout: float = 0.0
    """Dropout on the adapter's input while training (ROLL's `lora_dropout`)."""
    target_modules: str | list[str] = ALL_LINEAR
    """Layers that get an adapter: `all-linear` (every linear layer of the decoder blocks), a list of
    layer names (a name matches a layer whose dotted path ends with it, e.g. q_proj), or one regular
    expression matched against whole dotted paths."""
    exclude_modules: str | list[str] | None = None
    """Layers left without an adapter, matched as `target_modules`."""
    lora_dtype: Literal["auto", "bfloat16", "float16"] = "auto"
    """Dtype of the adapter in the vLLM engine (vLLM's `lora_dtype`; auto: the engine's dtype)."""


def _names(value: str | list[str] | None) -> str | tuple[str, ...] | None:
    return tuple(value) if isinstance(value, list) else value


@dataclass(frozen=True)
class LoRASettings:
    """The adapter a run trains, resolved (an adapter at `init_path` supplies its own shape)."""

    rank: int
    alpha: float
    dropout: float
    target_modules: str | tuple[str, ...]
    exclude_modules: str | tuple[str, ...] | None
    init_path: Path | None
    """The adapter training starts from; None: a new one (B = 0)."""
    name: str
    engine_dtype: str

    @classmethod
    def of(cls, cfg: LoRAConfig, read_adapter: bool = True) -> LoRASettings:
        """The settings of `cfg`; with `path`, rank, alpha, dropout and modules are the adapter's (unless
        not `read_adapter`: a config checked for another machine, where the adapter is)."""
        rank, alpha, dropout = cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout
        targets, excluded = _names(cfg.target_modules), _names(cfg.exclude_modules)
        init = Path(cfg.path).expanduser() if cfg.path else None
        if init is not None and read_adapter:
            saved = read_adapter_config(init)
            rank, alpha, dropout = int(saved["r"]), float(saved["lora_alpha"]), float(saved.get("lora_dropout") or 0)
            targets, excluded = _names(saved["target_modules"]), _names(saved.get("exclude_modules"))
        return cls(rank, float(alpha), float(dropout), targets, excluded, init, cfg.name or "policy", cfg.lora_dtype)

    @property
    def max_lora_rank(self) -> int:
        """vLLM's `max_lora_rank` for this adapter: the smallest value it accepts that holds `rank`."""
        return next(r for r in VLLM_MAX_LORA_RANKS if r >= self.rank)

    def peft_kwargs(self) -> dict[str, Any]:
        """Arguments of `peft.LoraConfig` for this adapter (a causal LM's)."""
        return {"r": self.rank, "lora_alpha": self.alpha, "lora_dropout": self.dropout,
                "target_modules": list(self.target_modules) if isinstance(self.target_modules, tuple)
                else self.target_modules,
                "exclude_modules": list(self.exclude_modules) if isinstance(self.exclude_modules, tuple)
                else self.exclude_modules,
                "task_type": "CAUSAL_LM"}


def read_adapter_config(path: Path) -> dict[str, Any]:
    """The adapter_config.json of PEFT adapter directory `path` (ValueError naming what is wrong)."""
    file = Path(path) / ADAPTER_CONFIG
    try:
        config = json.loads(file.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path} holds no {ADAPTER_CONFIG}; give a PEFT adapter directory "
                         f"({ADAPTER_CONFIG}, {ADAPTER_WEIGHTS})") from None
    except ValueError as e:
        raise ValueError(f"{file} is not valid JSON ({e})") from None
    if not isinstance(config, dict) or config.get("peft_type", "LORA") != "LORA" or "r" not in config:
        raise ValueError(f"{file} does not describe a LoRA adapter (peft_type LORA, r, lora_alpha)")
    return config


# The linear layers of one decoder block, by the leaf names of their dotted paths
# (model.layers.<i>.<section>.<leaf>), for the architectures whose layout is known without
# building the model. Other architectures are checked when the trainer builds the adapter.
_LLAMA_BLOCK = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
BLOCK_LINEARS: dict[str, tuple[str, ...]] = {
    **{t: _LLAMA_BLOCK for t in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text",
                                 "olmo", "olmo2", "granite")},
    "phi3": ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj"),
}


def module_paths(model_config: dict[str, Any]) -> list[str] | None:
    """Dotted paths of the decoder blocks' linear layers of the model `model_config` (config.json)
    describes, as peft sees them inside a causal LM; None for an architecture not in BLOCK_LINEARS."""
    block = BLOCK_LINEARS.get(str(model_config.get("model_type")))
    layers = model_config.get("num_hidden_layers")
    if block is None or not isinstance(layers, int):
        return None
    return [f"model.layers.{i}.{leaf}" for i in range(layers) for leaf in block]


def matches(spec: str | tuple[str, ...] | list[str], path: str) -> bool:
    """Whether layer `path` is named by `spec` as peft reads `target_modules`: a string is a regular
    expression the whole path must match (`all-linear`: every block linear layer); a list names
    layers by their path or its trailing dotted part."""
    if isinstance(spec, str):
        return spec == ALL_LINEAR or re.fullmatch(spec, path) is not None
    return any(path == name or path.endswith("." + name) for name in spec)


def lora_problems(cfg: LoRAConfig, model_path: str | None, check_paths: bool = True) -> list[str]:
    """What is wrong with `model.lora` for the model at `model_path`, each naming the key and the fix."""
    key = "model.lora"
    out = []
    if cfg.lora_rank <= 0:
        out.append(f"{key}.lora_rank: {cfg.lora_rank}; the adapter's rank must be >= 1 (8 to 64 is usual); to train "
                   "every weight instead, remove model.lora (Trinity-RFT: model.lora_configs)")
    elif cfg.lora_rank > VLLM_MAX_LORA_RANKS[-1]:
        out.append(f"{key}.lora_rank: {cfg.lora_rank}; vLLM serves adapters of rank <= {VLLM_MAX_LORA_RANKS[-1]}: "
                   "use a smaller rank")
    if not cfg.lora_alpha > 0:
        out.append(f"{key}.lora_alpha: {cfg.lora_alpha}; the scale must be > 0 (often the rank, or twice it)")
    if not 0 <= cfg.lora_dropout < 1:
        out.append(f"{key}.lora_dropout: {cfg.lora_dropout}; use a probability in [0, 1)")
    for name in ("target_modules", "exclude_modules"):
        value = getattr(cfg, name)
        if isinstance(value, str) and value != ALL_LINEAR:
            try:
                re.compile(value)
            except re.error as e:
                out.append(f"{key}.{name}: {value!r} is not a regular expression ({e}); give a list of layer names, "
                           f"a regular expression or {ALL_LINEAR}")
        elif isinstance(value, list) and not value and name == "target_modules":
            out.append(f"{key}.target_modules: empty; name the layers to adapt, or {ALL_LINEAR}")
    if not check_paths:
        return out
    if cfg.path:
        try:
            read_adapter_config(Path(cfg.path).expanduser())
        except ValueError as e:
            out.append(f"{key}.path: {e}")
        return out  # the adapter's own modules are used
    if out or not model_path:
        return out
    try:
        model_config = json.loads((Path(model_path).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return out  # model.model_path is checked on its own
    paths = module_paths(model_config) if isinstance(model_config, dict) else None
    if paths is None:
        return out
    out += _module_problems(cfg, paths, str(model_config.get("model_type")))
    return out


def _module_problems(cfg: LoRAConfig, paths: list[str], model_type: str) -> list[str]:
    """`target_modules` entries that name no linear layer of the model's blocks, and a selection that
    `exclude_modules` leaves empty."""
    key = "model.lora"
    leaves = sorted({p.rsplit(".", 1)[1] for p in paths})
    hint = f"the linear layers of a {model_type} block are {', '.join(leaves)} (or {ALL_LINEAR})"
    targets = cfg.target_modules
    if isinstance(targets, list):
        unknown = [t for t in targets if not any(matches([t], p) for p in paths)]
        if unknown:
            verb = "matches" if len(unknown) == 1 else "match"
            return [(f"{key}.target_modules: {', '.join(map(repr, unknown))} {verb} no linear layer of the model's "
                     f"decoder blocks; {hint}")]
    elif not any(matches(targets, p) for p in paths):
        return [(f"{key}.target_modules: {targets!r} matches no linear layer of the model's decoder blocks "
                 f"(e.g. {paths[0]}); {hint}")]
    excluded = cfg.exclude_modules
    chosen = [p for p in paths if matches(targets, p) and not (excluded and matches(excluded, p))]
    if not chosen:
        return [(f"{key}.exclude_modules: {excluded!r} excludes every layer target_modules selects; the adapter "
                 "would have nothing to train: exclude fewer layers")]
    return []

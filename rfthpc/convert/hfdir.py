"""The non-weight half of a Hugging Face model directory: config, generation config, tokenizer.

A converted model takes these files from the checkpoint (`hf_config/` or veRL's `huggingface/`),
filling in whatever is missing from `--base-model-dir`. The config also tells which tensors the
model expects: transformers builds the model on the meta device (no memory), and its
de-duplicated parameters are exactly what `save_pretrained` would write (a tied `lm_head.weight`
is left out).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from rfthpc.errors import UserError

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".onnx")
TOKENIZER_MARKERS = ("tokenizer_config.json", "tokenizer.json", "tokenizer.model", "vocab.json")

_DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


def _is_weight_file(name: str) -> bool:
    return name.endswith(WEIGHT_SUFFIXES) or name.endswith(".index.json")


def config_files(dirs: list[Path]) -> dict[str, Path]:
    """Non-weight files of the first directories that have them: name -> path (earlier dirs win).

    Hidden files, subdirectories and weights (safetensors, bin, their indexes, …) are skipped.
    """
    files: dict[str, Path] = {}
    for d in dirs:
        if not d.is_dir():
            continue
        for p in sorted(d.iterdir()):
            if p.is_file() and not p.name.startswith(".") and not _is_weight_file(p.name):
                files.setdefault(p.name, p)
    return files


def has_tokenizer(files: dict[str, Path]) -> bool:
    """True if the files include a tokenizer."""
    return any(name in files for name in TOKENIZER_MARKERS)


def config_dtype(config_json: Path) -> torch.dtype | None:
    """The dtype a config.json declares (`dtype`, or the older `torch_dtype`), if it names one we write."""
    from rfthpc.convert.formats import DTYPES

    try:
        config = json.loads(config_json.read_text())
    except ValueError as e:
        raise UserError(f"{config_json} is not valid JSON ({e})") from None
    name = config.get("dtype") or config.get("torch_dtype")
    return DTYPES.get(str(name)) if name else None


def as_value_model(config: dict) -> dict:
    """The config of a critic built from causal LM `config`: `<Model>ForTokenClassification`, one label.

    rfthpc's trainer (like veRL) builds its critic this way from `model.critic_model_path` and
    keeps that directory's causal-LM config in `hf_config/`; other configs are returned as they are.
    """
    arch = (config.get("architectures") or [""])[0]
    if not arch.endswith("ForCausalLM"):
        return config
    return {
        **config,
        "architectures": [arch.removesuffix("ForCausalLM") + "ForTokenClassification"],
        "id2label": {"0": "LABEL_0"},
        "label2id": {"LABEL_0": 0},
    }


def write_config_files(
    out_dir: Path, files: dict[str, Path], dtype: torch.dtype | None, value_model: bool = False
) -> None:
    """Copy `files` into `out_dir`; config.json gets `dtype` (when given) as the model's dtype.

    `value_model` makes the config a critic's (see `as_value_model`). A generation_config.json is
    derived from the config when no source has one, as `save_pretrained` does.
    """
    for name, src in files.items():
        if name == "config.json":
            continue
        shutil.copyfile(src, out_dir / name)
    try:
        config = json.loads(files["config.json"].read_text())
    except ValueError as e:
        raise UserError(f"{files['config.json']} is not valid JSON ({e})") from None
    if value_model:
        config = as_value_model(config)
    if dtype is not None:
        # transformers >= 5 writes `dtype`; older versions read `torch_dtype`.
        config["dtype"] = _DTYPE_NAMES[dtype]
        if "torch_dtype" in config:
            config["torch_dtype"] = _DTYPE_NAMES[dtype]
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    if "generation_config.json" not in files:
        from transformers import AutoConfig, GenerationConfig

        try:
            model_config = AutoConfig.from_pretrained(out_dir)
        except (ValueError, KeyError, OSError):
            # A model type this transformers does not know (or custom code): the model loads without
            # a generation config, so none is derived.
            return
        GenerationConfig.from_model_config(model_config).save_pretrained(out_dir)


@dataclass(frozen=True)
class Layout:
    """The tensors a model class expects: names to write with their shapes, and tied aliases to drop."""

    architecture: str
    shapes: dict[str, tuple[int, ...]]
    aliases: frozenset[str]


class UnknownModel(Exception):
    """transformers cannot build the model a config describes (custom code, unknown class)."""


def model_layout(hf_dir: Path) -> Layout:
    """The layout of the model `hf_dir/config.json` describes (raises `UnknownModel` if unbuildable).

    Built on the meta device, so it costs no memory even for a large model.
    """
    import transformers
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(hf_dir)
    except Exception as e:  # noqa: BLE001 — an unknown model_type raises ValueError, KeyError, … by version
        raise UnknownModel(f"transformers cannot read its config ({type(e).__name__}: {e})") from None
    arch = (getattr(config, "architectures", None) or [None])[0]
    cls = getattr(transformers, arch, None) if arch else None
    if cls is None:
        raise UnknownModel(f"transformers has no model class {arch!r} (config.json `architectures`)")
    with torch.device("meta"):
        model = cls(config)
    kept = {n for n, _ in model.named_parameters()} | {n for n, _ in model.named_buffers()}
    state = model.state_dict()
    return Layout(
        architecture=arch,
        shapes={k: tuple(v.shape) for k, v in state.items() if k in kept},
        aliases=frozenset(k for k in state if k not in kept),
    )


def tied_output_key(config_json: Path) -> str | None:
    """`lm_head.weight` when a config ties it to the input embedding (used when no layout is known)."""
    config = json.loads(config_json.read_text())
    tie = config.get("tie_word_embeddings", config.get("text_config", {}).get("tie_word_embeddings", False))
    return "lm_head.weight" if tie else None

"""Build a small Qwen2 chat model offline: random weights, a trained tokenizer, a chat template.

The result is a Hugging Face model directory (config.json, model.safetensors, tokenizer.json,
chat template, generation_config.json) that transformers and vLLM's CPU backend load like a real
Qwen2.5-Instruct checkpoint. Tests, the CPU demo and the rollout benchmark use it, so nothing is
downloaded.

Usage:
    rfthpc tiny-model --out DIR [--size tiny|demo|small|bench30m] [--seed 0] [--no-tie-word-embeddings]
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import tyro

from rfthpc.demos.synth_gsm8k import Difficulty, generate_problem
from rfthpc.errors import UserError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)

# Qwen-style: every turn is `<|im_start|>role\n…<|im_end|>\n`. The `generation` block marks the
# assistant tokens, so `apply_chat_template(..., return_assistant_tokens_mask=True)` yields the
# SFT loss mask.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- generation -%}{{- message['content'] + '<|im_end|>' -}}{%- endgeneration -%}"
    "{{- '\\n' -}}"
    "{%- else -%}"
    "{{- message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# Digits are split one per token (as Qwen2 does) so arithmetic is learnable by a small model;
# words keep a leading space; runs of other symbols such as `####` stay together.
PRETOKENIZE_PATTERN = r"\p{N}| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

# The tokenizer corpus is fixed (not seeded by the model seed): every model of one size shares a
# tokenizer, and only the weights depend on the seed.
_CORPUS_SEED = 1234


@dataclass(frozen=True)
class ModelShape:
    """Qwen2 dimensions. vLLM's CPU attention needs head_dim = hidden/heads in {32, 64, 80, …}."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_target: int
    """BPE vocabulary size to train for; the corpus yields at most ~550 tokens."""
    max_position_embeddings: int = 2048


SIZES: dict[str, ModelShape] = {
    # ~0.1M parameters: fast enough that every test can build one.
    "tiny": ModelShape(64, 2, 2, 1, 128, 384),
    # ~3M parameters.
    "small": ModelShape(256, 4, 4, 2, 768, 512),
    # ~30M parameters: where vLLM's CPU engine overtakes transformers' generate (rollout benchmark).
    "bench30m": ModelShape(512, 10, 8, 2, 1536, 2048),
    "demo": ModelShape(128, 2, 4, 2, 384, 512),  # ~0.46M: the CPU demo (learns one-step sums in minutes)
    # ~0.26M parameters with the demo's tokenizer: the student the distillation demo distils the demo model into.
    "student": ModelShape(96, 2, 3, 1, 288, 512),
    # ~103M parameters: Qwen2-shaped (12 layers, hidden 768, GQA), for the weight hand-off benchmark.
    "bench100m": ModelShape(768, 12, 12, 2, 3072, 2048),
}

Size = Literal["tiny", "small", "bench30m", "demo", "student", "bench100m"]


def tokenizer_corpus(n_problems: int = 1000) -> list[str]:
    """Texts the BPE is trained on: GSM8K-format problems at every difficulty, chat-wrapped too."""
    rng = random.Random(_CORPUS_SEED)
    texts = []
    for i in range(n_problems):
        record = generate_problem(rng, Difficulty.level(1 + i % 3))
        texts.append(record["question"])
        texts.append(record["answer"])
        texts.append(
            f"system\nSolve the problem. Give the final answer after ####.\n"
            f"user\n{record['question']}\nassistant\n{record['answer']}\n"
        )
    texts.append("0123456789 + - * / = #### . , ? ! : ; ( ) $ % \\boxed{} \\frac{}{}")
    return texts


def build_tokenizer(
    vocab_size: int, model_max_length: int = 2048, corpus: Sequence[str] | None = None,
    pretokenize_pattern: str = PRETOKENIZE_PATTERN,
) -> PreTrainedTokenizerFast:
    """Train a ByteLevel BPE on `corpus` (default `tokenizer_corpus()`) and wrap it as a Qwen-style
    fast tokenizer.

    Every byte is in the base alphabet, so any text can be encoded; the corpus decides which
    texts take few tokens, and `pretokenize_pattern` which characters are never merged (the
    agentic demo keeps each cell of its map a token of its own).
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pretokenize_pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(tokenizer_corpus() if corpus is None else corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[IM_START],
        chat_template=CHAT_TEMPLATE,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def build_tiny_model(
    out_dir: str | Path, size: Size = "tiny", seed: int = 0, tie_word_embeddings: bool = True,
    corpus: Sequence[str] | None = None, pretokenize_pattern: str = PRETOKENIZE_PATTERN,
) -> Path:
    """Write a random-init float32 Qwen2ForCausalLM with tokenizer and chat template to `out_dir`.

    The tokenizer is trained on `corpus` (default: GSM8K-format problems, `tokenizer_corpus()`)
    split first by `pretokenize_pattern`.
    Deterministic: the same `size`, `seed` and corpus give byte-identical weights. Tied embeddings are the
    default because Qwen2.5-0.5B/1.5B tie them (and weight reloads must handle that case).
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    if size not in SIZES:
        raise UserError(f"tiny model size {size!r}: choose one of {sorted(SIZES)}")
    shape = SIZES[size]
    out = Path(out_dir)
    tokenizer = build_tokenizer(shape.vocab_target, shape.max_position_embeddings, corpus,
                                pretokenize_pattern)
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        max_position_embeddings=shape.max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        bos_token_id=pad_id, eos_token_id=[eos_id, pad_id], pad_token_id=pad_id
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def parameter_count(size: Size, vocab_size: int, tie_word_embeddings: bool = True) -> int:
    """Parameters of a Qwen2 of this shape.

    Per layer: q (h·h + h), k and v (h·kv + kv each, kv = heads_kv·head_dim), o (h·h),
    MLP 3·h·i, two RMSNorms 2·h; plus embeddings V·h, final norm h, and V·h more if untied.
    """
    s = SIZES[size]
    h, i = s.hidden_size, s.intermediate_size
    kv = s.num_key_value_heads * (h // s.num_attention_heads)
    layer = (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * i + 2 * h
    embed = vocab_size * h
    return s.num_hidden_layers * layer + embed + h + (0 if tie_word_embeddings else embed)


@dataclass
class TinyModelArgs:
    """Build a small random-init Qwen2 chat model with its tokenizer, offline."""

    out: Path
    """Output directory (a Hugging Face model directory)."""
    size: Size = "tiny"
    """tiny (~0.1M params, tests), demo (~0.46M, the CPU demo), small (~3M), bench30m (~30M, benchmarks)."""
    seed: int = 0
    """Weight initialisation seed."""
    tie_word_embeddings: bool = True
    """Share the input embedding and the output layer, as Qwen2.5-0.5B/1.5B do."""


def main(argv: Sequence[str] | None = None) -> int:
    """`rfthpc tiny-model`: build the model described by `TinyModelArgs`."""
    args = tyro.cli(TinyModelArgs, args=argv, prog="rfthpc tiny-model")
    out = build_tiny_model(args.out, args.size, args.seed, args.tie_word_embeddings)
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(out)
    n = parameter_count(args.size, config.vocab_size, args.tie_word_embeddings)
    print(f"wrote {args.size} Qwen2 ({n / 1e6:.2f}M parameters, vocab {config.vocab_size}) to {out}")
    return 0

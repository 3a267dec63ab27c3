"""What one generate call takes and gives back: a taskset's sampling (`SamplingArgs`, its
`rollout_args`) and each sampled response (`Completion`), with vLLM's limits on both.

Every engine (vLLM, transformers, a remote server) and every workflow speaks these; tasksets carry
their `SamplingArgs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rfthpc.errors import ConfigError, Problems

if TYPE_CHECKING:
    from rfthpc.config.schema import Config

MAX_TOP_LOGPROBS = 20
"""Most top alternatives per token a request may ask for (vLLM's default `max_logprobs`)."""


GREEDY_TEMPERATURE = 1e-5
"""Below this temperature the engines decode greedily: vLLM's greedy threshold (`_SAMPLING_EPS`)."""


MIN_SAMPLING_TEMPERATURE = 0.01
"""The smallest temperature vLLM samples at (it raises a lower one, above GREEDY_TEMPERATURE, to this)."""


@dataclass(frozen=True)
class SamplingArgs:
    """A taskset's `rollout_args`."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    """-1: no top-k cut."""
    max_tokens: int = 512
    """Most response tokens per sample."""
    logprobs: int = 0
    """Top alternatives per response token returned in `Completion.top_logprobs` (0: none)."""
    seed: int | None = None
    """Seed of the request's sampling: the same weights and prompt give the same samples (None: not seeded)."""
    prompt_logprobs: bool = False
    """Also score the prompt: `Completion.prompt_logprobs` (a teacher scoring sampled tokens). Not a
    `rollout_args` key: the explorer sets it."""

    @classmethod
    def from_config(cls, rollout_args: Any) -> SamplingArgs:
        """The sampling of a finalized taskset's `rollout_args` (unset values: the defaults above);
        a ConfigError names a value out of range."""
        names = ("temperature", "top_p", "top_k", "max_tokens", "logprobs", "seed")
        return cls(**{name: value for name in names if (value := getattr(rollout_args, name)) is not None})

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ConfigError(f"rollout_args.temperature={self.temperature}: use a value ≥ 0")
        if GREEDY_TEMPERATURE <= self.temperature < MIN_SAMPLING_TEMPERATURE:
            # vLLM samples at 0.01 at least, while the trainer would divide its logits by the value given.
            raise ConfigError(
                f"rollout_args.temperature={self.temperature}: use 0 (greedy) or at least "
                f"{MIN_SAMPLING_TEMPERATURE} (vLLM's smallest sampling temperature)"
            )
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"rollout_args.top_p={self.top_p}: use a value in (0, 1]")
        if self.top_k == 0 or self.top_k < -1:
            raise ConfigError(f"rollout_args.top_k={self.top_k}: use -1 (off) or a positive count")
        if self.max_tokens < 1:
            raise ConfigError(f"rollout_args.max_tokens={self.max_tokens}: use at least 1")
        if not 0 <= self.logprobs <= MAX_TOP_LOGPROBS:
            raise ConfigError(
                f"rollout_args.logprobs={self.logprobs}: use 0 to {MAX_TOP_LOGPROBS} top alternatives per token"
            )


@dataclass
class Completion:
    """One sampled response as the engine returns it."""

    token_ids: list[int]
    logprobs: list[float]
    """Log-probability each token was sampled with (after temperature, top-k and top-p: vLLM's processed logprobs)."""
    text: str
    finish_reason: str
    """"stop" (an end token) or "length" (max_tokens reached)."""
    top_logprobs: list[dict[int, float]] | None = None
    """With `SamplingArgs.logprobs` k > 0: per token, the k most likely tokens of the distribution it was
    sampled from and their logprobs (same convention as `logprobs`); None otherwise."""
    prompt_logprobs: list[float] | None = None
    """With `SamplingArgs.prompt_logprobs`: the log-probability of each prompt token after the first given
    the tokens before it, under the model's own distribution (log softmax of the plain logits, temperature 1,
    as vLLM's prompt logprobs); None otherwise."""


def rollout_args_problems(cfg: Config, problems: Problems) -> None:
    """Every taskset's `rollout_args` makes a `SamplingArgs`. A check of `rfthpc.config.validate`."""
    inp = cfg.buffer.explorer_input
    for group, sets in (("tasksets", inp.tasksets), ("eval_tasksets", inp.eval_tasksets)):
        for i, ts in enumerate(sets):
            try:
                SamplingArgs.from_config(ts.rollout_args)
            except ConfigError as e:
                problems.add(f"buffer.explorer_input.{group}[{i}].{e}")

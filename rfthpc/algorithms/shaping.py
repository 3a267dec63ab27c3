"""What the explorer does to a scored group before committing it: DAPO's soft overlong penalty on the
rewards, and dynamic sampling (a group whose responses all score the same is not committed).

Both are resolved from the config (`algorithm.overlong_buffer`, `algorithm.filter_groups`) by the
functions below, which `rfthpc config validate` calls too, so a bad value is reported before
anything runs. Plain Python: no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rfthpc.errors import ConfigError, UserError

if TYPE_CHECKING:
    from rfthpc.config.algorithm import FilterGroupsConfig, OverlongBufferConfig
    from rfthpc.workflows.base import Experience

OVERLONG_PENALTY = "overlong_penalty"
"""Key of an experience's `info`: the overlong penalty added to its reward."""

REWARD_METRICS = ("reward", "seq_reward", "seq_final_reward")
"""`filter_groups.metric` names of the reward trained on (the overlong penalty included; veRL's
`seq_final_reward` also holds the KL penalty, which rfthpc's trainer applies later: not here)."""
SCORE_METRICS = ("acc", "score")
"""`filter_groups.metric` names of the reward function's own value (before the overlong penalty),
unless the reward function returns a component of that name."""


@dataclass(frozen=True)
class OverlongPenalty:
    """DAPO's soft overlong punishment, resolved: L_max = `max_len`, L_cache = `buffer_len`."""

    max_len: int
    buffer_len: int
    penalty_factor: float

    def penalty(self, length: int) -> float:
        """For a response of L tokens:

            0                                 L <= L_max - L_cache
            (L_max - L_cache - L) / L_cache   L_max - L_cache < L <= L_max
            -1                                L > L_max
        times penalty_factor. (veRL's DAPO reward manager has no lower bound: its responses never
        exceed L_max; a multi-turn response counts its environment tokens and may.) Trinity-RFT's
        `math_dapo_reward` gives the same values with L_cache = its cache_length and L_max = its
        max_response_length (rfthpc.dialects.trinity.apply_trinity_overlong reads them as these settings).
        """
        expected = self.max_len - self.buffer_len
        return self.penalty_factor * max(-1.0, min(0.0, (expected - length) / self.buffer_len))

    def apply(self, experiences: Sequence[Experience]) -> None:
        """Add each response's penalty to its reward (recorded in `info["overlong_penalty"]`); the
        length is the response's token count, environment tokens of a multi-turn response included."""
        for e in experiences:
            p = self.penalty(len(e.response_token_ids))
            e.reward += p
            e.info[OVERLONG_PENALTY] = p


@dataclass(frozen=True)
class GroupFilter:
    """Dynamic sampling, resolved: which value must vary within a group for it to be trained."""

    metric: str
    max_num_gen_batches: int
    """0: no limit; else the batches an explorer may explore without keeping one batch's worth of groups."""

    def values(self, experiences: Sequence[Experience], scores: Sequence[float]) -> list[float]:
        """The metric of each response; `scores` are the rewards before the overlong penalty.

        A named component the reward function did not return is a UserError, except in a group whose
        reward function failed (no components, every reward 0: a group without contrast).
        """
        if self.metric in REWARD_METRICS:
            return [e.reward for e in experiences]
        out = []
        for e, score in zip(experiences, scores, strict=True):
            if self.metric in e.reward_components:
                out.append(e.reward_components[self.metric])
            elif self.metric in SCORE_METRICS:
                out.append(score)
            elif "reward_error" in e.info:
                out.append(0.0)
            else:
                raise UserError(
                    f"algorithm.filter_groups.metric: {self.metric!r} is not a component of the reward "
                    f"(this reward function returns {sorted(e.reward_components) or 'a plain number'}); name "
                    f"one of its components, or {', '.join(REWARD_METRICS[:1] + SCORE_METRICS)}"
                )
        return out

    def keeps(self, experiences: Sequence[Experience], scores: Sequence[float]) -> bool:
        """Whether a group is trained: its metric takes two different values (a lone response is kept,
        as veRL does: it has no contrast to lack)."""
        values = self.values(experiences, scores)
        return len(values) < 2 or min(values) != max(values)


def group_filter(fg: FilterGroupsConfig) -> GroupFilter | None:
    """`algorithm.filter_groups` resolved (the preset applied): None when off."""
    if not fg.enable:
        return None
    metric = fg.metric or REWARD_METRICS[0]
    batches = 0 if fg.max_num_gen_batches is None else fg.max_num_gen_batches
    if batches < 0:
        raise ConfigError(f"algorithm.filter_groups.max_num_gen_batches: {batches} must be >= 0 (0: no limit)")
    return GroupFilter(metric, batches)


def overlong_penalty(ob: OverlongBufferConfig, max_response_tokens: int | None) -> OverlongPenalty | None:
    """`algorithm.overlong_buffer` resolved (the preset applied) against `model.max_response_tokens`:
    None when off."""
    if not ob.enable:
        return None
    if max_response_tokens is None:
        raise ConfigError("algorithm.overlong_buffer: the penalty is measured from model.max_response_tokens, "
                          "which is not set; set it")
    buffer_len = max(1, max_response_tokens // 5) if ob.len is None else ob.len
    if not 0 < buffer_len <= max_response_tokens:
        raise ConfigError(
            f"algorithm.overlong_buffer.len: {buffer_len} must be in [1, model.max_response_tokens = "
            f"{max_response_tokens}]; the penalty grows over the last `len` tokens before the limit"
        )
    factor = 1.0 if ob.penalty_factor is None else float(ob.penalty_factor)
    if factor < 0:
        raise ConfigError(f"algorithm.overlong_buffer.penalty_factor: {factor} must be >= 0 (the penalty at "
                          "the limit, subtracted from the reward)")
    return OverlongPenalty(max_response_tokens, buffer_len, factor)

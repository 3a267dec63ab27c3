"""One episode of an environment as a growing token sequence: the policy's turns and the rest.

The response of a multi-turn experience is every token after the opening prompt: the policy's
replies (loss mask 1, their behaviour logprobs) and, between them, the chat template's framing and
the environment's observations (loss mask 0, logprob 0). The episode's reward is made from its
step rewards when it ends (`Episode.experience`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from rfthpc.engines.sampling import Completion
from rfthpc.workflows.base import EPISODE, STATE, STEP, STEP_REWARD, Experience

RewardType = Literal["sum", "success"]
REWARD_TYPES: tuple[str, ...] = ("sum", "success")


@dataclass
class Turn:
    """What one policy turn earned."""

    start: int
    """Index in the response of the turn's first policy token."""
    end: int
    """Index in the response of the turn's last policy token (where its turn reward goes)."""
    reward: float = 0.0
    """The environment's step reward (0 if the turn was cut before it reached the environment)."""
    penalty: float = 0.0
    """Format penalty of an invalid action (≤ 0)."""
    state: str = ""
    """Digest of the observation the turn answered (GiGPO's anchor state, `state_digest`)."""
    head: list[int] = field(default_factory=list)
    """The turn's prompt is `head` followed by the response from `window_start` to the turn's start: the
    opening prompt and the whole episode so far, or, with a history window, the opening of an observation of
    the window and the turns after it."""
    window_start: int = 0


def state_digest(observation: str) -> str:
    """A short stable name of an environment state, from the observation text the policy saw."""
    return hashlib.blake2b(observation.encode(), digest_size=8).hexdigest()


@dataclass
class Episode:
    """The token sequence and the facts of one episode."""

    prompt: list[int]
    token_limit: int | None = None
    """The most prompt + response tokens the episode may hold (None: no limit)."""
    limited_by: str = "max_context_tokens"
    """The setting `token_limit` comes from: the episode's `truncated_by` when it reaches it."""
    response: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    invalid_actions: int = 0
    success: bool | None = None
    """The environment's `success` on its last step; None if it never said."""
    terminated: bool = False
    truncated_by: str | None = None
    """Why the episode was cut short: `env` (the environment truncated it), `max_turns`,
    `max_context_tokens`, `max_response_tokens`, `max_prompt_tokens` (with `history_turns`: an observation's
    opening prompt alone is too long); None if it terminated."""
    finish_reason: str = ""
    env_info: dict[str, Any] = field(default_factory=dict)
    observation: str = ""
    """The environment's latest observation: what the next turn answers."""
    history_turns: int | None = None
    """How many earlier turns a turn's prompt holds (None: all of them, the context only grows)."""
    openings: list[list[int]] = field(default_factory=list)
    """With `history_turns`: per turn, the opening prompt of the observation it answers (as the episode's own
    prompt opens its first), which starts the prompt of the turn `history_turns` later."""

    @property
    def done(self) -> bool:
        """True once the episode ended (terminated or truncated)."""
        return self.terminated or self.truncated_by is not None

    @property
    def room(self) -> int | None:
        """Tokens the next reply may have within `token_limit` (None: no limit)."""
        if self.token_limit is None:
            return None
        head, start = self._window()
        return max(0, self.token_limit - len(head) - (len(self.response) - start))

    def _first_in_window(self) -> int:
        """The first turn whose observation the next turn's prompt holds (0: the whole episode)."""
        return 0 if self.history_turns is None else max(0, len(self.turns) - self.history_turns)

    def _window(self) -> tuple[list[int], int]:
        """(head, window start) of the next turn's prompt (see `Turn.head`)."""
        first = self._first_in_window()
        if first == 0:
            return self.prompt, 0
        return self.openings[first], self.turns[first].start if first < len(self.turns) else len(self.response)

    @property
    def context(self) -> list[int]:
        """What the policy is conditioned on for its next turn: every token so far, or, with `history_turns`,
        the opening of the window's first observation and the turns after it."""
        head, start = self._window()
        return head + self.response[start:]

    def add_reply(self, completion: Completion, keep: int | None = None) -> None:
        """Append the policy's reply (its first `keep` tokens if given) with its behaviour logprobs."""
        ids, lps = completion.token_ids[:keep], completion.logprobs[:keep]
        head, window_start = self._window()
        start = len(self.response)
        self.response += ids
        self.logprobs += lps
        self.loss_mask += [1] * len(ids)
        self.turns.append(Turn(start=start, end=len(self.response) - 1, state=state_digest(self.observation),
                               head=head, window_start=window_start))
        self.finish_reason = completion.finish_reason if keep is None else "length"

    def context_after(self, framing: list[int], opening: list[int] | None) -> int:
        """The length of the next turn's prompt once `framing` (and, with `history_turns`, the next
        observation's `opening`) is added."""
        first = self._first_in_window()
        if first == 0:
            return len(self.prompt) + len(self.response) + len(framing)
        if first == len(self.turns):
            return len(opening or [])
        return len(self.openings[first]) + len(self.response) - self.turns[first].start + len(framing)

    def add_framing(self, ids: list[int], opening: list[int] | None = None) -> None:
        """Append tokens the policy did not generate (template framing, an observation): mask 0, logprob 0;
        with `history_turns`, `opening` is the opening prompt of the observation they end with."""
        self.response += ids
        self.logprobs += [0.0] * len(ids)
        self.loss_mask += [0] * len(ids)
        if self.history_turns is not None:
            self.openings.append(opening or [])

    def record_step(self, reward: float, info: dict[str, Any], format_penalty: float) -> None:
        """Book the environment's answer to the last turn."""
        turn = self.turns[-1]
        turn.reward = float(reward)
        if info.get("invalid_action"):
            self.invalid_actions += 1
            turn.penalty = -format_penalty
        if "success" in info:
            self.success = bool(info["success"])
        self.env_info = _json_safe({k: v for k, v in info.items() if k not in ("invalid_action", "success")})

    def end(self, truncated_by: str | None) -> None:
        """End the episode: terminated (None) or cut short for the reason given."""
        if truncated_by is None:
            self.terminated = True
        else:
            self.truncated_by = truncated_by

    def turn_rewards(self, reward_type: RewardType) -> list[float]:
        """What each turn earned, summing to the episode's reward: its format penalty and, with `sum`, its
        step reward; with `success` the 1/0 success goes to the last turn."""
        earned = [t.penalty + (t.reward if reward_type == "sum" else 0.0) for t in self.turns]
        if reward_type == "success" and earned:
            earned[-1] += float(bool(self.success))
        return earned

    def experience(self, reward_type: RewardType, turn_rewards: bool, text: str) -> Experience:
        """The episode as one experience: reward = sum of step rewards (`sum`) or 1/0 success
        (`success`), plus the format penalties; with `turn_rewards` also placed per turn on each
        turn's last policy token (their sum is the reward)."""
        penalty = sum(t.penalty for t in self.turns)
        env_reward = sum(t.reward for t in self.turns)
        if reward_type == "sum":
            components = {"env_reward": env_reward, "format_penalty": penalty}
        else:
            components = {"success": float(bool(self.success)), "format_penalty": penalty}
        token_rewards = None
        if turn_rewards:
            token_rewards = [0.0] * len(self.response)
            for t, earned in zip(self.turns, self.turn_rewards(reward_type), strict=True):
                token_rewards[t.end] += earned
        info: dict[str, Any] = {
            "turns": len(self.turns), "invalid_actions": self.invalid_actions, "terminated": self.terminated,
            "truncated": self.truncated_by is not None, "truncated_by": self.truncated_by, "env_reward": env_reward,
        }
        if self.success is not None:
            info["success"] = self.success
        if self.env_info:
            info["env_info"] = self.env_info
        return Experience(
            prompt_token_ids=list(self.prompt), response_token_ids=list(self.response), logprobs=list(self.logprobs),
            loss_mask=list(self.loss_mask), reward=sum(components.values()), response_text=text,
            finish_reason=self.finish_reason, reward_components=components, token_level_rewards=token_rewards,
            info=info,
        )


def episode_steps(whole: Experience, played: Episode, reward_type: RewardType, episode: int,
                  decode: Callable[[list[int]], str]) -> list[Experience]:
    """The episode `whole` (`played.experience`) as one experience per policy turn, for step-wise training:
    turn k's prompt is every token the policy was conditioned on (the opening prompt and the episode up to
    the turn, or its history window), its response the turn's own tokens, its reward the episode's; marked
    with `episode` and k
    (`EPISODE`, `STEP`), what the turn earned (`STEP_REWARD`) and the state it answered (`STATE`), with the
    episode's facts in each step's info. A turn cut to nothing is no step."""
    steps = []
    turns = played.turns
    played_turns = [(t, r) for t, r in zip(turns, played.turn_rewards(reward_type), strict=True) if t.end >= t.start]
    for k, (turn, earned) in enumerate(played_turns):
        span = slice(turn.start, turn.end + 1)
        steps.append(Experience(
            prompt_token_ids=turn.head + whole.response_token_ids[turn.window_start:turn.start],
            response_token_ids=whole.response_token_ids[span], logprobs=whole.logprobs[span],
            loss_mask=whole.loss_mask[span], reward=whole.reward, response_text=decode(whole.response_token_ids[span]),
            finish_reason=whole.finish_reason if turn is turns[-1] else "stop",
            reward_components=dict(whole.reward_components),
            info={**whole.info, EPISODE: episode, STEP: k, STEP_REWARD: earned, STATE: turn.state},
        ))
    return steps


def _json_safe(info: dict[str, Any]) -> dict[str, Any]:
    """`info` as the store can keep it (JSON): values JSON cannot hold become their text."""
    return json.loads(json.dumps(info, default=str))

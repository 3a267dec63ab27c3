"""What the trainer trains on: `Sample`s, made from experience groups (RL) or dataset rows (SFT, DPO).

Experience groups come from explorers that may run another tokenizer or model by mistake, so each
group is checked before training; a bad one stops the trainer with a `UserError` naming the
group, its task, its explorer and rank, and the chunk file it was read from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rfthpc.errors import UserError
from rfthpc.store import Group
from rfthpc.store.schema import SUBGROUP
from rfthpc.workflows.base import EPISODE, STATE, STEP, STEP_REWARD


@dataclass
class Sample:
    """One response to train on, with its prompt."""

    prompt_ids: np.ndarray
    """int64 [P], P >= 1: the context the response continues."""
    response_ids: np.ndarray
    """int64 [R]: the tokens whose log-probabilities are trained."""
    loss_mask: np.ndarray
    """bool [R]: tokens that enter the loss (environment tokens and padding do not)."""
    reward: float = 0.0
    """Scalar reward of the response (0 for SFT)."""
    behaviour_logprobs: np.ndarray | None = None
    """float32 [R]: log-probabilities under the policy that generated it (None for SFT)."""
    token_rewards: np.ndarray | None = None
    """float32 [R] or None: per-token rewards from the workflow."""
    group: int = 0
    """Index of its group (task) within the batch; group-relative advantages compare these, apart by `subgroup`."""
    subgroup: str | None = None
    """Its experience's `SUBGROUP` (None: the group's own responses)."""
    policy_version: int = 0
    """Version of the weights that generated it (`weights/step_<N>`)."""
    temperature: float = 1.0
    """Sampling temperature: log-probabilities are taken of softmax(logits / temperature)."""
    reward_components: dict[str, float] | None = None
    """The reward function's named components ({"accuracy": 1.0, "format": 0.5}), when it gave them."""
    baseline_reward: float = math.nan
    """Reward of the greedy response to its task (ReMax's baseline; `Group.baseline_reward`), NaN if none."""
    preference: int = 0
    """DPO: +1 for the chosen response of its preference pair (the pair is its `group`), -1 for the
    rejected one; 0 outside preference pairs."""
    expert: bool = False
    """An expert row of a mix stage (an SFT dataset's, trained with the SFT term), not a rollout."""
    episode: int | None = None
    """The episode of its group it is one step of (its experience's `EPISODE`); None: a whole episode."""
    step: int = 0
    """Its place in its episode's steps (its experience's `STEP`)."""
    step_reward: float | None = None
    """What the step itself earned (its experience's `STEP_REWARD`); None: not said."""
    state: str | None = None
    """The environment state the step acted in (its experience's `STATE`); None: not said."""
    teacher_logprobs: np.ndarray | None = None
    """float32 [R]: the explorer's distillation teacher's log-probability of each response token (None: no
    teacher scored it there)."""

    @property
    def length(self) -> int:
        """Tokens the forward pass reads: prompt + response."""
        return len(self.prompt_ids) + len(self.response_ids)


def _where(group: Group) -> str:
    place = f", chunk {group.chunk}" if group.chunk is not None else ""
    return (f"experience group {group.group_id!r} (task {group.task_id!r}) from explorer {group.explorer!r} "
            f"rank {group.rank}{place}")


def check_group(group: Group, vocab_size: int, max_length: int | None) -> None:
    """Raise UserError unless every experience of `group` can be trained on.

    Checks: token ids in [0, vocab_size); one behaviour logprob, loss-mask entry and (if present)
    token reward per response token; a non-empty prompt; prompt + response within `max_length`
    (the most tokens a micro-batch or the model's positions can hold).
    """
    for i, e in enumerate(group.experiences):
        problem = _experience_problem(e, vocab_size, max_length)
        if problem is not None:
            raise UserError(
                f"{_where(group)}, experience {i}: {problem}. The explorer produced data this trainer "
                "cannot train on; check that explorers and trainer use the same model and tokenizer, then "
                "remove or quarantine that chunk (`rfthpc store inspect`)"
            )


def _experience_problem(e, vocab_size: int, max_length: int | None) -> str | None:
    n = len(e.response_ids)
    for name, arr in (("logprobs", e.logprobs), ("loss_mask", e.loss_mask), ("token_rewards", e.token_rewards),
                      ("teacher_logprobs", e.teacher_logprobs)):
        if arr is not None and len(arr) != n:
            return f"{name} has {len(arr)} entries but the response has {n} tokens (lengths must match)"
    if len(e.prompt_ids) == 0:
        return "the prompt is empty (a response needs at least one prompt token to be predicted from)"
    for name, ids in (("prompt", e.prompt_ids), ("response", e.response_ids)):
        ids = np.asarray(ids)
        if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
            bad = int(ids.max()) if ids.max() >= vocab_size else int(ids.min())
            return f"{name} token id {bad} is outside the model's vocabulary [0, {vocab_size})"
    total = len(e.prompt_ids) + n
    if max_length is not None and total > max_length:
        return (f"prompt + response is {total} tokens, more than the trainer's limit of {max_length} "
                "(trainer.max_token_len_per_gpu and the model's max_position_embeddings)")
    return None


def samples_from_groups(
    groups: list[Group],
    vocab_size: int,
    max_length: int | None,
    temperature: float = 1.0,
) -> list[Sample]:
    """Check `groups` and flatten them into samples; sample.group is the group's index in `groups`.

    The temperature of a group is `group.info["temperature"]` when the explorer recorded it, else
    `temperature` (the config's): log-probabilities must be taken at the sampling temperature.
    """
    samples = []
    for g_index, group in enumerate(groups):
        check_group(group, vocab_size, max_length)
        t = float(group.info.get("temperature", temperature) or 1.0)
        baseline = group.baseline_reward
        for e in group.experiences:
            samples.append(
                Sample(
                    prompt_ids=np.asarray(e.prompt_ids, dtype=np.int64),
                    response_ids=np.asarray(e.response_ids, dtype=np.int64),
                    loss_mask=np.asarray(e.loss_mask).astype(bool),
                    reward=float(e.reward),
                    behaviour_logprobs=np.asarray(e.logprobs, dtype=np.float32),
                    token_rewards=None if e.token_rewards is None else np.asarray(e.token_rewards, np.float32),
                    teacher_logprobs=None if e.teacher_logprobs is None
                    else np.asarray(e.teacher_logprobs, np.float32),
                    group=g_index,
                    subgroup=e.info.get(SUBGROUP),
                    episode=None if e.info.get(EPISODE) is None else int(e.info[EPISODE]),
                    step=int(e.info.get(STEP, 0)),
                    step_reward=None if e.info.get(STEP_REWARD) is None else float(e.info[STEP_REWARD]),
                    state=None if e.info.get(STATE) is None else str(e.info[STATE]),
                    policy_version=int(group.policy_version),
                    temperature=t,
                    reward_components=_components(e.info),
                    baseline_reward=math.nan if baseline is None else baseline,
                )
            )
    return samples


def advantage_groups(samples: list[Sample]) -> list[int]:
    """Per sample, the index of the responses it is compared with by group-relative advantages: its
    group's, split by `subgroup`."""
    index: dict[tuple[int, str | None], int] = {}
    return [index.setdefault((s.group, s.subgroup), len(index)) for s in samples]


def episode_ids(samples: list[Sample]) -> list[int]:
    """Per sample, the index of the episode it is a step of within the batch: one per (group, subgroup,
    episode); a sample that is a whole episode is an episode of its own."""
    index: dict[tuple, int] = {}
    return [index.setdefault((s.group, s.subgroup, s.episode) if s.episode is not None else ("whole", i), len(index))
            for i, s in enumerate(samples)]


def step_rewards(samples: list[Sample]) -> list[float]:
    """Per sample, what its step earned; NaN where the workflow did not say (the step-wise advantages
    then count the episode's reward as its last step's)."""
    return [math.nan if s.step_reward is None else s.step_reward for s in samples]


def state_ids(samples: list[Sample]) -> list[int]:
    """Per sample, the index of the environment state it acted in among the batch's states (equal states of
    different tasks too: Trinity-RFT's GiGPO compares them, ROLL's pairs them with the group); a sample
    without a state is a state of its own."""
    index: dict[tuple, int] = {}
    return [index.setdefault(("state", s.state) if s.state is not None else ("own", i), len(index))
            for i, s in enumerate(samples)]


def _components(info: dict) -> dict[str, float] | None:
    """The reward components an explorer stored in an experience's info (`reward_components`), if any."""
    found = info.get("reward_components")
    if not isinstance(found, dict) or not found:
        return None
    return {str(k): float(v) for k, v in found.items()}


def explorer_teacher_scores(samples: list[Sample], advantage: str) -> list[np.ndarray]:
    """The distillation teacher's log-probabilities the explorers stored with `samples` (`explorer.teacher_model`);
    UserError when some have none (made by an explorer without a teacher, while the trainer loads none)."""
    missing = sum(s.teacher_logprobs is None for s in samples)
    if missing:
        raise UserError(
            f"algorithm.advantage_fn {advantage!r} reads a teacher's log-probability of each sampled token, and "
            f"{missing} of the batch's {len(samples)} samples have none: the trainer loads no teacher "
            "(model.teacher_model_path) and the explorers that made them scored none (explorer.teacher_model names "
            "the auxiliary model that scores them); set one of the two for every explorer of the run"
        )
    return [s.teacher_logprobs for s in samples if s.teacher_logprobs is not None]

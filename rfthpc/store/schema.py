"""What the experience store holds: one `StoredExperience` per response, one `Group` per task.

A group holds all `repeat_times` responses an explorer generated for one task; it is the unit the
writer commits and the reader hands to the trainer (group-relative advantages need the whole group).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rfthpc.errors import UserError

_INT32_MAX = np.iinfo(np.int32).max
# dtype objects: comparing with these is faster than with the scalar types, once per array.
_INT32, _FLOAT32, _INT8 = np.dtype(np.int32), np.dtype(np.float32), np.dtype(np.int8)


@dataclass
class StoredExperience:
    """One response to a task as the store keeps it, with what the trainer needs to compute its loss: a
    workflow's `rfthpc.workflows.base.Experience` as the explorer commits it (token arrays; its text,
    finish reason and reward components in `info`)."""

    prompt_ids: np.ndarray
    """int32 [P]: the prompt token ids."""
    response_ids: np.ndarray
    """int32 [R]: the generated token ids (multi-turn: all turns, environment tokens included)."""
    logprobs: np.ndarray
    """float32 [R]: the behaviour policy's log-probability of each response token."""
    loss_mask: np.ndarray
    """bool/int8 [R]: 1 where the token is trained on (multi-turn: environment tokens are 0)."""
    reward: float
    """The scalar reward of the response."""
    token_rewards: np.ndarray | None = None
    """float32 [R] or None: optional per-token rewards."""
    info: dict = field(default_factory=dict)
    """JSON-serialisable extra data (e.g. the reward function's components)."""
    teacher_logprobs: np.ndarray | None = None
    """float32 [R] or None: a distillation teacher's log-probability of each response token, where the
    explorer's teacher scored it (`rfthpc.explorer.teacher`)."""


@dataclass(frozen=True)
class TaskRef:
    """The claimed task a group was made from, as the group's `info` carries it (`claims`, `epoch`,
    `index`): what the reader trains once, and what audits count."""

    claims: str
    """The claim set (`rfthpc.config.settings.claims_name`)."""
    epoch: int
    index: int

    def info(self) -> dict[str, Any]:
        """The keys the explorer puts in the group's `info`."""
        return {"claims": self.claims, "epoch": self.epoch, "index": self.index}

    @classmethod
    def of(cls, group: Group) -> TaskRef | None:
        """The task `group` was made from; None for a group of no claim (an evaluation)."""
        info = group.info
        if info.get("claims") is None or info.get("epoch") is None or info.get("index") is None:
            return None
        return cls(str(info["claims"]), int(info["epoch"]), int(info["index"]))


BASELINE_REWARD = "baseline_reward"
"""Key of a group's `info`: the reward of one greedy response to its task, which the explorer adds
when the advantage function declares `greedy_baseline` (ReMax). Older stores have no such key."""


SUBGROUP = "subgroup"
"""Key of an experience's `info`: the experiences of one group that name different subgroups (none
names the group's own) are compared apart by group-relative advantages, e.g. the policy's responses
to a task and its replies as their judge (math_trainable_ruler_workflow), which Trinity-RFT gives
task ids of their own."""


@dataclass
class Group:
    """All `repeat_times` responses to one task: the unit of commit and of read."""

    task_id: str
    """The task's id in its taskset."""
    experiences: list[StoredExperience]
    """The responses, in generation order."""
    policy_version: int
    """The trainer step whose weights generated it (`weights/step_N`; 0 = the initial model)."""
    explorer: str
    """The explorer array's name (`explorer.name`)."""
    rank: int
    """The array task index of the explorer process."""
    group_id: str = ""
    """Unique id; the writer assigns `<explorer>/<rank>/<stream token>/<n>` when empty."""
    is_eval: bool = False
    """True for evaluation groups: metrics for the explorer, never training data."""
    created_at: float = 0.0
    """Unix time the explorer started the task."""
    finished_at: float = 0.0
    """Unix time the explorer finished the task."""
    info: dict = field(default_factory=dict)
    """JSON-serialisable extra data about the task (e.g. its epoch and index)."""
    chunk: Path | None = field(default=None, compare=False)
    """The committed chunk file it was read from (set when read; not stored)."""

    @property
    def rewards(self) -> np.ndarray:
        """float64 [len(experiences)]: the scalar rewards."""
        return np.array([e.reward for e in self.experiences], dtype=np.float64)

    @property
    def baseline_reward(self) -> float | None:
        """The reward of the greedy response to its task (`BASELINE_REWARD`), None if none was generated."""
        value = self.info.get(BASELINE_REWARD)
        return None if value is None else float(value)

    def staleness(self, current_version: int) -> int:
        """How many policy versions the trainer is ahead: `current_version - policy_version`."""
        return current_version - self.policy_version


def _where(group: Group, i: int | None = None, field: str = "") -> str:
    """Names the bad value in an error (built only when there is one: the checks run per token array)."""
    at = f"group of task {group.task_id!r}"
    if i is not None:
        at += f", experience {i}"
    return f"{at}: {field}" if field else at


def _json(group: Group, i: int | None, obj: dict) -> str:
    if not isinstance(obj, dict):
        raise UserError(f"{_where(group, i, 'info')} must be a dict, got {type(obj).__name__}")
    if not obj:
        return "{}"
    try:
        return json.dumps(obj, separators=(",", ":"), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise UserError(
            f"{_where(group, i, 'info')} is not JSON-serialisable ({e}); store plain numbers, strings, lists and dicts"
        ) from None


def _array(arr: Any) -> np.ndarray:
    return arr if type(arr) is np.ndarray else np.asarray(arr)


def _ids(group: Group, i: int, field: str, arr: Any) -> np.ndarray:
    """Token ids as a 1-D integer array (their range is checked per group by `_check_id_range`)."""
    a = _array(arr)
    if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
        raise UserError(f"{_where(group, i, field)} must be a 1-D integer array, got shape {a.shape} dtype {a.dtype}")
    return a


def out_of_range(ids: np.ndarray) -> bool:
    """True if the non-empty integer array `ids` holds a token id outside [0, 2**31): one
    reduction, since a negative id of 4 bytes or more viewed as unsigned is above the limit."""
    if ids.dtype.kind == "i":
        if ids.dtype.itemsize < 4:
            return bool(ids.min() < 0)
        ids = ids.view(ids.dtype.str.replace("i", "u"))
    return bool(ids.max() > _INT32_MAX)


def _check_id_range(group: Group, ids: list[tuple[int, str, np.ndarray]]) -> None:
    """Refuse ids outside [0, 2**31); `ids` holds (experience, field, array)."""
    arrays = [a for _, _, a in ids if a.size]
    # One reduction over the whole group when the dtypes agree: a check per array costs more than writing it.
    if not arrays or (len({a.dtype for a in arrays}) == 1 and not out_of_range(np.concatenate(arrays))):
        return
    for i, name, a in ids:
        if a.size and out_of_range(a):
            raise UserError(f"{_where(group, i, name)} holds token ids outside [0, 2**31): {a.min()}..{a.max()}")


def check_token_ids(group: Group, experiences: list[CheckedExperience]) -> None:
    """Raise UserError naming the experience and field if `experiences` (of `group`) hold a token id
    outside [0, 2**31)."""
    _check_id_range(group, [(i, name, getattr(e, name)) for i, e in enumerate(experiences)
                            for name in ("prompt_ids", "response_ids")])


def _per_token(group: Group, i: int, field: str, arr: Any, n: int, dtype: np.dtype) -> np.ndarray:
    a = _array(arr)
    if a.shape != (n,):
        raise UserError(f"{_where(group, i, field)} must have one value per response token ({n}), got shape {a.shape}")
    return a if a.dtype == dtype else a.astype(dtype)


@dataclass
class CheckedExperience:
    """A StoredExperience with arrays in their stored dtypes and info serialised (writer input)."""

    prompt_ids: np.ndarray
    response_ids: np.ndarray
    logprobs: np.ndarray
    loss_mask: np.ndarray
    reward: float
    token_rewards: np.ndarray | None
    info_json: str
    teacher_logprobs: np.ndarray | None = None


def check_group(group: Group, check_ids: bool = True) -> tuple[list[CheckedExperience], str]:
    """Validate `group` for storage; return its experiences in stored dtypes and its info as JSON.

    Raises UserError naming the task, the experience and the field when the workflow produced bad data.
    With `check_ids=False` the range of token ids that are int32 already is left to the caller,
    which must check it (`check_token_ids`; the chunk writer checks them where it copies them, in
    the same pass over memory); ids of other dtypes are checked here, before the conversion to
    int32 could hide a bad one.
    """
    if not isinstance(group.task_id, str) or not group.task_id:
        raise UserError(f"{_where(group)}: task_id must be a non-empty string")
    if not group.experiences:
        raise UserError(f"{_where(group)}: has no experiences; a group holds all repeat_times responses of one task")
    if not isinstance(group.policy_version, (int, np.integer)) or group.policy_version < 0:
        raise UserError(f"{_where(group)}: policy_version must be an integer >= 0, got {group.policy_version!r}")
    # Responses usually share one prompt array: check and convert it once, so the chunk stores it once.
    prompts: dict[int, np.ndarray] = {}
    ids: list[tuple[int, str, np.ndarray]] = []
    checked = []
    for i, e in enumerate(group.experiences):
        prompt = prompts.get(id(e.prompt_ids))
        if prompt is None:
            prompt = _ids(group, i, "prompt_ids", e.prompt_ids)
            if check_ids or prompt.dtype != _INT32:
                ids.append((i, "prompt_ids", prompt))
            prompt = prompts[id(e.prompt_ids)] = prompt if prompt.dtype == _INT32 else prompt.astype(_INT32)
        response = _ids(group, i, "response_ids", e.response_ids)
        if check_ids or response.dtype != _INT32:
            ids.append((i, "response_ids", response))
        n = response.shape[0]
        reward = float(e.reward)
        if not math.isfinite(reward):
            raise UserError(f"{_where(group, i, 'reward')} is {reward}; "
                            "the reward function must return a finite number")
        checked.append(
            CheckedExperience(
                prompt_ids=prompt,
                response_ids=response if response.dtype == _INT32 else response.astype(_INT32),
                logprobs=_per_token(group, i, "logprobs", e.logprobs, n, _FLOAT32),
                loss_mask=_per_token(group, i, "loss_mask", e.loss_mask, n, _INT8),
                reward=reward,
                token_rewards=None
                if e.token_rewards is None
                else _per_token(group, i, "token_rewards", e.token_rewards, n, _FLOAT32),
                info_json=_json(group, i, e.info),
                teacher_logprobs=None
                if e.teacher_logprobs is None
                else _per_token(group, i, "teacher_logprobs", e.teacher_logprobs, n, _FLOAT32),
            )
        )
    _check_id_range(group, ids)
    return checked, _json(group, None, group.info)

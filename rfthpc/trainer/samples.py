"""What the trainer trains on: `Sample`s, made from experience groups (RL) or dataset rows (SFT).

Experience groups come from explorers that may run another tokenizer or model by mistake, so each
group is checked before training; a bad one stops the trainer with a `UserError` naming the
group, its task, its explorer and rank, and (when it can be found) the chunk file holding it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rfthpc.errors import UserError
from rfthpc.store import Group
from rfthpc.store.layout import list_chunks, open_store

# Group ids the store's writer assigns: `<explorer>/<rank>/<stream token>/<n-th group of the stream>`.
_WRITER_GROUP_ID = re.compile(r"^(?P<explorer>[^/]+)/(?P<rank>\d+)/(?P<token>[0-9a-f]{16})/(?P<n>\d+)$")


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
    """Index of its group (task) within the batch; group-relative advantages compare these."""
    policy_version: int = 0
    """Version of the weights that generated it (`weights/step_<N>`)."""
    temperature: float = 1.0
    """Sampling temperature: log-probabilities are taken of softmax(logits / temperature)."""

    @property
    def length(self) -> int:
        """Tokens the forward pass reads: prompt + response."""
        return len(self.prompt_ids) + len(self.response_ids)


def locate_chunk(run_dir: Path, group: Group) -> Path | None:
    """The committed chunk file that holds `group`, found from its writer-assigned id (None if unknown).

    A stream's chunks are numbered in commit order and their names carry their group counts, so the
    n-th group of a stream is in the chunk where the running count passes n.
    """
    m = _WRITER_GROUP_ID.match(group.group_id)
    if m is None:
        return None
    try:
        refs = [r for r in list_chunks(open_store(run_dir)) if r.explorer == m["explorer"]
                and r.rank == int(m["rank"]) and r.token == m["token"]]
    except (OSError, UserError):
        return None
    seen = 0
    for ref in sorted(refs, key=lambda r: r.seq):
        seen += ref.n_groups
        if int(m["n"]) < seen:
            return ref.path
    return None


def _where(group: Group, run_dir: Path | None) -> str:
    chunk = locate_chunk(run_dir, group) if run_dir is not None else None
    place = f", chunk {chunk}" if chunk is not None else ""
    return (f"experience group {group.group_id!r} (task {group.task_id!r}) from explorer {group.explorer!r} "
            f"rank {group.rank}{place}")


def check_group(group: Group, vocab_size: int, max_length: int | None, run_dir: Path | None = None) -> None:
    """Raise UserError unless every experience of `group` can be trained on.

    Checks: token ids in [0, vocab_size); one behaviour logprob, loss-mask entry and (if present)
    token reward per response token; a non-empty prompt; prompt + response within `max_length`
    (the most tokens a micro-batch or the model's positions can hold).
    """
    for i, e in enumerate(group.experiences):
        problem = _experience_problem(e, vocab_size, max_length)
        if problem is not None:
            raise UserError(
                f"{_where(group, run_dir)}, experience {i}: {problem}. The explorer produced data this trainer "
                "cannot train on; check that explorers and trainer use the same model and tokenizer, then "
                "remove or quarantine that chunk (`rfthpc store inspect`)"
            )


def _experience_problem(e, vocab_size: int, max_length: int | None) -> str | None:
    n = len(e.response_ids)
    for name, arr in (("logprobs", e.logprobs), ("loss_mask", e.loss_mask), ("token_rewards", e.token_rewards)):
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
    run_dir: Path | None = None,
) -> list[Sample]:
    """Check `groups` and flatten them into samples; sample.group is the group's index in `groups`.

    The temperature of a group is `group.info["temperature"]` when the explorer recorded it, else
    `temperature` (the config's): log-probabilities must be taken at the sampling temperature.
    """
    samples = []
    for g_index, group in enumerate(groups):
        check_group(group, vocab_size, max_length, run_dir)
        t = float(group.info.get("temperature", temperature) or 1.0)
        for e in group.experiences:
            samples.append(
                Sample(
                    prompt_ids=np.asarray(e.prompt_ids, dtype=np.int64),
                    response_ids=np.asarray(e.response_ids, dtype=np.int64),
                    loss_mask=np.asarray(e.loss_mask).astype(bool),
                    reward=float(e.reward),
                    behaviour_logprobs=np.asarray(e.logprobs, dtype=np.float32),
                    token_rewards=None if e.token_rewards is None else np.asarray(e.token_rewards, np.float32),
                    group=g_index,
                    policy_version=int(group.policy_version),
                    temperature=t,
                )
            )
    return samples

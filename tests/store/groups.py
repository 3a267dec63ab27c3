"""Small groups for the store tests, with content derived from their arguments."""

from __future__ import annotations

import numpy as np

from rfthpc.store.schema import Group
from rfthpc.store.schema import StoredExperience as Experience


def make_group(
    task: str,
    version: int = 0,
    explorer: str = "ex",
    rank: int = 0,
    responses: int = 2,
    tokens: int = 5,
    is_eval: bool = False,
) -> Group:
    """A group of `responses` responses of `tokens` tokens whose values encode the task name."""
    base = sum(map(ord, task))
    return Group(
        task_id=task,
        experiences=[
            Experience(
                prompt_ids=np.arange(3) + base,
                response_ids=np.arange(tokens) + base + 10 * i,
                logprobs=np.full(tokens, -0.5 - i, np.float32),
                loss_mask=np.ones(tokens, np.int8),
                reward=float(i),
            )
            for i in range(responses)
        ],
        policy_version=version,
        explorer=explorer,
        rank=rank,
        is_eval=is_eval,
    )


def assert_same_experiences(read: Group, written: Group) -> None:
    """The experiences of a group read back equal those written (stored dtypes: float32 logprobs, int8 mask)."""
    assert len(read.experiences) == len(written.experiences)
    for r, w in zip(read.experiences, written.experiences):
        np.testing.assert_array_equal(r.prompt_ids, w.prompt_ids)
        np.testing.assert_array_equal(r.response_ids, w.response_ids)
        np.testing.assert_array_equal(r.logprobs, np.asarray(w.logprobs, np.float32))
        np.testing.assert_array_equal(r.loss_mask, np.asarray(w.loss_mask, np.int8))
        assert r.reward == w.reward and r.info == w.info
        for name in ("token_rewards", "teacher_logprobs"):
            if getattr(w, name) is None:
                assert getattr(r, name) is None
            else:
                np.testing.assert_array_equal(getattr(r, name), getattr(w, name))

"""Bad data from a workflow is refused at `ChunkWriter.add` with a message naming the task and field."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rfthpc.errors import UserError
from rfthpc.store.schema import Group, check_group
from rfthpc.store.schema import StoredExperience as Experience
from rfthpc.store.writer import ChunkWriter

from .groups import make_group


def _one(**changes: object) -> Group:
    fields = {"prompt_ids": np.arange(3), "response_ids": np.arange(4), "logprobs": np.zeros(4),
              "loss_mask": np.ones(4), "reward": 1.0}
    fields.update(changes)
    return Group("task-7", [Experience(**fields)], policy_version=0, explorer="ex", rank=0)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"logprobs": np.zeros(3)}, r"task-7.*experience 0: logprobs must have one value per response token \(4\)"),
        ({"loss_mask": np.ones(5)}, r"loss_mask must have one value per response token"),
        ({"token_rewards": np.ones(2)}, r"token_rewards must have one value"),
        ({"teacher_logprobs": np.ones(3)}, r"teacher_logprobs must have one value"),
        ({"response_ids": np.array([0.5, 1.5])}, r"response_ids must be a 1-D integer array"),
        ({"prompt_ids": np.arange(4).reshape(2, 2)}, r"prompt_ids must be a 1-D integer array"),
        ({"response_ids": np.array([1, -3, 2, 2])}, r"response_ids holds token ids outside"),
        ({"prompt_ids": np.array([2**40])}, r"prompt_ids holds token ids outside"),
        ({"reward": float("nan")}, r"reward is nan"),
        ({"info": {"x": object()}}, r"info is not JSON-serialisable"),
    ],
)
def test_bad_experience_is_a_user_error(changes: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        check_group(_one(**changes))


def test_bad_group_is_a_user_error() -> None:
    with pytest.raises(UserError, match="has no experiences"):
        check_group(Group("t", [], 0, "ex", 0))
    with pytest.raises(UserError, match="policy_version must be an integer >= 0"):
        check_group(make_group("t", version=-1))


def test_writer_refuses_bad_names_and_foreign_groups(run_dir: Path) -> None:
    with pytest.raises(UserError, match="explorer name '../x' is not a valid name"):
        ChunkWriter(run_dir, "../x", 0)
    with pytest.raises(UserError, match="explorer name '_quarantine'"):
        ChunkWriter(run_dir, "_quarantine", 0)
    w = ChunkWriter(run_dir, "ex", 0)
    with pytest.raises(UserError, match="says explorer 'other' rank 0, but this writer is explorer 'ex'"):
        w.add(make_group("t", explorer="other"))
    with pytest.raises(UserError, match="logprobs"):
        w.add(_one(logprobs=np.zeros(1)))
    assert w.buffered == 0


def test_staleness_is_current_minus_policy_version() -> None:
    assert make_group("t", version=3).staleness(5) == 2

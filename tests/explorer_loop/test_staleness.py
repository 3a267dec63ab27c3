"""The staleness bound and evaluation cadence, against hand-computed numbers."""

from __future__ import annotations

import pytest

from rfthpc.explorer.eval import eval_due
from rfthpc.explorer.staleness import expected_train_step, required_version, servable, staleness, taskset_offsets


def test_expected_step_counts_batches_from_the_stage_start() -> None:
    # batch_size 4: serials 0-3 feed step 1, 4-7 step 2; an SFT stage of 60 steps shifts everything by 60.
    assert [expected_train_step(0, s, 4) for s in (0, 3, 4, 7, 8)] == [1, 1, 2, 2, 3]
    assert expected_train_step(60, 0, 4) == 61
    # A second taskset whose 10 predecessors' tasks came first: serial 0 is the 11th task -> step 3.
    assert expected_train_step(0, 0, 4, offset=10) == 3
    with pytest.raises(ValueError):
        expected_train_step(0, 0, 0)


def test_lock_step_waits_for_the_previous_step_weights() -> None:
    # max_staleness 0 (sync_interval 1, sync_offset 0): step t needs version t - 1.
    assert required_version(1, 0) == 0
    assert required_version(5, 0) == 4
    # sync_interval 2 (max_staleness 1): step 5 accepts version 3 or newer.
    assert required_version(5, 1) == 3
    assert required_version(1, 3) == 0
    assert staleness(5, 3) == 1
    assert staleness(61, 60) == 0


def test_a_batch_spanning_two_steps_serves_the_earlier_one_with_the_policy_held() -> None:
    # A restarted explorer's batch: its predecessor's three returned tasks of step 6, a fresh one of step 7.
    # Holding version 5 in lock step, the step-6 tasks go now (step 7 needs version 6, which the trainer
    # publishes only after training on the step-6 groups).
    assert servable([6, 6, 6, 7], 0, held=5) == [0, 1, 2]
    assert servable([6, 6, 6, 7], 1, held=5) == [0, 1, 2, 3]
    assert servable([7, 7, 7, 7], 0, held=5) == []


def test_taskset_offsets_follow_the_task_budget() -> None:
    assert taskset_offsets([10, 6], None) == [(0, None), (10, None)]
    # total_steps x batch_size = 12 tasks: all of the first 10, then 2 of the second.
    assert taskset_offsets([10, 6], 12) == [(0, 10), (10, 2)]
    assert taskset_offsets([10, 6], 8) == [(0, 8), (8, 0)]


def test_eval_every_interval_versions() -> None:
    assert not eval_due(5, None, 10)
    assert eval_due(10, 0, 10)
    assert not eval_due(9, 0, 10)
    # Versions jump by sync_interval: crossing a multiple counts even without landing on it.
    assert eval_due(12, 9, 10)
    assert not eval_due(19, 12, 10)
    assert not eval_due(20, 20, 10)
    assert not eval_due(30, 0, 0)

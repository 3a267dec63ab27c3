"""ChunkWriter: what it commits is exactly what was added, chunk after chunk, whatever the shapes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rfthpc.errors import UserError
from rfthpc.store.chunks import read_chunk
from rfthpc.store.layout import list_chunks
from rfthpc.store.schema import Group
from rfthpc.store.schema import StoredExperience as Experience
from rfthpc.store.writer import ChunkWriter

from .groups import assert_same_experiences, make_group


def _committed(run_dir: Path) -> list[list[Group]]:
    refs = sorted(list_chunks(run_dir / "experiences"), key=lambda r: r.seq)
    return [read_chunk(r.path)[1] for r in refs]


def _assert_same(read: Group, written: Group) -> None:
    assert (read.task_id, read.group_id, read.policy_version, read.info) == (
        written.task_id, written.group_id, written.policy_version, written.info)
    assert_same_experiences(read, written)


def _group(task: str, lengths: list[int], token_rewards: bool = False, shared_prompt: bool = True,
           teacher: bool = False) -> Group:
    """A group whose responses have the given lengths; values derived from the task name."""
    rng = np.random.default_rng(sum(map(ord, task)))
    prompt = rng.integers(0, 1000, 4, dtype=np.int32)
    return Group(
        task_id=task,
        experiences=[
            Experience(
                prompt_ids=prompt if shared_prompt else rng.integers(0, 1000, 2 + i, dtype=np.int64),
                response_ids=rng.integers(0, 1000, n, dtype=np.int32),
                logprobs=-rng.random(n, dtype=np.float32),
                loss_mask=rng.integers(0, 2, n).astype(bool),
                reward=float(i),
                token_rewards=rng.random(n, dtype=np.float32) if token_rewards else None,
                info={"i": i},
                teacher_logprobs=-rng.random(n, dtype=np.float32) if teacher else None,
            )
            for i, n in enumerate(lengths)
        ],
        policy_version=1,
        explorer="ex",
        rank=0,
        info={"task": task},
    )


def test_chunks_of_changing_shapes_round_trip_exactly(run_dir: Path) -> None:
    # Chunk 0: small groups, the second with token rewards and a teacher's log-probabilities; chunk 1: far
    # longer responses than chunk 0 reserved room for, prompts that differ per response, a teacher's scores in
    # the first group only; chunk 2: neither.
    groups = [
        _group("a", [3, 5]), _group("b", [2, 0, 4], token_rewards=True, teacher=True),
        _group("c", [400, 1], teacher=True), _group("d", [7, 300], shared_prompt=False),
        _group("e", [6]), _group("f", [9, 9]),
    ]
    with ChunkWriter(run_dir, "ex", 0, groups_per_chunk=2, max_chunk_delay_s=60) as w:
        for g in groups:
            w.add(g)
    chunks = _committed(run_dir)
    assert [len(c) for c in chunks] == [2, 2, 2]
    for read, written in zip([g for c in chunks for g in c], groups):
        _assert_same(read, written)
    assert chunks[0][0].experiences[0].token_rewards is None  # has_token_rewards is per experience
    assert chunks[0][0].experiences[0].teacher_logprobs is None  # so are a teacher's scores (NaN: none)
    assert chunks[1][1].experiences[1].teacher_logprobs is None


def test_the_caller_may_reuse_a_group_once_it_is_added(run_dir: Path) -> None:
    group = _group("a", [5, 5])
    kept = _group("a", [5, 5])
    with ChunkWriter(run_dir, "ex", 0, groups_per_chunk=2, max_chunk_delay_s=60) as w:
        w.add(group)
        kept.group_id = group.group_id
        for e in group.experiences:
            e.prompt_ids[:] = 0
            e.response_ids[:] = 0
            e.logprobs[:] = 0
        group.experiences.append(group.experiences[0])
        group.task_id = "changed"
    _assert_same(_committed(run_dir)[0][0], kept)


@pytest.mark.parametrize(
    ("field", "bad", "message"),
    [
        ("response_ids", np.array([1, -3, 2], np.int32),
         r"task 'bad', experience 1: response_ids holds token ids outside"),
        ("response_ids", np.array([1, 2**40, 2]), r"experience 1: response_ids holds token ids outside"),
        ("prompt_ids", np.array([2**31], np.int64), r"experience 1: prompt_ids holds token ids outside"),
        ("prompt_ids", np.array([-1, 5], np.int32), r"experience 1: prompt_ids holds token ids outside"),
    ],
)
def test_bad_token_ids_are_refused_at_add_and_nothing_of_the_group_is_kept(
    run_dir: Path, field: str, bad: np.ndarray, message: str
) -> None:
    good = [make_group(t, tokens=3) for t in ("t1", "t2", "t3")]
    bad_group = make_group("bad", tokens=3)
    setattr(bad_group.experiences[1], field, bad)
    with ChunkWriter(run_dir, "ex", 0, groups_per_chunk=3, max_chunk_delay_s=60) as w:
        w.add(good[0])
        with pytest.raises(UserError, match=message):
            w.add(bad_group)
        assert w.buffered == 1 and w.groups_added == 1 and not bad_group.group_id
        w.add(good[1])
        w.add(good[2])
    (chunk,) = _committed(run_dir)
    for read, written in zip(chunk, good, strict=True):
        _assert_same(read, written)

"""DAPO's dynamic sampling and overlong penalty, and ReMax's greedy baseline, in the real explorer on the
tiny model (transformers engine, in process): what reaches the store, what the claims record, what the
trainer makes of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.algorithms.shaping import OverlongPenalty
from rfthpc.explorer.loop import GenerationBudgetExceeded
from rfthpc.store import StoreReader
from tests.explorer_loop.conftest import (
    USER_REWARDS,
    claims_state,
    explorer,
    groups,
    make_run,
    metrics,
    progress,
    taskset,
    write_jsonl,
)


def _tasks(tmp_path: Path, truths: list[str], reward: str) -> dict:
    records = [{"question": f"What is {i} plus {i}?", "answer": truth} for i, truth in enumerate(truths)]
    return taskset("arith", write_jsonl(tmp_path / "train.jsonl", records), default_workflow_type="simple_workflow",
                   default_reward_fn_type=f"{USER_REWARDS}:{reward}")


def test_a_group_without_contrast_is_replaced_by_a_fresh_task(tmp_path: Path, tiny_model: Path) -> None:
    """One trainer step of 2 groups. Task 1's responses all score 0.5: it is not committed, its claim is
    completed without a group, and the claim set hands out task 2 in its place, which the trainer
    consumes in task 1's place (trainer step 1, the first). Task 3 is never needed."""
    ts = _tasks(tmp_path, ["vary", "constant", "vary", "vary"], "constant_unless_vary")
    run = make_run(tmp_path, tiny_model, [ts], buffer={"total_steps": 1},
                   algorithm={"filter_groups": {"enable": True}})
    # The trainer consumes the claim set: the groups it does not get are replaced (the refill).
    StoreReader(run).track_tasksets(["arith"])
    assert explorer(run).run() == 0

    committed = groups(run)
    assert [g.task_id for g in committed] == ["arith/0", "arith/2"]
    assert [g.info["expected_step"] for g in committed] == [1, 1]
    assert all(len(set(g.rewards)) == 2 for g in committed)
    state = claims_state(run, "arith")
    assert (state["issued"], state["completed"], state["failed"], state["refill"]) == (3, 3, 1, 1)
    assert not state["outstanding"] and not state["returned"]
    assert progress(run)["groups_filtered"] == 1 and progress(run)["groups_committed"] == 2
    records = metrics(run)
    assert [r["rollout/filtered_groups"] for r in records] == [1, 0]
    assert [r["rollout/groups"] for r in records] == [1, 1]


def test_an_explorer_that_keeps_nothing_stops_after_max_num_gen_batches(tmp_path: Path, tiny_model: Path) -> None:
    """Every group lacks contrast: after 2 batches without a share of a trainer batch the explorer
    stops with the reason; the tasks it explored are completed (exactly once), none left claimed."""
    ts = _tasks(tmp_path, ["constant"] * 8, "constant_unless_vary")
    run = make_run(tmp_path, tiny_model, [ts], buffer={"total_steps": 2},
                   algorithm={"filter_groups": {"enable": True, "metric": "accuracy", "max_num_gen_batches": 2}})
    StoreReader(run).track_tasksets(["arith"])
    with pytest.raises(GenerationBudgetExceeded, match=r"2 batches explored kept 0 group\(s\).*metric 'accuracy'"):
        explorer(run).run()
    assert groups(run) == []
    state = claims_state(run, "arith")
    assert (state["completed"], state["failed"]) == (4, 4)
    assert not state["outstanding"] and not state["returned"]
    assert progress(run)["groups_filtered"] == 4


def test_the_overlong_penalty_is_added_to_each_reward(tmp_path: Path, tiny_model: Path) -> None:
    """max_response_tokens 8, a buffer of 4: a response of L tokens gets (4 - L) / 4 * 0.5 for L in
    (4, 8], on top of its reward (its length in characters); the penalty is recorded per response."""
    ts = _tasks(tmp_path, ["a", "b"], "response_length")
    run = make_run(tmp_path, tiny_model, [ts],
                   algorithm={"overlong_buffer": {"enable": True, "len": 4, "penalty_factor": 0.5}})
    assert explorer(run).run() == 0
    penalty = OverlongPenalty(max_len=8, buffer_len=4, penalty_factor=0.5)
    experiences = [e for g in groups(run) for e in g.experiences]
    assert len(experiences) == 4
    for e in experiences:
        expected = penalty.penalty(len(e.response_ids))
        assert e.info["overlong_penalty"] == expected
        assert e.reward == len(e.info["response_text"]) + expected
    # The untrained tiny model rarely stops early: at least one response reaches into the buffer.
    assert any(e.info["overlong_penalty"] < 0 for e in experiences)


@pytest.mark.parametrize("engine_type", ["transformers",
                                         pytest.param("vllm", marks=[pytest.mark.slow, pytest.mark.vllm])])
def test_remax_stores_the_greedy_responses_reward_and_the_trainer_subtracts_it(tmp_path: Path, tiny_model: Path,
                                                                               engine_type: str) -> None:
    """The greedy runs share the engine calls of the sampled ones (vLLM: one call, a SamplingParams each)."""
    from rfthpc.config import load_resolved
    from rfthpc.config.settings import AlgorithmSettings
    from rfthpc.engines import EngineSettings, make_engine
    from rfthpc.engines.sampling import SamplingArgs
    from rfthpc.trainer.losses import Algorithm
    from rfthpc.trainer.rl_batch import build_step_tensors
    from rfthpc.trainer.samples import samples_from_groups
    from tests.explorer_loop.user_rewards import response_length

    ts = _tasks(tmp_path, ["a", "b"], "response_length")
    run = make_run(tmp_path, tiny_model, [ts], algorithm={"algorithm_type": "remax", "repeat_times": 2},
                   model={"min_response_tokens": 0},
                   explorer={"rollout_model": {"engine_type": engine_type, "cpu_kvcache_space_gb": 1}})
    assert explorer(run).run() == 0
    committed = groups(run)
    assert sorted(g.task_id for g in committed) == ["arith/0", "arith/1"]

    # The greedy response, generated again here: its reward is the one stored with the group.
    engine = make_engine("transformers", EngineSettings(str(tiny_model), seed=123, min_response_tokens=0))
    try:
        for g in committed:
            (greedy,) = engine.generate([g.experiences[0].prompt_ids.tolist()], 1,
                                        SamplingArgs(temperature=0.0, max_tokens=8))[0]
            assert g.baseline_reward == response_length(greedy.text, "")
            assert g.info["temperature"] == 1.0  # the sampled responses, not the greedy one, are stored
            assert len(g.experiences) == 2
    finally:
        engine.close()
    assert metrics(run)[-1]["rollout/baseline_reward_mean"] == committed[-1].baseline_reward

    # The trainer's batch: every response token gets reward - baseline.
    stage = load_resolved(run / "config.yaml").stages[0].config
    algorithm = Algorithm.from_settings(AlgorithmSettings.of(stage.algorithm))
    samples = samples_from_groups(committed, vocab_size=10**6, max_length=None)
    tensors, _ = build_step_tensors(samples, algorithm)
    for row, s in enumerate(samples):
        on = tensors.advantages[row][tensors.mask[row]]
        assert on.tolist() == pytest.approx([s.reward - s.baseline_reward] * len(on))

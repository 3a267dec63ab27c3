"""Judging workflows in a real explorer (transformers engines, in process): rubric_judge_workflow asks
the auxiliary model through the explorer's request batcher, and its verdicts reach the store;
math_trainable_ruler_workflow's judgements reach it beside the responses they judge."""

from __future__ import annotations

from pathlib import Path

from tests.explorer_loop.conftest import explorer, groups, make_run, metrics, write_jsonl


def test_rubric_judge_workflow_in_an_explorer(tmp_path: Path, tiny_model: Path) -> None:
    rubric = [{"weight": 1, "description": "Names a number"}]
    data = write_jsonl(tmp_path / "train.jsonl", [
        {"question": f"Name a number above {i}.", "answer": "", "rubric": rubric} for i in range(2)])
    ts = {"name": "rubric", "path": str(data), "default_workflow_type": "rubric_judge_workflow", "repeat_times": 2,
          "format": {"prompt_key": "question", "response_key": "answer"}, "rollout_args": {"max_tokens": 4}}
    judge = {"name": "judge", "model_path": str(tiny_model), "engine_type": "transformers", "placement": "per_explorer",
             "max_prompt_tokens": 1536, "max_response_tokens": 6}
    # Trinity's policy system prompt and judge prompts are long for the tiny model's limits of other tests.
    run = make_run(tmp_path, tiny_model, [ts], model={"max_prompt_tokens": 256},
                   explorer={"auxiliary_models": [judge]})
    assert explorer(run).run() == 0
    found = groups(run)
    assert sorted(g.task_id for g in found) == ["rubric/0", "rubric/1"]
    for g in found:
        for e in g.experiences:
            # The untrained judge writes no fenced rating in 6 tokens: no verdict, reward 0, its reply kept.
            assert e.info["judge_success"] is False and isinstance(e.info["judge_reply"], str)
            assert e.info["reward_components"] == {"rubric": 0.0}
        assert list(g.rewards) == [0.0, 0.0]


def test_trainable_ruler_judgements_reach_the_store_as_their_own_advantage_groups(tmp_path: Path,
                                                                                  tiny_model: Path) -> None:
    """math_trainable_ruler_workflow with the reference answer always available: each task's group holds its
    responses and the policy's judgements of them (subgroup `judge`), and the trainer compares the two apart."""
    from rfthpc.trainer.samples import advantage_groups, samples_from_groups

    data = write_jsonl(tmp_path / "train.jsonl", [{"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"}
                                                  for i in range(2)])
    ts = {"name": "ruler", "path": str(data), "default_workflow_type": "math_trainable_ruler_workflow",
          "repeat_times": 2, "workflow_args": {"ground_truth_probability": 1},
          "format": {"prompt_key": "question", "response_key": "answer"}, "rollout_args": {"max_tokens": 4}}
    # RULER's judge prompt, with Trinity's wording, is long for the tiny model's limits of other tests.
    run = make_run(tmp_path, tiny_model, [ts], model={"max_prompt_tokens": 1200})
    assert explorer(run).run() == 0
    found = sorted(groups(run), key=lambda g: g.task_id)
    assert [g.task_id for g in found] == ["ruler/0", "ruler/1"]
    for g in found:
        assert [e.info.get("subgroup") for e in g.experiences] == [None, None, "judge", "judge"]
        assert g.info["ground_truth"] is True
        # The untrained policy writes no list of scores in 4 tokens: every judgement is rewarded 0.
        assert [e.reward for e in g.experiences[2:]] == [0.0, 0.0]
        assert g.experiences[2].prompt_ids.tolist() != g.experiences[0].prompt_ids.tolist()
    (record,) = [m for m in metrics(run) if "rollout/reward_mean" in m]
    assert record["rollout/judge_success"] == 0.0 and 0.0 <= record["rollout/gold_reward"] <= 1.0
    samples = samples_from_groups(found, vocab_size=384, max_length=None)
    assert advantage_groups(samples) == [0, 0, 1, 1, 2, 2, 3, 3]

"""A judging workflow in a real explorer (transformers engines, in process): rubric_judge_workflow asks
the auxiliary model through the explorer's request batcher, and its verdicts reach the store."""

from __future__ import annotations

from pathlib import Path

from tests.explorer_loop.conftest import explorer, groups, make_run, write_jsonl


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

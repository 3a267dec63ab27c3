"""Bad input meets the explorer (transformers engine, in process): missing data or keys stop it with a
UserError before an engine starts; over-long prompts are truncated or skipped, and counted; a reward
function that raises marks its group and the explorer goes on."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.errors import UserError
from rfthpc.rundir.paths import RunDir
from rfthpc.rundir.trainer_meta import TrainerMeta, write_trainer_meta
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

LONG = " ".join(["Tom has many apples and many pears in many baskets."] * 40) + " How many apples?"


def test_missing_dataset_file(tmp_path: Path, tiny_model: Path, questions) -> None:
    data = write_jsonl(tmp_path / "train.jsonl", questions)
    run = make_run(tmp_path, tiny_model, [taskset("arith", data)])
    data.unlink()
    ex = explorer(run)
    with pytest.raises(UserError, match=r"dataset path .*train.jsonl does not exist"):
        ex.run()
    assert not ex.engines, "no engine is started for bad data"


def test_missing_prompt_key(tmp_path: Path, tiny_model: Path, questions) -> None:
    """Validation reads the columns before the queue; data replaced after the submit is still
    reported by the explorer, before an engine starts."""
    data = write_jsonl(tmp_path / "train.jsonl", [{"problem": q["question"], "answer": q["answer"]} for q in questions])
    ts = taskset("arith", data)
    ts["format"]["prompt_key"] = "problem"
    run = make_run(tmp_path, tiny_model, [ts])
    write_jsonl(data, questions)
    with pytest.raises(UserError, match=r"format.prompt_key='problem' is not a column.*question, answer"):
        explorer(run).run()


@pytest.mark.parametrize("truncate", [True, False])
def test_overlong_prompt_is_truncated_or_skipped(tmp_path: Path, tiny_model: Path, truncate: bool) -> None:
    records = [{"question": "What is 1 plus 1?", "answer": "2"}, {"question": LONG, "answer": "3"},
               {"question": "What is 2 plus 2?", "answer": "4"}]
    data = write_jsonl(tmp_path / "train.jsonl", records)
    ts = taskset("arith", data, default_workflow_type="simple_workflow", default_reward_fn_type="format_reward")
    run = make_run(tmp_path, tiny_model, [ts], buffer={"batch_size": 3},
                   model={"max_prompt_tokens": 48, "enable_prompt_truncation": truncate})
    assert explorer(run).run() == 0
    by_task = {g.task_id: g for g in groups(run)}
    last = metrics(run)[-1]
    assert claims_state(run, "arith")["completed"] == 3
    if truncate:
        assert sorted(by_task) == ["arith/0", "arith/1", "arith/2"]
        long_group = by_task["arith/1"]
        assert long_group.info["prompt_truncated"] is True
        assert all(len(e.prompt_ids) <= 48 for e in long_group.experiences)
        assert last["rollout/prompt_truncated"] == 1 and last["rollout/prompt_skipped"] == 0
    else:
        assert sorted(by_task) == ["arith/0", "arith/2"]
        assert last["rollout/prompt_skipped"] == 1 and last["rollout/prompt_truncated"] == 0
    assert not by_task["arith/0"].info["prompt_truncated"]


def test_a_group_the_store_refuses_stops_the_explorer_and_returns_its_tasks(tmp_path: Path, tiny_model: Path) -> None:
    """Workflow output the store cannot keep is a UserError naming the task; the task and those after
    it in the batch go back to the pool (not counted as done), and the groups stored before it stay."""
    records = [{"question": f"What is {i} plus {i}?", "answer": "bad" if i == 1 else str(2 * i)} for i in range(4)]
    data = write_jsonl(tmp_path / "train.jsonl", records)
    ts = taskset("arith", data, default_workflow_type="tests.explorer_loop.user_workflows:unstorable_info",
                 default_reward_fn_type="format_reward")
    run = make_run(tmp_path, tiny_model, [ts], buffer={"batch_size": 4})
    with pytest.raises(UserError, match=r"arith/1.*info.*not JSON-serialisable"):
        explorer(run).run()
    assert [g.task_id for g in groups(run)] == ["arith/0"]
    state = claims_state(run, "arith")
    assert state["completed"] == 1 and state["failed"] == 0 and not state["outstanding"]
    assert sorted(index for _, index, _ in state["returned"]) == [1, 2, 3]


def test_reward_function_that_raises_marks_its_group(tmp_path: Path, tiny_model: Path, caplog) -> None:
    records = [{"question": "What is 1 plus 1?", "answer": "2"}, {"question": "What is 2 plus 2?", "answer": "boom"},
               {"question": "What is 3 plus 3?", "answer": "6"}, {"question": "What is 4 plus 4?", "answer": "8"}]
    data = write_jsonl(tmp_path / "train.jsonl", records)
    ts = taskset("arith", data, default_workflow_type="simple_workflow",
                 default_reward_fn_type=f"{USER_REWARDS}:explode")
    run = make_run(tmp_path, tiny_model, [ts])
    assert explorer(run).run() == 0
    by_task = {g.task_id: g for g in groups(run)}
    assert sorted(by_task) == [f"arith/{i}" for i in range(4)]
    bad = by_task["arith/1"]
    assert "reward server unreachable" in bad.info["reward_error"]
    assert list(bad.rewards) == [0.0, 0.0]
    for task in ("arith/0", "arith/2", "arith/3"):
        assert "reward_error" not in by_task[task].info and list(by_task[task].rewards) == [1.0, 1.0]
    assert sum(m.get("rollout/reward_errors", 0) for m in metrics(run)) == 1
    assert "reward server unreachable" in caplog.text
    assert progress(run)["state"] == "done" and progress(run)["groups_committed"] == 4


def test_nothing_to_do_once_the_trainer_is_done(tmp_path: Path, tiny_model: Path, questions) -> None:
    data = write_jsonl(tmp_path / "train.jsonl", questions)
    run = make_run(tmp_path, tiny_model, [taskset("arith", data)])
    write_trainer_meta(RunDir(run), TrainerMeta(step=3, stage="rft", done=True))
    assert explorer(run).run() == 0
    assert groups(run) == []
    assert not (run / "weights" / ".readers" / "explorer-0.json").exists()

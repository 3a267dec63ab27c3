"""Taskset `format`, `rollout_args`, the thinking switch and auxiliary model keys reach the engines
(transformers engine, in process): the committed groups show the prompts and samples they shaped."""

from __future__ import annotations

from pathlib import Path

from tests.explorer.test_prompt_format import THINKING_TEMPLATE
from tests.explorer_loop.conftest import explorer, groups, make_run, write_jsonl

HERE = "tests.explorer_loop.user_workflows"


def test_chat_data_system_prompts_reply_prefix_and_thinking_switch(tmp_path: Path, tiny_model: Path) -> None:
    records = [
        {"chat": [{"role": "user", "content": "What is 1 plus 1?"}], "answer": "#### 2", "sys": "Be brief."},
        {"chat": [{"role": "system", "content": "Own."}, {"role": "user", "content": "What is 2 plus 2?"}],
         "answer": "#### 4", "sys": ""},
    ]
    data = write_jsonl(tmp_path / "chat.jsonl", records)
    ts = {"name": "chat", "path": str(data), "format": {
        "prompt_type": "messages", "messages_key": "chat", "response_key": "answer", "system_prompt_key": "sys",
        "system_prompt": "Taskset's.", "reply_prefix": "Answer:"}}
    run = make_run(tmp_path, tiny_model, [ts],
                   model={"custom_chat_template": THINKING_TEMPLATE, "enable_thinking": False})
    assert explorer(run).run() == 0
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    prompts = {g.task_id: tok.decode(g.experiences[0].prompt_ids) for g in groups(run)}
    opening = "<|im_start|>assistant\n<think>\n\n</think>\n\nAnswer:"
    assert prompts == {
        "chat/0": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 1 plus 1?<|im_end|>\n" + opening,
        "chat/1": "<|im_start|>system\nOwn.<|im_end|>\n<|im_start|>user\nWhat is 2 plus 2?<|im_end|>\n" + opening,
    }


def test_seeds_top_logprobs_and_auxiliary_model_settings(tmp_path: Path, tiny_model: Path, questions) -> None:
    data = write_jsonl(tmp_path / "train.jsonl", questions[:2])

    def taskset(name: str, seed: int) -> dict:
        return {"name": name, "path": str(data), "default_workflow_type": f"{HERE}:judged",
                "format": {"prompt_key": "question", "response_key": "answer"},
                "rollout_args": {"seed": seed, "temperature": 1.0, "logprobs": 2}}

    judge = {"name": "judge", "model_path": str(tiny_model), "engine_type": "transformers",
             "chat_template": THINKING_TEMPLATE, "enable_thinking": False, "max_response_tokens": 2}
    run = make_run(tmp_path, tiny_model, [taskset("a", 7), taskset("b", 7), taskset("c", 8)],
                   explorer={"auxiliary_models": [judge]})
    assert explorer(run).run() == 0
    responses: dict[str, list[list[int]]] = {}
    for g in groups(run):
        responses[g.task_id] = [e.response_ids.tolist() for e in g.experiences]
        for e in g.experiences:
            assert e.info["top_logprobs"] == [2] * len(e.response_ids)
            assert e.info["judge_prompt"].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
            assert 1 <= e.info["judge_tokens"] <= 2
    assert sorted(responses) == ["a/0", "a/1", "b/0", "b/1", "c/0", "c/1"]
    # One seed, one policy, one prompt: the same responses; another seed: others.
    assert [responses["a/0"], responses["a/1"]] == [responses["b/0"], responses["b/1"]]
    assert [responses["a/0"], responses["a/1"]] != [responses["c/0"], responses["c/1"]]

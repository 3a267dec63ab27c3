"""Taskset `format`, `rollout_args`, the thinking switch and auxiliary model keys reach the engines
(transformers engine, in process): the committed groups show the prompts and samples they shaped; each
engine is built on its own GPUs."""

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

    judge = {"name": "judge", "model_path": str(tiny_model), "engine_type": "transformers", "placement": "per_explorer",
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


def test_temperature_below_the_greedy_threshold_is_greedy_decoding(tmp_path: Path, tiny_model: Path, questions) -> None:
    """vLLM decodes greedily below temperature 1e-5: so does the transformers engine, and the group says
    temperature 0, so the trainer takes logprobs of the plain logits (as the engine did), not logits / 1e-6."""
    import torch

    from tests.engines.helpers import forward_logprobs, load_hf

    ts = {"name": "cold", "path": str(write_jsonl(tmp_path / "train.jsonl", questions[:2])), "repeat_times": 3,
          "format": {"prompt_key": "question", "response_key": "answer"}, "rollout_args": {"temperature": 1e-6}}
    run = make_run(tmp_path, tiny_model, [ts], model={"min_response_tokens": 0})
    assert explorer(run).run() == 0
    model = load_hf(tiny_model)
    for g in groups(run):
        assert g.info["temperature"] == 0.0
        assert len({tuple(e.response_ids.tolist()) for e in g.experiences}) == 1
        for e in g.experiences:
            ref = forward_logprobs(model, e.prompt_ids.tolist(), e.response_ids.tolist(), g.info["temperature"])
            assert float((torch.from_numpy(e.logprobs) - ref).abs().max()) <= 1e-5


def test_each_engine_is_built_on_its_own_gpus(tmp_path: Path, tiny_model: Path, questions, monkeypatch) -> None:
    """The rollout engine on the first GPUs of the task, the auxiliary model on the next: the environment
    each engine is built in. (This machine has no GPU: the explorer is told it sees three.)"""
    import os

    from rfthpc.engines import make_engine

    monkeypatch.setattr("rfthpc.explorer.loop.process_gpus", lambda: ["4", "5", "6"])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")
    built: list[str | None] = []

    def factory(engine_type, settings):
        built.append(os.environ.get("CUDA_VISIBLE_DEVICES"))
        return make_engine(engine_type, settings)

    judge = {"name": "judge", "model_path": str(tiny_model), "engine_type": "transformers", "tensor_parallel_size": 2,
             "placement": "per_explorer"}
    ts = {"name": "a", "path": str(write_jsonl(tmp_path / "train.jsonl", questions[:2])),
          "default_workflow_type": f"{HERE}:judged", "format": {"prompt_key": "question", "response_key": "answer"}}
    run = make_run(tmp_path, tiny_model, [ts], explorer={"auxiliary_models": [judge]})
    assert explorer(run, engine_factory=factory).run() == 0
    assert built == ["4", "5,6"] and os.environ["CUDA_VISIBLE_DEVICES"] == "4,5,6"

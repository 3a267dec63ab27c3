"""The explorer with the real vLLM engine (CPU build) on the tiny model.

1. In process: groups carry the right rewards for known-answer tasks (reference text = what the
   model generates greedily, by an independent engine -> 1; GSM8K answers it cannot know -> 0), their logprobs match a
   transformers forward pass under the taskset's temperature, and eval results reach the monitor,
   never the store.
2. On-policy lock-step, with the trainer's side played by a thread: after the first batch the
   explorer waits for the trainer's step-1 weights, ignores a step directory without its STABLE
   marker, loads the complete one in place, and stamps the next groups with version 1; their
   logprobs match a transformers forward pass of the new weights.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from rfthpc.engines import EngineSettings, make_engine
from rfthpc.engines.sampling import SamplingArgs
from rfthpc.weights import published as weights
from rfthpc.workflows.math import MATH_SYSTEM_PROMPT
from tests.engines.helpers import changed_state_dict, forward_logprobs, load_hf
from tests.explorer_loop.conftest import (
    IMPOSSIBLE,
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

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

TOL = 1e-5
MAX_TOKENS = 8


def chat_prompt(model_dir: Path, question: str, system: str | None = None) -> list[int]:
    """The prompt a single-turn workflow builds for `question` (math_workflow adds its system prompt)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]
    return list(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))


def greedy_texts(model_dir: Path, questions: list[str]) -> list[str]:
    """What the model generates greedily for each question (transformers, an independent engine)."""
    engine = make_engine("transformers", EngineSettings(str(model_dir), min_response_tokens=0))
    out = engine.generate([chat_prompt(model_dir, q) for q in questions], 1,
                          SamplingArgs(temperature=0.0, max_tokens=MAX_TOKENS))
    engine.close()
    return [c[0].text for c in out]


def max_error(group, model) -> float:
    t = group.info["temperature"]
    worst = 0.0
    for e in group.experiences:
        ref = forward_logprobs(model, e.prompt_ids.tolist(), e.response_ids.tolist(), t)
        worst = max(worst, float((torch.from_numpy(e.logprobs) - ref).abs().max()))
    return worst


def vllm_config(**over):
    return {
        "model": {"max_prompt_tokens": 96, "max_response_tokens": MAX_TOKENS, "min_response_tokens": 0},
        "explorer": {"rollout_model": {"engine_type": "vllm", "cpu_kvcache_space_gb": 1},
                     "weights_poll_interval": 0.2},
        **over,
    }


def test_rewards_logprobs_and_eval(tmp_path: Path, tiny_model: Path) -> None:
    questions = [f"Anna has {i} coins and finds {i + 3} more. How many coins does Anna have?" for i in range(3)]
    texts = greedy_texts(tiny_model, questions)
    # A reward function that checks the exact text: 1 for the greedy continuation, 0 for anything else.
    greedy_records = [{"question": q, "answer": t} for q, t in zip(questions[:2], texts[:2], strict=True)]
    greedy_records.append({"question": questions[2], "answer": IMPOSSIBLE})
    sampled_records = [{"question": f"Ben has {i} cards. How many?", "answer": IMPOSSIBLE} for i in range(2)]
    eval_records = [{"question": f"Zoe has {i} shells. How many?", "answer": IMPOSSIBLE} for i in range(2)]
    run = make_run(
        tmp_path, tiny_model,
        [taskset("greedy", write_jsonl(tmp_path / "greedy.jsonl", greedy_records), repeat_times=2,
                 rollout_args={"temperature": 0.0}, default_workflow_type="simple_workflow",
                 default_reward_fn_type=f"{USER_REWARDS}:exact_match"),
         taskset("sampled", write_jsonl(tmp_path / "sampled.jsonl", sampled_records), repeat_times=3,
                 rollout_args={"temperature": 0.8})],
        buffer={"batch_size": 2, "explorer_input": {
            "default_workflow_type": "math_workflow",
            "eval_tasksets": [taskset("held-out", write_jsonl(tmp_path / "eval.jsonl", eval_records))]}},
        **vllm_config(explorer={"eval_on_startup": True, "weights_poll_interval": 0.2,
                                "rollout_model": {"engine_type": "vllm", "cpu_kvcache_space_gb": 1}}),
    )
    assert explorer(run).run() == 0

    by_task = {g.task_id: g for g in groups(run)}
    assert sorted(by_task) == ["greedy/0", "greedy/1", "greedy/2", "sampled/0", "sampled/1"]
    assert list(by_task["greedy/0"].rewards) == [1.0, 1.0]
    assert list(by_task["greedy/1"].rewards) == [1.0, 1.0]
    assert list(by_task["greedy/2"].rewards) == [0.0, 0.0]
    assert list(by_task["sampled/0"].rewards) == [0.0] * 3 and list(by_task["sampled/1"].rewards) == [0.0] * 3
    model = load_hf(tiny_model)
    for task_id, g in by_task.items():
        assert g.policy_version == 0 and g.explorer == "explorer" and g.rank == 0
        assert g.info["temperature"] == (0.0 if task_id.startswith("greedy") else 0.8)
        assert max_error(g, model) <= TOL, task_id
        for e in g.experiences:
            assert np.all(e.loss_mask == 1) and 1 <= len(e.response_ids) <= MAX_TOKENS
    assert by_task["greedy/0"].experiences[0].prompt_ids.tolist() == chat_prompt(tiny_model, questions[0])
    assert by_task["sampled/0"].experiences[0].prompt_ids.tolist() == chat_prompt(
        tiny_model, sampled_records[0]["question"], MATH_SYSTEM_PROMPT)

    records = metrics(run)
    evals = [m for m in records if "eval/held-out/accuracy" in m]
    assert len(evals) == 1 and evals[0]["step"] == 0
    assert evals[0]["eval/held-out/accuracy"] == 0.0 and evals[0]["eval/held-out/tasks"] == 2
    rollouts = [m for m in records if "rollout/reward_mean" in m]
    assert [m["rollout/groups"] for m in rollouts] == [2, 1, 2]
    assert all(m["rollout/tokens_per_s"] > 0 for m in rollouts)
    assert claims_state(run, "greedy")["completed"] == 3 and claims_state(run, "sampled")["completed"] == 2
    assert progress(run)["state"] == "done" and progress(run)["groups_committed"] == 5


def test_follows_published_weights_in_lock_step(tmp_path: Path, tiny_model: Path, questions, caplog) -> None:
    run = make_run(
        tmp_path, tiny_model, [taskset("arith", write_jsonl(tmp_path / "train.jsonl", questions[:4]),
                                       rollout_args={"temperature": 0.9})],
        buffer={"batch_size": 2, "total_steps": 2},
        synchronizer={"sync_interval": 1, "sync_offset": 0, "sync_timeout": 300},
        **vllm_config(),
    )
    new = changed_state_dict(tiny_model, seed=7)
    seen: dict[str, object] = {}

    def trainer() -> None:
        """What the trainer does after its step 1, with a half-written directory first."""
        deadline = time.monotonic() + 240
        while progress(run).get("state") != "waiting_for_weights" and time.monotonic() < deadline:
            time.sleep(0.1)
        seen["need_version"] = progress(run).get("need_version")
        # A step directory without its STABLE marker (a trainer still writing, or killed) is ignored.
        weights.write_hf_dir(run / "weights" / "step_1", new, tiny_model)
        weights.point_latest(run, 1)
        time.sleep(3)
        seen["while_incomplete"] = (progress(run).get("state"), progress(run).get("version"),
                                    {lease.version for lease in weights.live_readers(run, lease_s=60)})
        seen["step_dir"] = weights.publish(run, 1, new, config_dir=tiny_model)

    publisher = threading.Thread(target=trainer, daemon=True)
    publisher.start()
    with caplog.at_level(logging.INFO, logger="rfthpc"):
        assert explorer(run).run() == 0
    publisher.join(timeout=10)
    assert seen["need_version"] == 1
    assert seen["while_incomplete"] == ("waiting_for_weights", 0, {0})
    step_dir = seen["step_dir"]

    by_task = {g.task_id: g for g in groups(run)}
    assert {t: g.policy_version for t, g in by_task.items()} == {"arith/0": 0, "arith/1": 0, "arith/2": 1, "arith/3": 1}
    old, updated = load_hf(tiny_model), load_hf(step_dir)
    for t in ("arith/0", "arith/1"):
        assert max_error(by_task[t], old) <= TOL
    for t in ("arith/2", "arith/3"):
        assert max_error(by_task[t], updated) <= TOL
        assert max_error(by_task[t], old) > 1e-3
    rollouts = [m for m in metrics(run) if "rollout/version" in m]
    assert [m["rollout/version"] for m in rollouts] == [0, 1]
    assert [m["rollout/staleness"] for m in rollouts] == [0, 0]
    assert rollouts[1]["rollout/wait_s"] > 3 and rollouts[1]["rollout/weight_load_s"] > 0
    assert "no STABLE marker yet" in caplog.text

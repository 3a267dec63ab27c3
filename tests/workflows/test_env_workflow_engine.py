"""`env_workflow` with real engines and the real trainer on the tiny model: the trainer's log-probs of
multi-turn episodes equal the explorer's (the single-turn tolerance, 1e-5), concurrent episodes'
turns are batched into one engine call per turn, and multi-turn groups with holes in their masks go
through the store and two GRPO steps."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from rfthpc.engines import EngineSettings, GenerateRequest, make_engine
from rfthpc.engines.batching import RequestBatcher
from rfthpc.engines.sampling import SamplingArgs
from rfthpc.explorer.rollout import RolloutPolicy, run_tasks
from rfthpc.signals import StopRequest
from rfthpc.store import ChunkWriter, Group, StoredExperience
from rfthpc.tasks.tasksets import PromptBuilder
from rfthpc.workflows.base import Experience, WorkflowContext
from rfthpc.workflows.registry import run_workflow
from tests.workflows.conftest import ScriptedEngine, context, env_task
from tests.workflows.test_env_workflow import goal, spans

TOL = 1e-5
"""The single-turn engine tests' tolerance (tests/engines/test_engines.py)."""


def trainer_logprobs(model_dir: Path, experiences: list[Experience], temperature: float = 1.0) -> list[torch.Tensor]:
    """The trainer's per-token log-probs of each response (its forward pass over a padded micro-batch)."""
    from transformers import AutoModelForCausalLM

    from rfthpc.trainer.batching import collate
    from rfthpc.trainer.forward import token_logprobs
    from rfthpc.trainer.samples import Sample

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    samples = [Sample(np.asarray(e.prompt_token_ids), np.asarray(e.response_token_ids),
                      np.asarray(e.loss_mask, dtype=bool), temperature=temperature) for e in experiences]
    mb = collate(samples, list(range(len(samples))), torch.device("cpu"))
    with torch.no_grad():
        lp, _ = token_logprobs(model, mb)
    return [lp[i, :len(e.response_token_ids)] for i, e in enumerate(experiences)]


class Recording:
    """An engine that keeps every completion it returns."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.max_model_len = engine.max_model_len
        self.replies: list[tuple[list[int], list[float]]] = []

    def generate(self, prompts, n, params):
        out = self.engine.generate(prompts, n, params)
        self.replies += [(c.token_ids, c.logprobs) for group in out for c in group]
        return out


def engine_settings(model_dir: Path) -> EngineSettings:
    # min_response_tokens=0: a minimum length masks the end token, which the plain forward pass does not.
    return EngineSettings(str(model_dir), max_model_len=512, seed=3, min_response_tokens=0, cpu_kvcache_space_gb=1)


@pytest.mark.parametrize("engine_type", ["transformers", pytest.param("vllm", marks=[pytest.mark.vllm, pytest.mark.slow])])
def test_trainer_logprobs_equal_the_explorers_on_multi_turn_episodes(engine_type: str, tiny_model: Path,
                                                                     tokenizer) -> None:
    engine = Recording(make_engine(engine_type, engine_settings(tiny_model)))
    task = env_task(index=2, repeat=3, max_tokens=6, max_turns=3, max_context_tokens=400)
    try:
        experiences = run_workflow(task, context(engine, tokenizer)).experiences
    finally:
        engine.engine.close()
    assert len(experiences) == 3
    for exp in experiences:
        runs = spans(exp.loss_mask)
        assert exp.info["turns"] == sum(m for m, _, _ in runs) >= 2, "several turns: masks with holes"
        for m, start, end in runs:
            if m == 1:  # exactly a reply the engine generated, with its logprobs
                assert (exp.response_token_ids[start:end], exp.logprobs[start:end]) in engine.replies
    for exp, lp in zip(experiences, trainer_logprobs(tiny_model, experiences), strict=True):
        mask = torch.tensor(exp.loss_mask, dtype=torch.bool)
        error = (lp[mask] - torch.tensor(exp.logprobs)[mask]).abs().max()
        assert float(error) <= TOL


class CountingEngine(ScriptedEngine):
    """A PolicyEngine of scripted replies that records the number of requests of each engine call."""

    def __init__(self, tokenizer) -> None:
        super().__init__(tokenizer, lambda ctx: "right")
        self.batches: list[int] = []

    def generate_batch(self, requests: list[GenerateRequest]) -> list:
        self.batches.append(len(requests))
        return [self.generate([r.prompt_token_ids], r.n, r.params)[0] for r in requests]


def test_the_turns_of_concurrent_groups_are_one_engine_call_each(tokenizer) -> None:
    engine = CountingEngine(tokenizer)
    batcher = RequestBatcher({"policy": engine}, max_wait_s=5.0)
    ctx = WorkflowContext(engine=batcher.client("policy"), prompts=PromptBuilder(tokenizer))
    seeds = [0, 2, 3, 4]
    tasks = [env_task(index=s, repeat=4) for s in seeds]
    outcomes = run_tasks(tasks, ctx, batcher, RolloutPolicy(concurrency=4), StopRequest())
    assert all(o.result is not None and len(o.result.experiences) == 4 for o in outcomes)
    # Turn k: one request (n = 4 equal contexts) per group still running, all in one engine call.
    turns = [goal(s) for s in seeds]
    assert engine.batches == [sum(t > k for t in turns) for k in range(max(turns))]


def test_a_multi_turn_group_goes_through_the_store_and_two_grpo_steps(tmp_path: Path, tiny_model: Path,
                                                                        tokenizer) -> None:
    from rfthpc.rundir.metrics import read_metrics
    from rfthpc.trainer.losses import Algorithm
    from rfthpc.trainer.rl_batch import build_step_tensors
    from rfthpc.trainer.samples import samples_from_groups
    from tests.trainer.conftest import make_run, rl_config, run_trainer_inprocess

    engine = make_engine("transformers", engine_settings(tiny_model))
    groups = []
    for seed in range(4):
        task = env_task(index=seed, repeat=4, max_tokens=5, max_turns=3, max_context_tokens=200, format_penalty=0.1,
                        env="tests.workflows.toy_envs:Chatter")
        result = run_workflow(task, context(engine, tokenizer))
        groups.append(Group(task_id=task.task_id, policy_version=0, explorer="ex", rank=0, info={"temperature": 1.0},
                            experiences=[StoredExperience(
                                prompt_ids=np.asarray(e.prompt_token_ids, np.int32),
                                response_ids=np.asarray(e.response_token_ids, np.int32),
                                logprobs=np.asarray(e.logprobs, np.float32),
                                loss_mask=np.asarray(e.loss_mask, np.int8), reward=e.reward,
                                info={**e.info, "reward_components": e.reward_components},
                            ) for e in result.experiences]))
    assert any(0 in e.loss_mask[:-1] for g in groups for e in g.experiences)
    cfg = rl_config(tiny_model, **{"model.max_model_len": 256, "trainer.max_token_len_per_gpu": 1024,
                                   "buffer.total_steps": 2})
    run = make_run(tmp_path / "run", cfg)
    with ChunkWriter(run.root, "ex", 0, groups_per_chunk=2, max_chunk_delay_s=3600) as w:
        for g in groups:
            w.add(g)
    assert run_trainer_inprocess(run) == 0
    records = {r["step"]: r for r in read_metrics(run.monitor / "trainer.jsonl")}
    assert sorted(records) == [1, 2] and all(np.isfinite(records[s]["actor/pg_loss"]) for s in (1, 2))

    # The holes reach the loss as holes: the mask is the loss mask and nothing is advantaged outside it.
    from rfthpc.config import Config
    from rfthpc.config.algorithm import AlgorithmConfig
    from rfthpc.config.derive import finalize
    from rfthpc.config.settings import AlgorithmSettings

    algorithm = Algorithm.from_settings(AlgorithmSettings.of(finalize(
        Config(algorithm=AlgorithmConfig(algorithm_type="grpo"))).algorithm))
    samples = samples_from_groups(groups, vocab_size=len(tokenizer), max_length=None)
    tensors, _ = build_step_tensors(samples, algorithm)
    for row, s in enumerate(samples):
        n = len(s.response_ids)
        assert torch.equal(tensors.mask[row, :n], torch.from_numpy(s.loss_mask))
        assert tensors.advantages is not None
        assert torch.all(tensors.advantages[row, :n][~torch.from_numpy(s.loss_mask)] == 0)
    assert (tensors.advantages.abs() > 0).any()


def test_trainer_logprobs_match_at_the_sampling_temperature_too(tiny_model: Path, tokenizer) -> None:
    engine = make_engine("transformers", engine_settings(tiny_model))
    temperature = 0.7
    task = dataclasses.replace(env_task(index=4, repeat=2, max_turns=2),
                               rollout_args=SamplingArgs(temperature=temperature, max_tokens=6))
    experiences = run_workflow(task, context(engine, tokenizer)).experiences
    for exp, lp in zip(experiences, trainer_logprobs(tiny_model, experiences, temperature), strict=True):
        mask = torch.tensor(exp.loss_mask, dtype=torch.bool)
        assert float((lp[mask] - torch.tensor(exp.logprobs)[mask]).abs().max()) <= TOL

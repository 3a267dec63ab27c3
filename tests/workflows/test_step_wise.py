"""`env_workflow` with `step_wise: true` and Trinity-RFT's multi_step_grpo: each policy turn of an episode is
an experience of its own, token-exact (its prompt is everything the policy was conditioned on, its response
the reply as generated, the trainer's log-probs equal the engine's), marked with its episode and step, and
groups of such steps go through the store and two multi_step_grpo steps whose advantages are the episodes'."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rfthpc.engines import make_engine
from rfthpc.store import ChunkWriter, Group, StoredExperience
from rfthpc.workflows.base import EPISODE, STATE, STEP, STEP_REWARD
from rfthpc.workflows.registry import run_workflow
from tests.workflows.conftest import ScriptedEngine, context, env_task
from tests.workflows.test_env_workflow_engine import TOL, Recording, engine_settings, trainer_logprobs


def test_each_turn_is_a_step_that_continues_exactly_what_the_policy_saw(tokenizer) -> None:
    engine = ScriptedEngine(tokenizer, lambda ctx: "right")
    whole = run_workflow(env_task(index=3, repeat=2), context(engine, tokenizer)).experiences
    steps = run_workflow(env_task(index=3, repeat=2, step_wise=True), context(engine, tokenizer)).experiences
    assert len(steps) == sum(e.info["turns"] for e in whole) > len(whole)
    for e, episode in enumerate(whole):
        mine = [s for s in steps if s.info[EPISODE] == e]
        assert [s.info[STEP] for s in mine] == list(range(episode.info["turns"]))
        for s in mine:
            # The step's prompt and response are a prefix of the episode's tokens, its reply all policy tokens.
            tokens = s.prompt_token_ids + s.response_token_ids
            assert tokens == (episode.prompt_token_ids + episode.response_token_ids)[:len(tokens)]
            assert s.loss_mask == [1] * len(s.response_token_ids) and s.logprobs == [ScriptedEngine.LOGPROB] * len(
                s.response_token_ids)
            assert s.reward == episode.reward and s.info["turns"] == episode.info["turns"]
        # Together the steps hold every policy token of the episode, and nothing else is trained.
        assert sum(len(s.response_token_ids) for s in mine) == sum(episode.loss_mask)
        # What each step earned adds up to the episode's reward (ROLL's step scores); each names its state.
        assert sum(s.info[STEP_REWARD] for s in mine) == pytest.approx(episode.reward)
        assert all(len(s.info[STATE]) == 16 for s in mine)
    # Every episode of the task starts from the same state (one seed), GiGPO's first anchor.
    assert len({s.info[STATE] for s in steps if s.info[STEP] == 0}) == 1


@pytest.mark.parametrize("history", [0, 1, 2])
def test_a_history_window_keeps_the_last_turns_and_trains_what_the_policy_saw(tokenizer, history: int) -> None:
    """history_turns: each turn's prompt is the chat of its last `history` turns before it and its observation,
    rendered as the policy's chat template renders that chat; the step trains exactly that prompt, which is
    what the engine was asked; each step's response is the reply as generated."""
    engine = ScriptedEngine(tokenizer, lambda ctx: "left" if len(engine.calls) % 3 == 2 else "right")
    steps = run_workflow(env_task(index=3, history_turns=history, step_wise=True),
                         context(engine, tokenizer)).experiences
    assert len(steps) >= 4 and [s.info[STEP] for s in steps] == list(range(len(steps)))
    assert [s.prompt_token_ids for s in steps] == [prompts[0] for prompts, _, _ in engine.calls]
    observations = [tokenizer.decode(s.prompt_token_ids).split("<|im_start|>user\n")[-1].split("<|im_end|>")[0]
                    for s in steps]
    replies = [tokenizer.decode(s.response_token_ids, skip_special_tokens=True) for s in steps]
    for k, s in enumerate(steps):
        chat = []
        for j in range(max(0, k - history), k):
            chat += [{"role": "user", "content": observations[j]}, {"role": "assistant", "content": replies[j]}]
        chat.append({"role": "user", "content": observations[k]})
        assert s.prompt_token_ids == list(tokenizer.apply_chat_template(
            chat, add_generation_prompt=True, tokenize=True, return_dict=False)), k
        assert s.loss_mask == [1] * len(s.response_token_ids)


def test_a_history_window_ends_an_episode_whose_prompt_would_outgrow_the_context(tokenizer) -> None:
    """The context limit applies to each turn's windowed prompt: with one turn of history the prompts stop
    growing, so a limit the whole-episode prompt outgrows is never reached."""
    engine = ScriptedEngine(tokenizer, lambda ctx: "left")
    limit = 3 * len(engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "x" * 60}], add_generation_prompt=True, tokenize=True, return_dict=False))
    whole = run_workflow(env_task(index=3, max_turns=12, max_context_tokens=limit, step_wise=True),
                         context(engine, tokenizer)).experiences
    windowed = run_workflow(env_task(index=3, max_turns=12, max_context_tokens=limit, step_wise=True,
                                     history_turns=1), context(engine, tokenizer)).experiences
    assert whole[-1].info["truncated_by"] == "max_context_tokens" and len(whole) < 12
    assert windowed[-1].info["truncated_by"] == "max_turns" and len(windowed) == 12
    assert max(len(s.prompt_token_ids) for s in windowed) < limit


@pytest.mark.parametrize(("args", "message"), [
    ({"step_wise": "yes"}, "workflow_args.step_wise='yes': use true or false"),
    ({"step_wise": True, "turn_rewards": True}, "workflow_args.turn_rewards: places each turn's reward inside one"),
    ({"history_turns": 1}, "workflow_args.history_turns: a turn's prompt without some earlier turns"),
    ({"step_wise": True, "history_turns": -1}, "workflow_args.history_turns=-1: use an integer >= 0"),
])
def test_bad_step_wise_settings_are_named(args, message) -> None:
    from rfthpc.workflows.env import arg_problems

    assert any(message in p for p in arg_problems({"env": "frozen_lake", **args}))


@pytest.mark.parametrize("history", [None, 1])
def test_trainer_logprobs_of_each_step_equal_the_engines(tiny_model: Path, tokenizer, history: int | None) -> None:
    engine = Recording(make_engine("transformers", engine_settings(tiny_model)))
    task = env_task(index=2, repeat=3, max_tokens=6, max_turns=3, max_context_tokens=400, step_wise=True,
                    **({} if history is None else {"history_turns": history}))
    try:
        steps = run_workflow(task, context(engine, tokenizer)).experiences
    finally:
        engine.engine.close()
    assert len(steps) > 3
    for s, lp in zip(steps, trainer_logprobs(tiny_model, steps), strict=True):
        assert (s.response_token_ids, s.logprobs) in engine.replies
        assert float((lp - torch.tensor(s.logprobs)).abs().max()) <= TOL


def test_multi_step_grpo_trains_the_steps_of_stored_groups(tmp_path: Path, tiny_model: Path, tokenizer) -> None:
    from rfthpc.config import Config
    from rfthpc.config.algorithm import AlgorithmConfig
    from rfthpc.config.derive import finalize
    from rfthpc.config.settings import AlgorithmSettings
    from rfthpc.rundir.metrics import read_metrics
    from rfthpc.trainer.losses import Algorithm
    from rfthpc.trainer.rl_batch import build_step_tensors
    from rfthpc.trainer.samples import samples_from_groups
    from tests.trainer.conftest import make_run, rl_config, run_trainer_inprocess

    engine = make_engine("transformers", engine_settings(tiny_model))
    groups = []
    try:
        for seed in range(4):
            task = env_task(index=seed, repeat=4, max_tokens=5, max_turns=3, max_context_tokens=200,
                            format_penalty=0.1, env="tests.workflows.toy_envs:Chatter", step_wise=True)
            result = run_workflow(task, context(engine, tokenizer))
            groups.append(Group(task_id=task.task_id, policy_version=0, explorer="ex", rank=0,
                                info={"temperature": 1.0}, experiences=[StoredExperience(
                                    prompt_ids=np.asarray(e.prompt_token_ids, np.int32),
                                    response_ids=np.asarray(e.response_token_ids, np.int32),
                                    logprobs=np.asarray(e.logprobs, np.float32),
                                    loss_mask=np.asarray(e.loss_mask, np.int8), reward=e.reward, info=e.info,
                                ) for e in result.experiences]))
    finally:
        engine.close()
    assert any(len(g.experiences) > 4 for g in groups)
    cfg = rl_config(tiny_model, **{"model.max_model_len": 256, "trainer.max_token_len_per_gpu": 1024,
                                   "buffer.total_steps": 2, "algorithm.algorithm_type": "multi_step_grpo"})
    cfg.algorithm.repeat_times = 4
    run = make_run(tmp_path / "run", cfg)
    with ChunkWriter(run.root, "ex", 0, groups_per_chunk=2, max_chunk_delay_s=3600) as w:
        for g in groups:
            w.add(g)
    assert run_trainer_inprocess(run) == 0
    records = {r["step"]: r for r in read_metrics(run.monitor / "trainer.jsonl")}
    assert sorted(records) == [1, 2] and all(np.isfinite(records[s]["actor/pg_loss"]) for s in (1, 2))

    # The episodes read back from the store: every step of an episode has the episode's advantage, which
    # is its reward GRPO-normalised over the group's episodes (not over its steps).
    algorithm = Algorithm.from_settings(AlgorithmSettings.of(finalize(
        Config(algorithm=AlgorithmConfig(algorithm_type="multi_step_grpo"))).algorithm))
    samples = samples_from_groups(groups, vocab_size=len(tokenizer), max_length=None)
    tensors, _ = build_step_tensors(samples, algorithm)
    for g in range(len(groups)):
        rows = [i for i, s in enumerate(samples) if s.group == g]
        episodes = sorted({samples[i].episode for i in rows})
        rewards = torch.tensor([next(samples[i].reward for i in rows if samples[i].episode == e) for e in episodes])
        for i in rows:
            e = episodes.index(samples[i].episode)
            want = 0.0 if rewards.max() == rewards.min() else float(
                (rewards[e] - rewards.mean()) / (rewards.std() + 1e-6))
            assert tensors.advantages[i, 0].item() == pytest.approx(want, abs=1e-5)
    assert (tensors.advantages.abs() > 0).any(), "some group's episodes differ"

    # What each step earned and the state it acted in come back from the store; both GiGPOs read them.
    for g in range(len(groups)):
        for e in {s.episode for s in samples if s.group == g}:
            mine = [s for s in samples if s.group == g and s.episode == e]
            assert sum(s.step_reward for s in mine) == pytest.approx(mine[0].reward, abs=1e-6)
            assert all(s.state is not None for s in mine)
    for algorithm_type, advantage_fn in (("gigpo", None), ("multi_step_grpo", "roll_gigpo")):
        gigpo = Algorithm.from_settings(AlgorithmSettings.of(finalize(Config(algorithm=AlgorithmConfig(
            algorithm_type=algorithm_type, advantage_fn=advantage_fn))).algorithm))
        stepwise, _ = build_step_tensors(samples, gigpo)
        assert torch.isfinite(stepwise.advantages).all() and not torch.equal(stepwise.advantages, tensors.advantages)

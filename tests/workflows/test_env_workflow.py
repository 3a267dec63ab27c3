"""`env_workflow` with a scripted engine on the tiny model's tokenizer and chat template: the exact
token layout (policy ids with their logprobs and mask 1, template and observation ids with mask 0),
lockstep turns, each limit, invalid actions, rewards, seeds and config checks."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from rfthpc.errors import ConfigError, UserError
from rfthpc.workflows.base import Experience, needs_of
from rfthpc.workflows.registry import WORKFLOWS, run_workflow
from tests.workflows.conftest import LINE_WALK, ScriptedEngine, context, env_task
from tests.workflows.toy_envs import LineWalk

SYSTEM = "You walk on a line."


def goal(seed: int) -> int:
    env = LineWalk()
    env.reset(seed=seed)
    return env.goal


def chat_of(exp: Experience, tokenizer: Any, seed: int, replies: list[str], system: str | None = SYSTEM) -> list[int]:
    """The whole episode rendered at once by the chat template (what the incremental ids must equal
    when each reply is re-tokenised to the same ids), replaying the environment on `replies`."""
    env = LineWalk()
    observation, _ = env.reset(seed=seed)
    messages = [{"role": "system", "content": system}] if system else []
    for k, reply in enumerate(replies):
        messages.append({"role": "user", "content": observation})
        messages.append({"role": "assistant", "content": reply})
        observation, *_ = env.step(reply)
    ids = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False)
    assert ids[-1] == ord("\n") or tokenizer.decode(ids[-1:]) == "\n"
    return list(ids[:-1])  # the template's newline after the last turn is no reply of the policy


def spans(mask: list[int]) -> list[tuple[int, int, int]]:
    """(value, start, end) runs of the mask."""
    out: list[tuple[int, int, int]] = []
    for i, m in enumerate(mask):
        if out and out[-1][0] == m:
            out[-1] = (m, out[-1][1], i + 1)
        else:
            out.append((m, i, i + 1))
    return out


def test_the_response_is_the_replies_as_generated_and_the_framing_with_mask_0(tokenizer) -> None:
    engine = ScriptedEngine(tokenizer, lambda ctx: "right")
    result = run_workflow(env_task(index=3, system_prompt=SYSTEM), context(engine, tokenizer))
    (exp,) = result.experiences
    turns = goal(3)
    assert exp.info["turns"] == turns and exp.info["success"] is True and exp.info["terminated"]
    assert not exp.info["truncated"] and exp.reward == 1.0 and exp.info["invalid_actions"] == 0
    reply = tokenizer.encode("right", add_special_tokens=False) + [tokenizer.eos_token_id]
    runs = spans(exp.loss_mask)
    # Policy turns and framing alternate, starting and ending with a policy turn.
    assert [m for m, _, _ in runs] == [1, 0] * (turns - 1) + [1]
    for m, start, end in runs:
        if m == 1:
            assert exp.response_token_ids[start:end] == reply
            assert exp.logprobs[start:end] == [ScriptedEngine.LOGPROB] * len(reply)
        else:
            assert exp.logprobs[start:end] == [0.0] * (end - start)
    # Each turn's prompt was the whole context so far; the episode equals the chat rendered at once.
    assert exp.prompt_token_ids + exp.response_token_ids == chat_of(exp, tokenizer, 3, ["right"] * turns)
    assert [c[0][0] for c in engine.calls] == [
        exp.prompt_token_ids + exp.response_token_ids[:start] for m, start, _ in runs if m == 1]


def test_a_group_is_repeat_times_episodes_of_one_seed_stepped_in_lockstep(tokenizer) -> None:
    engine = ScriptedEngine(tokenizer, lambda ctx: "right")
    result = run_workflow(env_task(index=5, repeat=4), context(engine, tokenizer))
    assert len(result.experiences) == 4 and result.info["env_seed"] == 5
    assert all(e.info["turns"] == goal(5) for e in result.experiences)
    # One engine call per turn; equal contexts (here every turn's) are one prompt with n = repeat_times.
    assert len(engine.calls) == goal(5)
    assert all(len(prompts) == 1 and n == 4 for prompts, n, _ in engine.calls)


def test_episodes_of_different_lengths_leave_the_lockstep_as_they_end(tokenizer) -> None:
    rng = random.Random(0)
    engine = ScriptedEngine(tokenizer, lambda ctx: rng.choice(["right", "left", "stay"]))
    result = run_workflow(env_task(index=1, repeat=5, max_turns=6), context(engine, tokenizer))
    turns = [e.info["turns"] for e in result.experiences]
    assert len(set(turns)) > 1, "the random replies make episodes of different lengths"
    # Turn t's call carries the episodes still running at turn t.
    running = [sum(t > k for t in turns) for k in range(max(turns))]
    assert [sum(k for _ in p) if k > 1 else len(p) for p, k, _ in engine.calls] == running


def test_max_turns_ends_the_episode_as_truncated(tokenizer) -> None:
    engine = ScriptedEngine(tokenizer, lambda ctx: "left")
    (exp,) = run_workflow(env_task(max_turns=3), context(engine, tokenizer)).experiences
    assert exp.info["turns"] == 3 and exp.info["truncated"] and exp.info["truncated_by"] == "max_turns"
    assert "success" not in exp.info and exp.reward == 0.0 and exp.loss_mask[-1] == 1


def test_the_environment_truncating_the_episode_is_recorded(tokenizer) -> None:
    engine = ScriptedEngine(tokenizer, lambda ctx: "left")
    (exp,) = run_workflow(env_task(env_args={"max_steps": 2}), context(engine, tokenizer)).experiences
    assert exp.info["turns"] == 2 and exp.info["truncated_by"] == "env" and exp.info["success"] is False


def test_max_tokens_per_turn_cuts_replies_and_the_turn_is_closed_by_the_template(tokenizer) -> None:
    engine = ScriptedEngine(tokenizer, lambda ctx: "stay stay stay stay stay")
    (exp,) = run_workflow(env_task(max_tokens_per_turn=3, max_turns=2), context(engine, tokenizer)).experiences
    assert all(params.max_tokens == 3 for _, _, params in engine.calls)
    (_, a, b), (_, c, _), (_, d, e) = spans(exp.loss_mask)
    assert b - a == 3 and e - d == 3 and exp.finish_reason == "length" and exp.info["invalid_actions"] == 2
    # The cut reply has no end token: the framing starts with it (not generated: mask 0).
    assert exp.response_token_ids[c] == tokenizer.eos_token_id and exp.response_token_ids[b - 1] != tokenizer.eos_token_id


@pytest.mark.parametrize("where", ["after_first_reply", "in_framing", "in_second_reply"])
def test_max_context_tokens_ends_the_episode_within_the_limit(tokenizer, where: str) -> None:
    probe = ScriptedEngine(tokenizer, lambda ctx: "left")
    (free,) = run_workflow(env_task(max_turns=3), context(probe, tokenizer)).experiences
    (_, _, reply_end), (_, _, framing_end), (_, _, second_end) = spans(free.loss_mask)[:3]
    end = {"after_first_reply": reply_end, "in_framing": framing_end - 3, "in_second_reply": second_end - 1}[where]
    limit = len(free.prompt_token_ids) + end
    engine = ScriptedEngine(tokenizer, lambda ctx: "left")
    (exp,) = run_workflow(env_task(max_turns=3, max_context_tokens=limit), context(engine, tokenizer)).experiences
    assert exp.info["truncated_by"] == "max_context_tokens" and exp.info["truncated"]
    assert exp.response_token_ids == free.response_token_ids[:len(exp.response_token_ids)]
    assert exp.loss_mask[-1] == 1, "an episode never ends on framing tokens"
    if where == "in_second_reply":
        # The turn asks for no more than the room left, and the reply is cut at the limit (what was
        # sampled, up to there) and played.
        assert engine.calls[-1][2].max_tokens == end - framing_end
        assert len(exp.prompt_token_ids) + len(exp.response_token_ids) == limit
        assert exp.info["turns"] == 2 and exp.finish_reason == "length"
    else:  # the framing does not fit with room for one more token: the episode ends after the first turn
        assert exp.info["turns"] == 1 and len(exp.response_token_ids) == reply_end


def test_max_response_tokens_is_the_budget_of_everything_after_the_prompt(tokenizer) -> None:
    """Trinity-RFT's budget: replies, framing and observations after the opening prompt; a reply cut at
    it still plays its action (here the move onto the goal, cut before its end token)."""
    probe = ScriptedEngine(tokenizer, lambda ctx: "right")
    (free,) = run_workflow(env_task(index=3), context(probe, tokenizer)).experiences
    last = spans(free.loss_mask)[-1]
    budget = len(free.response_token_ids) - 1
    engine = ScriptedEngine(tokenizer, lambda ctx: "right")
    (exp,) = run_workflow(env_task(index=3, max_response_tokens=budget), context(engine, tokenizer)).experiences
    assert exp.response_token_ids == free.response_token_ids[:budget] and exp.finish_reason == "length"
    assert exp.info["terminated"] and exp.info["success"] is True and exp.reward == 1.0
    assert [params.max_tokens for _, _, params in engine.calls] == [16] * (goal(3) - 1) + [last[2] - last[1] - 1]
    # A budget that leaves no room for the next reply ends the episode there.
    first_end = spans(free.loss_mask)[0][2]
    (short,) = run_workflow(env_task(index=3, max_response_tokens=first_end + 1),
                            context(ScriptedEngine(tokenizer, lambda ctx: "right"), tokenizer)).experiences
    assert short.info["truncated_by"] == "max_response_tokens" and short.info["turns"] == 1
    assert len(short.response_token_ids) == first_end


def test_invalid_actions_get_feedback_and_the_format_penalty(tokenizer) -> None:
    replies = iter(["jump", "right", "fly", "right", "right", "right", "right", "right"])
    engine = ScriptedEngine(tokenizer, lambda ctx: next(replies))
    (exp,) = run_workflow(env_task(index=3, format_penalty=0.25), context(engine, tokenizer)).experiences
    assert exp.info["invalid_actions"] == 2 and exp.info["turns"] == goal(3) + 2
    assert exp.reward == pytest.approx(1.0 - 0.5)
    assert exp.reward_components == {"env_reward": 1.0, "format_penalty": -0.5}
    # The environment's feedback is the next user turn.
    assert "'jump' is not a move." in tokenizer.decode(exp.response_token_ids)


@pytest.mark.parametrize("reward_type", ["sum", "success"])
def test_turn_rewards_sit_on_each_turns_last_policy_token(tokenizer, reward_type: str) -> None:
    replies = iter(["jump"] + ["right"] * 10)
    engine = ScriptedEngine(tokenizer, lambda ctx: next(replies))
    task = env_task(index=3, env_args={"step_reward": -0.1}, format_penalty=0.5, turn_rewards=True,
                    reward_type=reward_type)
    (exp,) = run_workflow(task, context(engine, tokenizer)).experiences
    ends = [end - 1 for m, _, end in spans(exp.loss_mask) if m == 1]
    assert exp.token_level_rewards is not None
    assert all(r == 0 for i, r in enumerate(exp.token_level_rewards) if i not in ends)
    per_turn = [exp.token_level_rewards[i] for i in ends]
    moves = goal(3)
    if reward_type == "sum":
        assert per_turn == pytest.approx([-0.5] + [-0.1] * (moves - 1) + [1.0])
        assert exp.reward == pytest.approx(1.0 - 0.1 * (moves - 1) - 0.5)
    else:
        assert per_turn == pytest.approx([-0.5] + [0.0] * (moves - 1) + [1.0])
        assert exp.reward == pytest.approx(0.5) and exp.reward_components["success"] == 1.0
    assert sum(exp.token_level_rewards) == pytest.approx(exp.reward)


def test_the_seed_is_the_rows_env_args_seed_else_the_row_index(tokenizer) -> None:
    engine = ScriptedEngine(tokenizer, lambda ctx: "right")
    # Arrow fills keys other rows have with None: they do not override the taskset's env_args.
    task = env_task(index=3, raw={"env_args": {"seed": 11, "length": None}}, env_args={"length": 6})
    (exp,) = run_workflow(task, context(engine, tokenizer)).experiences
    assert exp.info["turns"] == goal(11) and goal(11) != goal(3)
    assert f"the goal is at {goal(11)}" in tokenizer.decode(engine.calls[0][0][0])
    with pytest.raises(UserError, match="env_args.seed='x'"):
        run_workflow(env_task(raw={"env_args": {"seed": "x"}}), context(engine, tokenizer))


def test_environments_are_closed_after_the_episodes(tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[LineWalk] = []
    original = LineWalk.__init__

    def record(self, **kw):
        original(self, **kw)
        made.append(self)

    monkeypatch.setattr(LineWalk, "__init__", record)
    run_workflow(env_task(repeat=3), context(ScriptedEngine(tokenizer, lambda ctx: "right"), tokenizer))
    assert len(made) == 3 and all(env.closed for env in made)


def test_episodes_that_open_differently_each_get_their_own_prompt(tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group's episodes share one seed and mostly one opening prompt (rendered once), but an
    environment may open each episode differently: then each episode is conditioned on its own."""
    original = LineWalk.reset
    opened: list[str] = []

    def reset(self, seed=None, options=None):
        observation, info = original(self, seed=seed, options=options)
        opened.append(f"Episode {len(opened) % 2}. {observation}")
        return opened[-1], info

    monkeypatch.setattr(LineWalk, "reset", reset)
    engine = ScriptedEngine(tokenizer, lambda ctx: "right")
    result = run_workflow(env_task(index=3, repeat=4, system_prompt=SYSTEM), context(engine, tokenizer))
    messages = [{"role": "system", "content": SYSTEM}]
    assert [e.prompt_token_ids for e in result.experiences] == [
        list(tokenizer.apply_chat_template([*messages, {"role": "user", "content": o}], tokenize=True,
                                           add_generation_prompt=True, return_dict=False)) for o in opened]
    first_prompts, n, _ = engine.calls[0]
    assert len(first_prompts) == 4 and n == 1 and first_prompts[0] == first_prompts[2] != first_prompts[1]


@pytest.mark.parametrize(("args", "message"), [
    ({"env": None}, "workflow_args.env: name the environment"),
    ({"env": "no_such_env"}, "unknown environment 'no_such_env'"),
    ({"env_args": {"size": 4}}, "workflow_args.env_args: 'size' not accepted by environment"),
    ({"max_turns": 0}, "workflow_args.max_turns=0: use an integer >= 1"),
    ({"max_turns": None}, "workflow_args.max_turns=None"),
    ({"max_context_tokens": 1}, "workflow_args.max_context_tokens=1: use an integer >= 2 or leave it unset"),
    ({"max_response_tokens": 0}, "workflow_args.max_response_tokens=0: use an integer >= 1 or leave it unset"),
    ({"format_penalty": -1}, "workflow_args.format_penalty=-1: use a number >= 0"),
    ({"reward_type": "best"}, "workflow_args.reward_type='best': use one of sum, success"),
    ({"turn_rewards": "yes"}, "workflow_args.turn_rewards='yes'"),
    ({"max_turn": 3}, "'max_turn' not used by workflow 'env_workflow'"),
])
def test_bad_workflow_args_are_reported_before_a_run_and_stop_one(tokenizer, args, message) -> None:
    workflow_args = {"env": LINE_WALK, **args}
    declared = needs_of(WORKFLOWS.get("env_workflow"))
    assert declared is not None
    problems = declared.problems("env_workflow", workflow_args, None, False)
    assert any(message in p for p in problems), problems
    task = env_task(**args)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        run_workflow(task, context(ScriptedEngine(tokenizer, lambda ctx: "right"), tokenizer))


def test_good_workflow_args_need_no_reward_function() -> None:
    declared = needs_of(WORKFLOWS.get("env_workflow"))
    assert declared is not None
    args = {"env": LINE_WALK, "env_args": {"length": 4, "seed": 2}, "max_turns": 4, "max_tokens_per_turn": 8,
            "max_context_tokens": 256, "format_penalty": 0.1, "reward_type": "success", "turn_rewards": True,
            "system_prompt": "Walk."}
    assert declared.problems("env_workflow", args, None, False) == []


def test_a_built_in_environment_plays_through_the_workflow(tokenizer) -> None:
    """frozen_lake by name, its map from env_args: an invalid reply costs a turn, then two moves win."""
    replies = iter(["I will fly", "<action>Right</action>", "<action>Down</action>"])
    engine = ScriptedEngine(tokenizer, lambda ctx: next(replies))
    task = dataclasses.replace(env_task(index=0, max_tokens=64), workflow_args={
        "env": "frozen_lake", "env_args": {"desc": ["SF", "HG"]}, "format_penalty": 0.1})
    (exp,) = run_workflow(task, context(engine, tokenizer)).experiences
    assert exp.info["turns"] == 3 and exp.info["success"] is True and exp.info["invalid_actions"] == 1
    assert exp.reward == pytest.approx(1.0 - 0.1)


def test_an_episode_ends_within_the_engines_context(tokenizer) -> None:
    """No max_context_tokens: the engine's max_model_len bounds the episode, which ends as truncated
    instead of sending the engine a context it refuses."""
    engine = ScriptedEngine(tokenizer, lambda ctx: "stay", max_model_len=300)
    (exp,) = run_workflow(env_task(index=0, max_turns=50), context(engine, tokenizer)).experiences
    assert exp.info["truncated_by"] == "max_context_tokens" and exp.info["truncated"]
    assert len(exp.prompt_token_ids) + len(exp.response_token_ids) <= 300
    assert all(len(prompts[0]) < 300 for prompts, _, _ in engine.calls)

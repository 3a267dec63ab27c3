"""`frozen_lake_workflow`, Trinity-RFT's FrozenLake workflow, with a scripted engine on the tiny model's
tokenizer: whole episodes (goal, hole, step limit, response budget), Trinity's prompts and records,
its task rows (loaded as Trinity writes them) and its workflow_args."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rfthpc.engines.sampling import SamplingArgs
from rfthpc.envs.trinity_frozen_lake import INVALID_FEEDBACK, TrinityFrozenLake, trinity_random_map
from rfthpc.errors import ConfigError, UserError
from rfthpc.tasks.tasksets import Task
from rfthpc.workflows.base import needs_of
from rfthpc.workflows.frozen_lake import MULTI_SHOT_SYSTEM_PROMPT, SYSTEM_PROMPT
from rfthpc.workflows.registry import WORKFLOWS, run_workflow
from tests.workflows.conftest import ScriptedEngine, context
from tests.workflows.test_env_workflow import spans

ROW = {"seed": 42, "size": 4, "p": 0.8, "index": 0, "uid": "42_4_0.8"}
"""A row as Trinity's get_frozen_lake_data.py writes them; its map (Trinity's for seed 42):
FFSF / FHFF / FFFH / GHFF, the player at row 0 column 2, the goal at row 3 column 0."""
TO_GOAL = ["```Left```", "Left again: ```left```", "```Jump```", "```2```", "```Down```", "Action: ```Down```"]
"""Five moves to the goal, with one invalid reply on the way."""


def lake_task(raw: dict[str, Any] | None = None, repeat: int = 1, max_tokens: int = 4096,
              system_prompt: str | None = None, **workflow_args: Any) -> Task:
    """A task of frozen_lake_workflow on `raw` (default ROW)."""
    return Task(task_id="frozenlake/0", taskset="frozenlake", index=0, raw=dict(ROW if raw is None else raw),
                prompt="", truth=None, workflow="frozen_lake_workflow", reward_fn=None, workflow_args=workflow_args,
                rollout_args=SamplingArgs(temperature=1.0, max_tokens=max_tokens), repeat_times=repeat,
                system_prompt=system_prompt)


def scripted(tokenizer: Any, replies: list[str]) -> ScriptedEngine:
    """An engine giving `replies` in turn."""
    it: Iterator[str] = iter(replies)
    return ScriptedEngine(tokenizer, lambda ctx: next(it))


def replay(replies: list[str], max_steps: int = 10) -> list[str]:
    """The observations the environment shows for `replies` on ROW's map (the first one's too)."""
    env = TrinityFrozenLake(size=4, max_steps=max_steps)
    observations = [env.reset(seed=42)[0]]
    observations += [env.step(reply)[0] for reply in replies[:-1]]
    return observations


def test_an_episode_to_the_goal_is_trinitys_chat_with_its_record(tokenizer) -> None:
    engine = scripted(tokenizer, TO_GOAL)
    (exp,) = run_workflow(lake_task(), context(engine, tokenizer)).experiences
    assert exp.reward == 1.0 and exp.info["success"] == 1 and exp.info["env_done"] == 1
    assert exp.info["env_steps"] == 6 == exp.info["turns"] and exp.info["invalid_actions"] == 1
    # The whole chat, rendered at once, is the prompt and response the policy generated and saw.
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    for observation, reply in zip(replay(TO_GOAL), TO_GOAL, strict=True):
        messages += [{"role": "user", "content": observation}, {"role": "assistant", "content": reply}]
    whole = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False)
    assert exp.prompt_token_ids + exp.response_token_ids == list(whole[:-1])  # the template's last newline
    assert len([m for m, _, _ in spans(exp.loss_mask) if m == 1]) == 6
    text = tokenizer.decode(exp.response_token_ids)
    assert "Current Observation (3): \nP___\n_O__\n___O\nGO__\n" in text  # after the invalid reply
    assert text.count(INVALID_FEEDBACK) == 1 and "The maximum number of steps remaining is 7." in text


def test_a_hole_ends_the_episode_unrewarded(tokenizer) -> None:
    engine = scripted(tokenizer, ["```Down```", "```Left```"])  # (1, 2), then the hole at (1, 1)
    (exp,) = run_workflow(lake_task(), context(engine, tokenizer)).experiences
    assert (exp.reward, exp.info["env_steps"], exp.info["env_done"], exp.info["success"]) == (0.0, 2, 1, 0)


def test_max_steps_ends_the_episode_and_invalid_replies_count(tokenizer) -> None:
    engine = scripted(tokenizer, ["no idea"] * 3)
    (exp,) = run_workflow(lake_task(max_steps=3), context(engine, tokenizer)).experiences
    assert (exp.reward, exp.info["env_steps"], exp.info["env_done"], exp.info["success"]) == (0.0, 3, 0, 0)
    assert exp.info["truncated_by"] == "env" and exp.info["invalid_actions"] == 3
    assert "The maximum number of steps remaining is 3." in tokenizer.decode(exp.prompt_token_ids)


def test_the_response_budget_is_max_tokens_over_the_whole_episode(tokenizer) -> None:
    """As Trinity: each reply may have what the budget leaves after the replies and observations so far."""
    (free,) = run_workflow(lake_task(), context(scripted(tokenizer, TO_GOAL), tokenizer)).experiences
    budget = spans(free.loss_mask)[4][1] + 4  # the third reply gets 4 tokens
    engine = scripted(tokenizer, TO_GOAL)
    (exp,) = run_workflow(lake_task(max_tokens=budget), context(engine, tokenizer)).experiences
    assert len(exp.response_token_ids) == budget and exp.info["truncated_by"] == "max_response_tokens"
    assert (exp.reward, exp.info["env_steps"], exp.info["env_done"], exp.info["success"]) == (0.0, 3, 0, 0)
    used = [start for m, start, _ in spans(exp.loss_mask) if m == 1]
    assert [params.max_tokens for _, _, params in engine.calls] == [budget - u for u in used]


def test_a_group_is_repeat_times_episodes_of_the_rows_map(tokenizer) -> None:
    engine = ScriptedEngine(tokenizer, lambda ctx: "```Down```")
    result = run_workflow(lake_task(repeat=4), context(engine, tokenizer))
    assert len(result.experiences) == 4 and result.info["env_seed"] == 42
    assert all(len(prompts) == 1 and n == 4 for prompts, n, _ in engine.calls)
    assert [e.info["env_steps"] for e in result.experiences] == [10] * 4


def test_prompts_multi_shot_and_the_tasksets_own(tokenizer) -> None:
    def first_prompt(task: Task) -> str:
        engine = scripted(tokenizer, ["```Down```", "```Left```"])
        run_workflow(task, context(engine, tokenizer))
        return tokenizer.decode(engine.calls[0][0][0])

    assert SYSTEM_PROMPT in first_prompt(lake_task()) and MULTI_SHOT_SYSTEM_PROMPT not in first_prompt(lake_task())
    assert MULTI_SHOT_SYSTEM_PROMPT in first_prompt(lake_task(use_multistep_prompt=True))
    own = first_prompt(lake_task(system_prompt="Walk to G."))
    assert "Walk to G." in own and SYSTEM_PROMPT not in own


def test_rows_give_seed_size_and_p_with_trinitys_defaults(tokenizer) -> None:
    def first_map(task: Task) -> str:
        engine = scripted(tokenizer, ["```Down```"] * 10)
        run_workflow(task, context(engine, tokenizer))
        return tokenizer.decode(engine.calls[0][0][0]).split("Current Observation (0): \n")[1].split("\nYou")[0]

    def shown(rows: list[str]) -> str:
        env = TrinityFrozenLake(desc=rows)
        return env.reset()[0].split("\n", 1)[1].split("\nYou")[0]

    assert first_map(lake_task({"size": 5})) == shown(trinity_random_map(5, 0.8, 42, 10))
    assert first_map(lake_task({"size": 5, "seed": None, "p": None})) == shown(trinity_random_map(5, 0.8, 42, 10))
    assert first_map(lake_task({"size": 6, "seed": 9, "p": 0.65}, max_steps=4)) == shown(
        trinity_random_map(6, 0.65, 9, 4))
    assert first_map(lake_task({}, desc=["FFG", "SHF"])) == "__G\nPO_"


@pytest.mark.parametrize(("raw", "message"), [
    ({"seed": 1}, "column 'size' is None; use an integer in [2, 32] (the side of the map; Trinity's default, 1,"),
    ({"seed": 1, "size": 1}, "column 'size' is 1; use an integer in [2, 32]"),
    ({"seed": -1, "size": 4}, "column 'seed' is -1; use an integer >= 0"),
    ({"seed": 1, "size": 4, "p": 2}, "column 'p' is 2; use a number in [0, 1]"),
])
def test_bad_rows_name_the_row_and_column(tokenizer, raw: dict, message: str) -> None:
    with pytest.raises(UserError, match=r"^taskset 'frozenlake' row 0: " + message.replace("(", r"\(")
                       .replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        run_workflow(lake_task(raw), context(scripted(tokenizer, []), tokenizer))


def test_workflow_args_are_checked_and_trinitys_unread_keys_accepted() -> None:
    declared = needs_of(WORKFLOWS.get("frozen_lake_workflow"))
    assert declared is not None and not declared.text_columns and not declared.reward_fn
    good = {"max_steps": 8, "is_slippery": True, "desc": ["SF", "HG"], "use_multistep_prompt": False,
            "env_max_steps": 8, "agent_max_steps": 10}
    assert declared.problems("frozen_lake_workflow", good, None, False) == []
    assert set(declared.ignored) == {"env_max_steps", "agent_max_steps"}
    bad = {"max_steps": 0, "is_slippery": "no", "desc": ["SF", "FF"], "use_multistep_prompt": 1}
    assert declared.problems("frozen_lake_workflow", bad, None, False) == [
        "workflow_args.max_steps: 0; use an integer >= 1 (the steps of an episode)",
        "workflow_args.is_slippery: 'no'; use true or false",
        "workflow_args.use_multistep_prompt: 1; use true or false",
        ("workflow_args.desc: ['SF', 'FF'] must hold exactly one start S and at least one goal G, e.g. "
         "['SFFF', 'FHFH', 'FFFH', 'HFFG']"),
    ]
    assert "'max_turns' not used by workflow 'frozen_lake_workflow'" in declared.problems(
        "frozen_lake_workflow", {"max_turns": 3}, None, False)[0]


def test_trinitys_episode_grader_is_refused_with_its_reason(tokenizer) -> None:
    """Trinity 0.6 scores the episode's chat with workflow_args.reward_fn_type (its OpenJudge graders, an outside
    judge API): refused, both keys at once, with the alternative; left empty they change nothing."""
    declared = needs_of(WORKFLOWS.get("frozen_lake_workflow"))
    graded = {"max_steps": 8, "reward_fn_type": "trajectory_accuracy_grader_reward",
              "reward_fn_args": {"model_name": "qwen3-max"}}
    problems = declared.problems("frozen_lake_workflow", graded, None, False)
    assert [p.split(":")[0] for p in problems] == ["workflow_args.reward_fn_type", "workflow_args.reward_fn_args"]
    assert problems[0].startswith("workflow_args.reward_fn_type: 'trajectory_accuracy_grader_reward': Trinity-RFT's "
                                  "frozen_lake_workflow scores each episode's whole chat")
    assert "OpenJudge" in problems[0] and "remove reward_fn_type and reward_fn_args" in problems[0]
    assert "explorer.auxiliary_models" in problems[0]
    assert declared.problems("frozen_lake_workflow", {"reward_fn_type": None, "reward_fn_args": {}}, None, False) == []
    with pytest.raises(ConfigError, match="workflow_args.reward_fn_type: 'openjudge_reward': "):
        run_workflow(lake_task(reward_fn_type="openjudge_reward"), context(scripted(tokenizer, []), tokenizer))


def test_trinitys_rows_load_without_prompt_or_answer_columns(tmp_path: Path, tokenizer) -> None:
    """A parquet file of Trinity's columns (seed, size, p, index, uid) loads as the explorer loads a
    taskset of the example's config (format left at its defaults), and its tasks play."""
    import pandas as pd

    from rfthpc.config.buffer import TasksetConfig
    from rfthpc.explorer.setup import load

    pd.DataFrame([{"seed": 42, "size": 4, "p": 0.8, "index": 0, "uid": "42_4_0.8"},
                  {"seed": 7, "size": 3, "p": 0.7, "index": 1, "uid": "7_3_0.7"}]).to_parquet(tmp_path / "train.parquet")
    ts = TasksetConfig(name="frozenlake", path=str(tmp_path / "train.parquet"), repeat_times=2,
                       default_workflow_type="frozen_lake_workflow",
                       workflow_args={"env_max_steps": 8, "agent_max_steps": 10, "is_slippery": False})
    tasks = load(ts, is_eval=False).tasks
    assert [t.raw["seed"] for t in tasks] == [42, 7] and tasks[0].prompt == "" and tasks[0].truth is None
    task = dataclasses.replace(tasks[0], rollout_args=SamplingArgs(max_tokens=4096), repeat_times=1)
    result = run_workflow(task, context(scripted(tokenizer, TO_GOAL), tokenizer))
    assert [e.reward for e in result.experiences] == [1.0] and tasks[0].repeat_times == 2


class ShortReplies:
    """The tiny model's engine with replies of at most 8 tokens (a random model rarely ends its own), so
    an episode has several turns within a small budget; keeps every completion it returns."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.max_model_len = engine.max_model_len
        self.replies: list[tuple[list[int], list[float]]] = []

    def generate(self, prompts: Any, n: int, params: SamplingArgs) -> Any:
        out = self.engine.generate(prompts, n, dataclasses.replace(params, max_tokens=min(params.max_tokens, 8)))
        self.replies += [(c.token_ids, c.logprobs) for group in out for c in group]
        return out


def test_trainer_logprobs_equal_the_explorers_on_its_episodes(tiny_model: Path, tokenizer) -> None:
    """On the tiny model's engine: each reply is trained on exactly as generated, with the behaviour
    logprobs the trainer's forward pass gives, through holes of observations (Trinity's prompt is long:
    the context is 2048 tokens here)."""
    import torch

    from rfthpc.engines import EngineSettings, make_engine
    from tests.workflows.test_env_workflow_engine import TOL, trainer_logprobs

    settings = EngineSettings(str(tiny_model), max_model_len=2048, seed=3, min_response_tokens=0)
    engine = ShortReplies(make_engine("transformers", settings))
    experiences = run_workflow(lake_task(repeat=2, max_tokens=400), context(engine, tokenizer)).experiences
    for exp in experiences:
        assert len(exp.response_token_ids) <= 400 and exp.info["env_steps"] >= 2, "several turns: masks with holes"
        for m, start, end in spans(exp.loss_mask):
            if m == 1:
                assert (exp.response_token_ids[start:end], exp.logprobs[start:end]) in engine.replies
    for exp, lp in zip(experiences, trainer_logprobs(tiny_model, experiences), strict=True):
        mask = torch.tensor(exp.loss_mask, dtype=torch.bool)
        assert float((lp[mask] - torch.tensor(exp.logprobs)[mask]).abs().max()) <= TOL

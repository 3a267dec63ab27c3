"""`env_workflow`: multi-turn episodes of a text environment, one experience per episode.

A task is one environment seed; its group is `repeat_times` episodes of that seed. Each episode
is a chat: the system prompt, the environment's observation as the user turn, the policy's reply
as the assistant turn (passed to `env.step` as the action), the next observation, ... Each turn is
one engine call, and the group's episodes step in lockstep: one generate call per turn for the
episodes still running, batched by the explorer with the other tasks' calls.

The trained ids are exactly those the policy generated and was conditioned on (`ChatTurns`): the
context only grows by appending. The policy's tokens keep their behaviour logprobs (loss mask 1);
framing and observation tokens get loss mask 0 and logprob 0.

workflow_args (see `EnvWorkflowArgs`; docs/agents.md):
    env                  environment: a built-in name or `module:Class` / `file.py:Class`
    env_args             its keyword arguments (a row's `env_args` column overrides them per task;
                         its `seed` is the episodes' seed, else the task's row index)
    system_prompt        the system prompt (the taskset's format.system_prompt wins)
    max_turns            policy turns per episode (10)
    max_tokens_per_turn  tokens per reply (default: rollout_args.max_tokens)
    max_context_tokens   prompt + response tokens of an episode (default, and at most: the engine's
                         max_model_len, so an episode that outgrows the context ends as truncated)
    max_response_tokens  response tokens of an episode: replies, framing and observations after
                         the opening prompt (Trinity-RFT's budget of its multi-turn workflows; none)
    format_penalty       subtracted from the reward per invalid action (0)
    reward_type          `sum` of step rewards, or `success` (1/0)
    turn_rewards         also give each turn's reward on its last token (token-level rewards)
    step_wise            each policy turn an experience of its own (step-wise advantages)
    history_turns        with step_wise: earlier turns each turn's prompt holds (default: all)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rfthpc.engines.sampling import Completion, SamplingArgs
from rfthpc.envs.base import TextEnv
from rfthpc.envs.registry import check_env, env_factory
from rfthpc.errors import ConfigError, UserError
from rfthpc.tasks.tasksets import EncodedPrompt, Task
from rfthpc.workflows.base import RolloutEngine, WorkflowContext, WorkflowResult, needs
from rfthpc.workflows.chat_turns import ChatTurns
from rfthpc.workflows.episode import REWARD_TYPES, Episode, RewardType, episode_steps

SEED_KEY = "seed"
"""The key of `env_args` that is the episodes' seed (passed to `reset`, not to the constructor)."""


@dataclass(frozen=True)
class EnvWorkflowArgs:
    """The `workflow_args` of `env_workflow`."""

    env: str
    env_args: Mapping[str, Any] = field(default_factory=dict)
    system_prompt: str | None = None
    max_turns: int = 10
    max_tokens_per_turn: int | None = None
    max_context_tokens: int | None = None
    max_response_tokens: int | None = None
    format_penalty: float = 0.0
    reward_type: RewardType = "sum"
    turn_rewards: bool = False
    step_wise: bool = False
    """Each policy turn an experience of its own (Trinity-RFT's step-wise workflows, for step-wise
    advantages such as step_wise_grpo), instead of the whole episode as one multi-turn experience."""
    history_turns: int | None = None
    """With `step_wise`: each turn's prompt holds only the last `history_turns` turns before it (0: the
    current observation alone), opened as the episode's first observation is (verl-agent's and ROLL's
    history_length), for environments whose observation says what the policy needs; unset: the whole
    episode so far."""

    @classmethod
    def of(cls, workflow_args: Mapping[str, Any]) -> EnvWorkflowArgs:
        """Parse `workflow_args`; a ConfigError names every bad key and its fix. The environment's class
        and arguments are checked where they are used (`env_factory`, with the row's arguments too)."""
        problems = arg_problems(workflow_args, check_env_class=False)
        if problems:
            raise ConfigError("; ".join(problems))
        return cls(**workflow_args)


ARG_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(EnvWorkflowArgs))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def arg_problems(workflow_args: Mapping[str, Any], check_env_class: bool = True) -> list[str]:
    """What is wrong with `env_workflow`'s workflow_args (their values; with `check_env_class`, the
    environment's class and arguments too), each message naming the key and the fix."""
    out = []
    env = workflow_args.get("env")
    env_args = workflow_args.get("env_args", {})
    if not isinstance(env, str) or not env:
        out.append("workflow_args.env: name the environment (a built-in name, or 'module:Class')")
    if not isinstance(env_args, Mapping):
        out.append(f"workflow_args.env_args={env_args!r}: give a mapping of the environment's arguments")
    elif isinstance(env, str) and env and check_env_class:
        out.extend(check_env(env, {k: v for k, v in env_args.items() if k != SEED_KEY}))
    prompt = workflow_args.get("system_prompt")
    if prompt is not None and not isinstance(prompt, str):
        out.append(f"workflow_args.system_prompt={prompt!r}: give text")
    for key, least in (("max_turns", 1), ("max_tokens_per_turn", 1), ("max_context_tokens", 2),
                       ("max_response_tokens", 1)):
        value = workflow_args.get(key, least)
        if (value is not None or key == "max_turns") and not (_is_int(value) and value >= least):
            out.append(f"workflow_args.{key}={value!r}: use an integer >= {least}"
                       + ("" if key == "max_turns" else " or leave it unset"))
    penalty = workflow_args.get("format_penalty", 0.0)
    if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or penalty < 0:
        out.append(f"workflow_args.format_penalty={penalty!r}: use a number >= 0 (subtracted per invalid action)")
    if workflow_args.get("reward_type", "sum") not in REWARD_TYPES:
        out.append(f"workflow_args.reward_type={workflow_args['reward_type']!r}: use one of {', '.join(REWARD_TYPES)}")
    for key in ("turn_rewards", "step_wise"):
        if not isinstance(workflow_args.get(key, False), bool):
            out.append(f"workflow_args.{key}={workflow_args[key]!r}: use true or false")
    history = workflow_args.get("history_turns")
    if history is not None:
        if not (_is_int(history) and history >= 0):
            out.append(f"workflow_args.history_turns={history!r}: use an integer >= 0 (earlier turns in each "
                       "turn's prompt) or leave it unset (all of them)")
        elif workflow_args.get("step_wise") is not True:
            out.append("workflow_args.history_turns: a turn's prompt without some earlier turns is no continuation "
                       "of one episode-long sequence, so each turn must be an experience of its own: set "
                       "step_wise: true, or unset history_turns")
    if workflow_args.get("turn_rewards") is True and workflow_args.get("step_wise") is True:
        out.append("workflow_args.turn_rewards: places each turn's reward inside one multi-turn experience, but "
                   "step_wise makes each turn an experience of its own (with the episode's reward); unset one")
    return out


def task_env_args(task: Task, args: EnvWorkflowArgs) -> tuple[dict[str, Any], int]:
    """(the environment's keyword arguments, the episodes' seed) of `task`: the taskset's `env_args`
    overridden by the row's `env_args`; the seed is their `seed`, else the row index."""
    row = task.raw.get("env_args") or {}
    if not isinstance(row, Mapping):
        raise UserError(f"taskset {task.taskset!r} row {task.index}: column 'env_args' is {row!r}, not a mapping")
    # Arrow gives every row the union of all rows' keys, the missing ones as None.
    merged = {**args.env_args, **{k: v for k, v in row.items() if v is not None}}
    seed = merged.pop(SEED_KEY, task.index)
    if not _is_int(seed):
        raise UserError(f"taskset {task.taskset!r} row {task.index}: env_args.seed={seed!r}; use an integer")
    return merged, seed


def _generate(engine: RolloutEngine, contexts: Sequence[list[int]], params: SamplingArgs) -> list[Completion]:
    """One reply per context, in one engine call. Equal contexts (a group's first turn) are one
    request for n samples, so a seeded request (`rollout_args.seed`) still gives n different replies."""
    if len(contexts) > 1 and all(c == contexts[0] for c in contexts):
        return engine.generate([contexts[0]], len(contexts), params)[0]
    return [group[0] for group in engine.generate(contexts, 1, params)]


def _token_limit(prompt_tokens: int, args: EnvWorkflowArgs, engine_limit: int | None) -> tuple[int | None, str]:
    """(the most prompt + response tokens of an episode whose opening prompt has `prompt_tokens`, the
    setting that sets it): `max_context_tokens` never beyond what the engine holds, or
    `max_response_tokens` after the prompt if that ends the episode sooner."""
    limits = [n for n in (args.max_context_tokens, engine_limit) if n is not None]
    context = min(limits) if limits else None
    if args.max_response_tokens is not None:
        budget = prompt_tokens + args.max_response_tokens
        if context is None or budget < context:
            return budget, "max_response_tokens"
    return context, "max_context_tokens"


def _turn_params(params: SamplingArgs, episodes: Sequence[Episode]) -> SamplingArgs:
    """`params` for a turn of `episodes`: no more tokens per reply than the most room any of them has
    left (the tokens past an episode's room would be cut off anyway)."""
    rooms = [room for ep in episodes if (room := ep.room) is not None]
    if len(rooms) < len(episodes):
        return params  # an episode without a limit may use every token of a reply
    most = max(1, *rooms)
    return params if most >= params.max_tokens else dataclasses.replace(params, max_tokens=most)


def _play_turn(episodes: list[Episode], envs: list[TextEnv], completions: list[Completion],
               turns: ChatTurns, args: EnvWorkflowArgs) -> None:
    """Book each running episode's reply, step its environment, end it or append the next observation."""
    for ep, env, c in zip(episodes, envs, completions, strict=True):
        room = ep.room
        keep = room if room is not None and len(c.token_ids) > room else None
        # A reply longer than the room is kept up to it (still exactly what was sampled: the same tokens
        # a request for that many would have given) and played as far as it goes, as a reply cut by
        # max_tokens is, and as Trinity-RFT plays a reply cut at its response budget.
        ep.add_reply(c, keep=keep)
        action = c.text if keep is None else turns.prompts.tokenizer.decode(c.token_ids[:keep],
                                                                             skip_special_tokens=True)
        observation, reward, terminated, truncated, info = env.step(action)
        ep.record_step(reward, info, args.format_penalty)
        ep.observation = observation
        if terminated or truncated:
            ep.end(None if terminated else "env")
            continue
        if len(ep.turns) >= args.max_turns:
            ep.end("max_turns")
            continue
        framing = turns.next_turn(c.token_ids[:keep], observation)
        opening = None
        if ep.history_turns is not None:
            opened = turns.first_prompt(observation)
            if opened is None:
                ep.end("max_prompt_tokens")  # the observation alone is longer than a prompt may be
                continue
            opening = list(opened.token_ids)
        if ep.token_limit is not None and ep.context_after(framing, opening) >= ep.token_limit:
            ep.end(ep.limited_by)  # no room left for even one token of the next reply
            continue
        ep.add_framing(framing, opening)


@needs(args=ARG_NAMES, reward_fn=False, check=arg_problems, text_columns=False)
def env_workflow(task: Task, ctx: WorkflowContext) -> WorkflowResult:
    """`repeat_times` episodes of the task's environment seed, played in lockstep (see the module doc)."""
    args = EnvWorkflowArgs.of(task.workflow_args)
    env_args, seed = task_env_args(task, args)
    return play_episodes(task, ctx, args, env_args, seed)


def play_episodes(task: Task, ctx: WorkflowContext, args: EnvWorkflowArgs, env_args: Mapping[str, Any],
                  seed: int) -> WorkflowResult:
    """`repeat_times` episodes of environment `args.env` made with `env_args`, each reset with `seed`,
    played in lockstep (see the module doc): `env_workflow`'s play, for workflows that read their
    settings from elsewhere (Trinity-RFT's `frozen_lake_workflow`)."""
    system = task.system_prompt if task.system_prompt is not None else args.system_prompt
    turns = ChatTurns(ctx.prompts, system, task.chat_template)
    params = task.rollout_args
    if args.max_tokens_per_turn is not None:
        params = dataclasses.replace(params, max_tokens=args.max_tokens_per_turn)
    new_env = env_factory(args.env, env_args)
    envs: list[TextEnv] = []
    truncated_prompt = False
    try:
        episodes = []
        opening: dict[str, EncodedPrompt | None] = {}
        for _ in range(task.repeat_times):
            envs.append(new_env())
            observation, _ = envs[-1].reset(seed=seed)
            # The episodes of one seed mostly open alike: each first observation is rendered once.
            if observation not in opening:
                opening[observation] = turns.first_prompt(observation)
            prompt = opening[observation]
            if prompt is None:
                return WorkflowResult([], {"skipped": "prompt longer than max_prompt_tokens"})
            truncated_prompt |= prompt.truncated
            limit, limited_by = _token_limit(len(prompt.token_ids), args, ctx.engine.max_model_len)
            ids = list(prompt.token_ids)
            episodes.append(Episode(ids, token_limit=limit, limited_by=limited_by, observation=observation,
                                    history_turns=args.history_turns,
                                    openings=[ids] if args.history_turns is not None else []))
        while running := [i for i, ep in enumerate(episodes) if not ep.done]:
            playing = [episodes[i] for i in running]
            completions = _generate(ctx.engine, [ep.context for ep in playing], _turn_params(params, playing))
            _play_turn(playing, [envs[i] for i in running], completions, turns, args)
    finally:
        for env in envs:
            env.close()
    decode = turns.prompts.tokenizer.decode
    experiences = [ep.experience(args.reward_type, args.turn_rewards, decode(ep.response)) for ep in episodes]
    if args.step_wise:
        experiences = [step for e, (whole, ep) in enumerate(zip(experiences, episodes, strict=True))
                       for step in episode_steps(whole, ep, args.reward_type, e, decode)]
    return WorkflowResult(experiences, {"prompt_truncated": truncated_prompt, "env_seed": seed})

"""What a workflow is, what it calls, and what it returns.

A workflow is a function `workflow(task, ctx) -> WorkflowResult`: it builds the prompt, asks the
rollout engine for `task.repeat_times` responses, scores them and returns one scored
`Experience` per response (the group). Engines (vLLM, transformers) plug in through the small
`RolloutEngine` protocol. Multi-turn workflows call the engine several times and mark the tokens
the policy did not generate (tool or user turns) with loss mask 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from rfthpc.engines.sampling import Completion, SamplingArgs
from rfthpc.errors import ConfigError

if TYPE_CHECKING:
    from rfthpc.tasks.tasksets import PromptBuilder, Task


class RolloutEngine(Protocol):
    """A generator of responses with per-token logprobs (vLLM, transformers, an LLM judge)."""

    tokenizer: Any
    """The served model's Hugging Face tokenizer (prompts are built with its chat template)."""
    max_model_len: int | None
    """Most prompt + response tokens a request may hold (None: no limit the workflow must respect)."""

    def generate(
        self, prompts_token_ids: Sequence[Sequence[int]], n: int, params: SamplingArgs
    ) -> list[list[Completion]]:
        """For each prompt, `n` independent samples."""
        ...


@dataclass
class AuxiliaryModel:
    """An auxiliary engine (`explorer.auxiliary_models[i]`) as workflows and reward functions see it.

    `chat` renders a chat with the model's own tokenizer and chat template (its `chat_template` and
    `enable_thinking`) within its `max_prompt_tokens`; every request's `max_tokens` is capped at its
    `max_response_tokens`. `generate` takes token ids, like the policy's engine.
    """

    name: str
    engine: RolloutEngine
    prompts: PromptBuilder
    max_response_tokens: int | None = None

    @property
    def tokenizer(self) -> Any:
        """The auxiliary model's tokenizer."""
        return self.prompts.tokenizer

    @property
    def max_model_len(self) -> int | None:
        """The auxiliary engine's context length."""
        return self.engine.max_model_len

    def _capped(self, params: SamplingArgs) -> SamplingArgs:
        if self.max_response_tokens is None or params.max_tokens <= self.max_response_tokens:
            return params
        return dataclasses.replace(params, max_tokens=self.max_response_tokens)

    def generate(
        self, prompts_token_ids: Sequence[Sequence[int]], n: int, params: SamplingArgs
    ) -> list[list[Completion]]:
        """For each prompt, `n` samples (at most `max_response_tokens` tokens each)."""
        return self.engine.generate(prompts_token_ids, n, self._capped(params))

    def chat(
        self, messages: Sequence[Mapping[str, str]], n: int = 1, params: SamplingArgs | None = None
    ) -> list[Completion]:
        """`n` responses to a chat (a list of {role, content}); `params` default to `max_response_tokens`.

        A prompt over `max_prompt_tokens` that is not truncated raises ValueError (in a reward
        function: the group is marked with the error and scored 0).
        """
        prompt = self.prompts.encode(messages)
        if prompt is None:
            raise ValueError(
                f"auxiliary model {self.name!r}: the prompt is longer than its max_prompt_tokens "
                f"({self.prompts.max_prompt_tokens}) and model.enable_prompt_truncation is off"
            )
        if params is None:
            params = SamplingArgs(max_tokens=self.max_response_tokens or SamplingArgs.max_tokens)
        return self.generate([prompt.token_ids], n, params)[0]


@dataclass
class Experience:
    """One scored response; the explorer adds the policy version, names and times when it commits."""

    prompt_token_ids: list[int]
    response_token_ids: list[int]
    logprobs: list[float]
    """Per response token; 0 where the policy did not generate the token (loss_mask 0)."""
    loss_mask: list[int]
    """Per response token: 1 if the policy generated it and it is trained on, else 0."""
    reward: float
    response_text: str = ""
    finish_reason: str = ""
    reward_components: dict[str, float] = field(default_factory=dict)
    token_level_rewards: list[float] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    teacher_logprobs: list[float] | None = None
    """Per response token: the log-probability a distillation teacher gives it (set by the explorer,
    `rfthpc.explorer.teacher`; workflows leave it None)."""

    def __post_init__(self) -> None:
        n = len(self.response_token_ids)
        lengths = {"logprobs": len(self.logprobs), "loss_mask": len(self.loss_mask)}
        for name in ("token_level_rewards", "teacher_logprobs"):
            if getattr(self, name) is not None:
                lengths[name] = len(getattr(self, name))
        bad = {k: v for k, v in lengths.items() if v != n}
        if bad:
            raise ValueError(f"experience has {n} response tokens but {bad}")

    @classmethod
    def from_completion(
        cls, prompt_token_ids: Sequence[int], completion: Completion, reward: float, **fields: Any
    ) -> Experience:
        """A single-turn experience: every response token was generated by the policy (mask 1)."""
        return cls(
            prompt_token_ids=list(prompt_token_ids),
            response_token_ids=list(completion.token_ids),
            logprobs=list(completion.logprobs),
            loss_mask=[1] * len(completion.token_ids),
            reward=reward,
            response_text=completion.text,
            finish_reason=completion.finish_reason,
            **fields,
        )


@dataclass
class WorkflowResult:
    """The group of one task, plus group-level facts for the explorer's metrics and logs."""

    experiences: list[Experience]
    info: dict[str, Any] = field(default_factory=dict)
    """e.g. "reward_error" (reward function failed: the group is marked, rewards are 0),
    "prompt_truncated", "skipped" (prompt too long and truncation disabled: no experiences)."""

    @property
    def reward_error(self) -> str | None:
        """Why the reward function failed on this group, if it did."""
        return self.info.get("reward_error")


@dataclass
class WorkflowContext:
    """What a workflow may use besides its task."""

    engine: RolloutEngine
    """The policy being trained."""
    prompts: PromptBuilder
    """Chat template, tokenizer and prompt-length policy of the policy model."""
    auxiliary: Mapping[str, RolloutEngine] = field(default_factory=dict)
    """Extra named engines (`explorer.auxiliary_models`, as `AuxiliaryModel`s), e.g. an LLM judge for rewards."""
    endpoint_started: Callable[[str], None] | None = None
    """Called with its URL when the policy's OpenAI-compatible endpoint starts in this process (the explorer
    publishes it in the run directory, `rfthpc.rundir.endpoints`)."""


EPISODE = "episode"
"""Key of an experience's `info`: the episode (0, 1, ... within its group) the experience is one step of,
when a workflow trains each model call of a multi-turn episode as an experience of its own (Trinity-RFT's
run id); step-wise advantages compare episodes, not experiences. Absent: the experience is a whole episode."""
STEP = "step"
"""Key of an experience's `info`: its place (0, 1, ...) in its episode's steps (with `EPISODE`)."""
STEP_REWARD = "step_reward"
"""Key of an experience's `info` (with `EPISODE`): what the step itself earned (the environment's reward for
that turn, ROLL's step score), which ROLL's step_reinforce and the GiGPOs discount back over the episode. Absent:
the episode's reward counts as earned by its last step only."""
STATE = "state"
"""Key of an experience's `info` (with `EPISODE`): a digest of the environment state the step acted in (its
observation), which GiGPO groups steps by (its anchor states). Absent: a state of the step's own."""


Workflow = Callable[["Task", WorkflowContext], WorkflowResult]


@dataclass(frozen=True)
class WorkflowNeeds:
    """What a workflow reads from its taskset's config, declared beside it (`needs` decorator), so a
    mistake is reported by `rfthpc config validate` and at submit, before anything is queued."""

    args: tuple[str, ...] = ()
    """The `workflow_args` keys it reads."""
    default_reward: str | None = None
    """The reward function it uses when the taskset names none (None: the taskset must name one)."""
    truth: bool = False
    """It needs reference answers (`format.response_key`)."""
    reward_fn: bool = True
    """It scores with a reward function (False: its rewards come from elsewhere, e.g. an environment)."""
    check: Callable[[Mapping[str, Any]], list[str]] | None = None
    """Checks the values of its `workflow_args` (e.g. an environment's name and arguments): the problems."""
    auxiliary: str | None = None
    """It asks an auxiliary model (a judge, a reward model): the `workflow_args` key that names it (unset:
    the only one of `explorer.auxiliary_models`). None: it uses none."""
    ignored: Mapping[str, str] = field(default_factory=dict)
    """`workflow_args` keys it accepts and does not read, each with why (a note when a config sets one):
    keys of another framework's workflow of the same name that do nothing there either."""
    refused: Mapping[str, str] = field(default_factory=dict)
    """`workflow_args` keys of another framework's workflow of the same name that rfthpc cannot follow,
    each with why and the alternative: an error when a config gives one a value (empty: nothing to follow)."""
    text_columns: bool = True
    """It reads the rows' prompt and reference answer (`format.prompt_key`, `format.response_key`).
    False: its tasks are made of other columns (an environment's seed and settings), so rows need neither."""
    open_args: bool = False
    """It hands every `workflow_args` key it does not read to the user's code (a Trinity-RFT plugin class),
    so no key is unknown."""

    def problems(self, workflow: str, workflow_args: Mapping[str, Any], reward_fn: str | None,
                 has_truth: bool, auxiliary: Sequence[str] | None = None) -> list[str]:
        """What is wrong with a taskset's settings for this workflow, each naming the key and the fix.
        `auxiliary`: the names of the auxiliary models there are (None: not checked)."""
        out = [f"workflow_args.{name}: {workflow_args[name]!r}: {why}" for name, why in self.refused.items()
               if workflow_args.get(name)]
        unknown = [] if self.open_args else \
            sorted(set(workflow_args) - set(self.args) - set(self.ignored) - set(self.refused))
        if unknown:
            out.append(f"workflow_args: {', '.join(map(repr, unknown))} not used by workflow {workflow!r}; it "
                       f"takes: {', '.join(self.args) or '(none)'}")
        if not unknown and self.check is not None:
            out.extend(self.check({k: v for k, v in workflow_args.items()
                                   if k not in self.ignored and k not in self.refused}))
        if self.auxiliary is not None and auxiliary is not None:
            problem = auxiliary_problem(workflow, self.auxiliary, workflow_args.get(self.auxiliary), auxiliary)
            if problem:
                out.append(problem)
        if self.reward_fn and reward_fn is None and self.default_reward is None:
            out.append(f"default_reward_fn_type: workflow {workflow!r} needs a reward function; name one "
                       "(e.g. accuracy_reward, format_reward or module:function)")
        if self.truth and not has_truth:
            out.append(f"format.response_key: workflow {workflow!r} needs reference answers; name the column "
                       "that holds them")
        return out

    def reward(self, reward_fn: str | None) -> str | None:
        """The reward function a task uses: its own, else this workflow's default."""
        return reward_fn or self.default_reward


def auxiliary_problem(workflow: str, key: str, name: str | None, names: Sequence[str]) -> str | None:
    """Why `workflow` cannot find the auxiliary model `workflow_args[key]` = `name` (unset: the only
    one) among those named `names`; None if it can."""
    if name is not None:
        if name in names:
            return None
        return (f"workflow_args.{key}: {name!r} is not an auxiliary model of the explorers; "
                f"explorer.auxiliary_models are: {', '.join(names) or '(none)'}")
    if len(names) == 1:
        return None
    if not names:
        return (f"default_workflow_type: workflow {workflow!r} asks an auxiliary model (a judge or a reward model) "
                "and explorer.auxiliary_models is empty; add one")
    return (f"workflow_args.{key}: workflow {workflow!r} asks one auxiliary model; name which of "
            f"{', '.join(names)}")


def auxiliary_of(task: Task, ctx: WorkflowContext, key: str) -> AuxiliaryModel:
    """The auxiliary model named by the task's `workflow_args[key]`, else the only one; a ConfigError
    naming the fix if there is no such model."""
    name = task.workflow_args.get(key)
    problem = auxiliary_problem(task.workflow, key, name, list(ctx.auxiliary))
    if problem:
        raise ConfigError(f"taskset {task.taskset!r}: {problem}")
    model = ctx.auxiliary[name] if name is not None else next(iter(ctx.auxiliary.values()))
    return model  # type: ignore[return-value]


def needs(**declared: Any) -> Callable[[Workflow], Workflow]:
    """Declare a workflow's `WorkflowNeeds` (`@needs(args=("system_prompt",), truth=True)`)."""
    def mark(fn: Workflow) -> Workflow:
        fn.needs = WorkflowNeeds(**declared)  # type: ignore[attr-defined]
        return fn
    return mark


def needs_of(fn: Workflow) -> WorkflowNeeds | None:
    """What `fn` declared it needs; None for a user workflow that declared nothing (then nothing is checked)."""
    found = getattr(fn, "needs", None)
    return found if isinstance(found, WorkflowNeeds) else None

"""Math workflows: one turn, the answer scored against the reference answer.

- `math_workflow`: GSM8K-style problems, the answer after `####`;
- `math_boxed_workflow`, `math_dapo_workflow`: Trinity-RFT's workflows of those names, the answer
  in `\\boxed{}`; both can prompt a base model without its chat template (`use_base`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rfthpc.rewards.math_reward import accuracy_reward
from rfthpc.rewards.registry import REWARDS
from rfthpc.tasks.tasksets import Task
from rfthpc.workflows.base import WorkflowContext, WorkflowResult, needs
from rfthpc.workflows.simple import run_single_turn

MATH_SYSTEM_PROMPT = "Solve the problem step by step. Write the final answer on the last line as '#### <number>'."

BOXED_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
"""Trinity-RFT's `math_boxed_workflow` system prompt."""
BOXED_THINK_SYSTEM_PROMPT = (
    "You are a helpful assistant that solves MATH problems. You should first thinks about the reasoning "
    "process in mind and then provides the user with the answer. You should present your reasoning process "
    "using the format: <think>\n ...your reasoning process here... </think>\n first. You should always "
    "include your final answer in \\boxed{} as closed-form results."
)
"""Trinity-RFT's `math_boxed_workflow` system prompt with `with_think` (its wording, unedited)."""

BASE_MODEL_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}{{- 'System:' + message['content'] + '\\n' -}}"
    "{%- elif message['role'] == 'user' -%}{{- 'User:\\n' + message['content'] + '\\n' -}}"
    "{%- else -%}{{- 'Assistant:\\n' + message['content'] + '\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- 'Assistant:\\n' -}}{%- endif -%}"
)
"""`use_base`: the plain-text prompt Trinity-RFT gives a base model, `System:<system>\\nUser:\\n<question>
\\nAssistant:\\n`, as a chat template (so `max_prompt_tokens` and the reply prefix apply as to any prompt)."""


@needs(args=("system_prompt",), default_reward="math_reward", truth=True)
def math_workflow(task: Task, ctx: WorkflowContext) -> WorkflowResult:
    """One turn with a math system prompt; reward `math_reward` unless the taskset names another.

    workflow_args: `system_prompt` replaces MATH_SYSTEM_PROMPT (the taskset's
    format.system_prompt, if set, wins over both). MATH_SYSTEM_PROMPT asks for the `####` answer that
    `math_reward` reads, so, as in Trinity-RFT (whose default prompt goes with its `math_reward`), it
    is not given when the taskset names another reward function (e.g. `countdown_reward`, whose
    questions say how to answer).
    """
    assert task.reward_fn is not None, "run_workflow gives the default reward"
    default = MATH_SYSTEM_PROMPT if REWARDS.get(task.reward_fn) is accuracy_reward else None
    system_prompt = task.workflow_args.get("system_prompt", default)
    return run_single_turn(task, ctx, task.reward_fn, system_prompt)


def _flag_problems(args: Mapping[str, Any], flags: tuple[str, ...]) -> list[str]:
    return [f"workflow_args.{name}: {args[name]!r}; use true or false"
            for name in flags if name in args and not isinstance(args[name], bool)]


def boxed_arg_problems(args: Mapping[str, Any]) -> list[str]:
    """The problems with `math_boxed_workflow`'s `workflow_args`."""
    problems = _flag_problems(args, ("use_base", "with_think"))
    coef = args.get("format_score_coef", 0.1)
    if isinstance(coef, bool) or not isinstance(coef, (int, float)) or coef < 0:
        problems.append(f"workflow_args.format_score_coef: {coef!r}; use a number >= 0 (the penalty of a "
                        "response without <think>...</think> when with_think is on)")
    return problems


@needs(args=("use_base", "with_think", "format_score_coef"),
       default_reward="math_boxed_reward", truth=True, check=boxed_arg_problems)
def math_boxed_workflow(task: Task, ctx: WorkflowContext) -> WorkflowResult:
    """Trinity-RFT's `math_boxed_workflow`: one turn asking for the answer in `\\boxed{}`; reward
    `math_boxed_reward` unless the taskset names another (Trinity's DAPO example names `math_dapo_reward`).

    workflow_args (Trinity's):
      - `with_think` (false): the system prompt asks for `<think>...</think>` first
        (BOXED_THINK_SYSTEM_PROMPT, else BOXED_SYSTEM_PROMPT), and the reward, where it takes
        `with_think`, penalises a response without them;
      - `format_score_coef` (0.1): that penalty, passed to a reward that takes it;
      - `use_base` (false): prompt without the chat template, as plain text (BASE_MODEL_TEMPLATE).
    The taskset's `format.system_prompt` wins over the default prompts, and its `reward_fn_args` over
    `with_think` and `format_score_coef`.

    Where it differs: Trinity's DAPO example gives this workflow `enable_overlong_penalty`,
    `penalty_factor`, `max_response_length` and `cache_length`; loading the config reads them as
    `algorithm.overlong_buffer` (rfthpc.dialects.trinity.apply_trinity_overlong). The reply prefix
    (`format.reply_prefix`) is appended to the prompt as in every rfthpc workflow, not sent as an assistant
    message.
    """
    assert task.reward_fn is not None, "run_workflow gives the default reward"
    args = task.workflow_args
    with_think = bool(args.get("with_think", False))
    return run_single_turn(
        task, ctx, task.reward_fn, BOXED_THINK_SYSTEM_PROMPT if with_think else BOXED_SYSTEM_PROMPT,
        chat_template=BASE_MODEL_TEMPLATE if args.get("use_base") else None,
        reward_args={"with_think": with_think, "format_score_coef": args.get("format_score_coef", 0.1)},
    )


def dapo_arg_problems(args: Mapping[str, Any]) -> list[str]:
    """The problems with `math_dapo_workflow`'s `workflow_args`."""
    return _flag_problems(args, ("use_base",))


@needs(args=("use_base",), default_reward="math_dapo_reward", truth=True,
       check=dapo_arg_problems)
def math_dapo_workflow(task: Task, ctx: WorkflowContext) -> WorkflowResult:
    """Trinity-RFT's `math_dapo_workflow`: one turn with the taskset's own system prompt (there is no
    default), scored by `math_dapo_reward` (+1 right, -1 wrong).

    workflow_args: `use_base` as in `math_boxed_workflow`. Where it differs: Trinity always scores
    with `math_dapo_reward`; here a reward the taskset names is used instead. Trinity's overlong
    settings (`enable_overlong_penalty`, ...) are read as `algorithm.overlong_buffer` when the config
    is loaded (rfthpc.dialects.trinity.apply_trinity_overlong).
    """
    assert task.reward_fn is not None, "run_workflow gives the default reward"
    use_base = task.workflow_args.get("use_base", False)
    return run_single_turn(task, ctx, task.reward_fn, chat_template=BASE_MODEL_TEMPLATE if use_base else None)

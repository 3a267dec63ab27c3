"""`toolcall_workflow` (alias `tool_call_workflow`): Trinity-RFT's tool-call workflow, after Tool-N1
(arXiv:2505.00024, NVlabs/Tool-N1): the policy is shown the tools and a conversation, and must
answer with the right tool calls, which are scored, not run.

Each row is a ToolACE-style sample (Trinity-RFT's `scripts/data_prepare/get_toolace_data.py` writes them):
  - `raw_system`: the system prompt; TOOL_PROMPT, listing the tools, is appended to it;
  - `tools`: the tools' JSON schemas (a list, or that list as JSON text);
  - `conversations`: the turns so far, `[{"from": "user" | "assistant" | "function_call" |
    "observation", "value": ...}]` (also `human`, `gpt`, `tool` for the roles);
  - `answer` (`format.response_key`): the reference calls, scored by `toolcall_reward`.
The policy's chat is built from these columns alone; `format.prompt_key` must still name a text
column (e.g. `raw_system`) for the taskset to load, and `format.system_prompt` is not used.
"""

from __future__ import annotations

import json
from typing import Any

from rfthpc.errors import UserError
from rfthpc.tasks.tasksets import Task
from rfthpc.workflows.base import WorkflowContext, WorkflowResult, needs
from rfthpc.workflows.simple import run_single_turn

TOOL_PROMPT = """# Tool

<tools>
{tools}
</tools>

In each action step, you MUST:
1. Think about the reasoning process in the mind and enclosed your reasoning within <think> </think> XML tags.
2. Then, provide a json object with function names and arguments within <tool_call></tool_call> XML tags. i.e., <tool_call>[{{"name": <function-name>, "arguments": <args-json-object>}}, {{"name": <function-name2>, "arguments": <args-json-object2>}}, ...]</tool_call>
3. Make sure both the reasoning and the tool call steps are included together in one single reply.
A complete reply example is: <think>To address the query, I need to send the email to Bob and then buy the banana through walmart. </think> <tool_call> [{{"name": "email", "arguments": {{"receiver": "Bob", "content": "I will bug banana through walmart"}}}}, {{"name": "walmart", "arguments": {{"input": "banana"}}}}]</tool_call>. Please make sure the type of the arguments is correct.
"""
"""Tool-N1's tool prompt as Trinity-RFT gives it (its wording, typos included: the policy is trained on it)."""

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
         "function_call": "assistant", "observation": "tool", "tool": "tool"}
"""A conversation turn's `from` → the chat role it is given."""


def tool_lines(tools: Any) -> str:
    """One line per tool: `{"type": "function", "function": <schema>}` (the form Qwen's templates use)."""
    tools = json.loads(tools) if isinstance(tools, str) else tools
    return "\n".join(json.dumps({"type": "function", "function": tool}) for tool in tools)


def toolcall_messages(row: dict[str, Any]) -> list[dict[str, str]]:
    """The policy's chat for a ToolACE-style row (module doc): system prompt with the tools, then the turns.

    A `function_call` turn is an assistant message holding the calls as JSON text (Trinity encodes
    the JSON text once more, quoting it; here it is kept as the calls). A turn of another `from` is
    a ValueError naming it."""
    messages = [{"role": "system", "content": row["raw_system"] + TOOL_PROMPT.format(tools=tool_lines(row["tools"]))}]
    for turn in row["conversations"]:
        role = ROLES.get(turn["from"])
        if role is None:
            raise ValueError(f"conversation turn from {turn['from']!r}: expected one of {', '.join(ROLES)}")
        value = turn["value"]
        messages.append({"role": role, "content": value if isinstance(value, str) else json.dumps(value)})
    return messages


@needs(default_reward="toolcall_reward", truth=True)
def toolcall_workflow(task: Task, ctx: WorkflowContext) -> WorkflowResult:
    """Trinity-RFT's `toolcall_workflow`: one turn on the chat `toolcall_messages` builds from the row;
    each response scores 1 if it thinks, then makes exactly the reference calls (`toolcall_reward`),
    else 0.

    Where it differs: Trinity always scores with its tool-call rule; here a reward function the
    taskset names is used instead. Data without the columns above stops the explorer with an error
    naming them, where Trinity fails each task with a KeyError.
    """
    assert task.reward_fn is not None, "run_workflow gives the default reward"
    missing = [c for c in ("raw_system", "tools", "conversations") if c not in task.raw]
    if missing:
        raise UserError(f"taskset {task.taskset!r}, task {task.task_id}: toolcall_workflow needs the columns "
                        f"raw_system, tools and conversations; missing: {', '.join(missing)}")
    return run_single_turn(task, ctx, task.reward_fn, messages=toolcall_messages(task.raw))

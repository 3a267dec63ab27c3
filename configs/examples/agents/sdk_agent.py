"""An agent written with the OpenAI Agents SDK (`pip install openai-agents`), for `agent_workflow`
(configs/examples/agent-openai-agents-sdk.yaml): an SDK `Agent` with a calculator tool answers the demo's
arithmetic question, calling the tool as often as it likes within `max_turns` model calls; the reward is whether
its final answer is right. The policy is the SDK's chat-completions model on the episode's endpoint; every call
the SDK makes (each tool round) is one step the explorer records. The SDK's tracing, which would upload each run
to OpenAI, is off: compute nodes have no internet."""

from __future__ import annotations

import ast
import operator
from typing import Any

from agents import Agent, MaxTurnsExceeded, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool
from openai import AsyncOpenAI

from rfthpc.rewards.math_reward import accuracy_reward

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.USub: operator.neg, ast.UAdd: operator.pos}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))
    raise ValueError("only numbers, + - * / and parentheses")


@function_tool
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression of numbers, + - * / and parentheses, e.g. "(3 + 4) * 2".

    Args:
        expression: the expression to evaluate.
    """
    try:
        return f"{_evaluate(ast.parse(expression, mode='eval')):g}"
    except (SyntaxError, ValueError, ZeroDivisionError) as e:
        return f"error: {e}"


def solve(base_url: str, api_key: str, task: dict[str, Any], max_turns: int = 3) -> float:
    """Run the SDK agent on the task's question; 1.0 if its final answer is the reference answer."""
    model = OpenAIChatCompletionsModel(model="policy",
                                       openai_client=AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0))
    agent = Agent(name="arithmetic", instructions=task["system_prompt"] or None, model=model, tools=[calculate])
    try:
        result = Runner.run_sync(agent, task["prompt"], max_turns=max_turns,
                                 run_config=RunConfig(tracing_disabled=True))
    except MaxTurnsExceeded:
        return 0.0
    return accuracy_reward(str(result.final_output), task["truth"])["accuracy"]

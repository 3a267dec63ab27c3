"""A calculator tool environment for math word problems: compute with a safe evaluator, then answer.

The task gives the question and the reference answer (`question` and `answer` in its `env_args`, or in
the `options` of `reset`, which win). The first observation is the question and how to use the tool.
Each reply is one of:
- a final answer, marked as rfthpc's math reward reads it (`#### 42`, else `\\boxed{42}`): the episode
  terminates with the math reward (`accuracy_reward`: 1 if the answer equals the reference, else 0)
  and `success`; a reply that marks an answer ends the episode even if it also calls the calculator;
- one or more calculator calls, `<calc>12*(3+4)</calc>` (a last call left open at the end of the reply
  counts, as a workflow may stop generating at `</calc>`): each is evaluated by
  `rfthpc.envs.arithmetic.evaluate` (numbers, + - * / // % ** and parentheses only; never Python's
  `eval`) and the observation lists the results, `<calc>12*(3+4)</calc> = 84`, reward 0. A refused
  call is listed with the reason and makes the step an `invalid_action`;
- anything else: an `invalid_action`, and the observation says what to write.
After `max_steps` replies without a final answer the episode is truncated (`success` False).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rfthpc.envs.args import ENV_ARGS_KEY, bad_arg, int_arg
from rfthpc.envs.arithmetic import ALLOWED, CalcError, evaluate, format_number
from rfthpc.errors import ConfigError
from rfthpc.rewards.math_reward import ANSWER_MARK, accuracy_reward, marked_answer

CALL = re.compile(r"<calc>(.*?)(?:</calc>|\Z)", re.DOTALL)
INSTRUCTIONS = (
    f"You may use a calculator: write <calc>expression</calc> using {ALLOWED}, e.g. <calc>12*(3+4)</calc>, "
    f"and the result comes back. When you know the answer, write it on its own line as {ANSWER_MARK} <answer>."
)


class Calculator:
    """A math word problem, with a calculator the policy calls in tags, ending at the final answer."""

    def __init__(self, *, question: str | None = None, answer: str | None = None, max_steps: int = 8,
                 max_expression_chars: int = 200, max_exponent: int = 100) -> None:
        """`question`, `answer`: the problem and its reference answer (e.g. a GSM8K solution ending in
        `#### 42`, or just `42`); `max_steps`: replies before the episode is truncated;
        `max_expression_chars`, `max_exponent`: limits on one calculator call."""
        self.question = _text_arg("question", question)
        self.answer = _text_arg("answer", answer)
        self.max_steps = int_arg("max_steps", max_steps, 1)
        self.max_expression_chars = int_arg("max_expression_chars", max_expression_chars, 1, 1000)
        self.max_exponent = int_arg("max_exponent", max_exponent, 1, 1000)
        self._answer = ""
        self._steps = 0
        self._done = True

    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Pose the question (the seed is unused: the episode is the task's question)."""
        options = options or {}
        question = _text_arg("question", options.get("question", self.question))
        answer = _text_arg("answer", options.get("answer", self.answer))
        for name, value in (("question", question), ("answer", answer)):
            if value is None:
                raise ConfigError(f"{ENV_ARGS_KEY}.{name}: missing; the calculator environment needs the task's "
                                  f"{name} in the row's env_args (or in the options of reset)")
        assert question is not None and answer is not None
        self._answer = answer
        self._steps = 0
        self._done = False
        return f"{question}\n\n{INSTRUCTIONS}", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Answer or compute, by the reply's form (see the module docstring)."""
        if self._done:
            raise RuntimeError("Calculator.step called before reset or after the episode ended")
        self._steps += 1
        info: dict[str, Any] = {}
        reward, terminated = 0.0, False
        final = marked_answer(action)
        calls = CALL.findall(action)
        if final is not None:
            reward = accuracy_reward(action, self._answer)["accuracy"]
            terminated = True
            info.update(success=reward == 1.0, answer=final)
            observation = f"Your final answer: {final}."
        elif calls:
            lines = []
            for expression in calls:
                try:
                    lines.append(f"<calc>{expression.strip()}</calc> = "
                                 f"{format_number(evaluate(expression, self.max_expression_chars, self.max_exponent))}")
                except CalcError as e:
                    info["invalid_action"] = True
                    lines.append(f"<calc>{expression.strip()}</calc> refused: {e}")
            info["calls"] = len(calls)
            observation = "\n".join(lines)
        else:
            info["invalid_action"] = True
            observation = (f"Your reply has neither a calculator call nor a final answer. Write "
                           f"<calc>expression</calc> to compute, or {ANSWER_MARK} <answer> to answer.")
        truncated = not terminated and self._steps >= self.max_steps
        if truncated:
            info["success"] = False
            observation += f"\nThe step limit ({self.max_steps}) is reached."
        self._done = terminated or truncated
        return observation, reward, terminated, truncated, info

    def close(self) -> None:
        """Nothing to release: the environment holds no resources."""


def _text_arg(name: str, value: Any) -> str | None:
    if value is not None and not (isinstance(value, (str, int, float)) and not isinstance(value, bool)):
        raise bad_arg(name, value, "must be text (a number is taken as its text)")
    return None if value is None else str(value)

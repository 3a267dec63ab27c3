"""`countdown_reward`: the Countdown numbers game (TinyZero's task), scored as Trinity-RFT scores it.

The task gives numbers and a target; the response must end with an equation in
`<answer>...</answer>` that uses each given number exactly once and equals the target. The
reference answer (`format.response_key`) is JSON: `{"target": 24, "numbers": [3, 4, 2]}`.

Scores (Trinity-RFT's `CountDownRewardFn`, after TinyZero's `countdown.py`), as the component `score`:
  - 0   no `<answer>...</answer>` on the response's last line;
  - 0.1 an answer that uses other numbers, is not arithmetic, or misses the target;
  - 1   an equation that uses every number once and equals the target (within 1e-5).

Where it differs: the equation is evaluated by walking its syntax tree (numbers, `+ - * / // **`,
signs and parentheses), not by Python's `eval`; an exponent above `MAX_EXPONENT` counts as
not arithmetic instead of running for ever.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections.abc import Callable
from typing import Any

FORMAT_SCORE = 0.1
"""Score of a well-formed answer that is not a solution."""
MAX_EXPONENT = 64
"""Largest `**` exponent evaluated; Trinity's `eval` has no bound (`9**9**9` would never finish)."""

_ANSWER = re.compile(r"<answer>(.*?)</answer>")
_ALLOWED = re.compile(r"^[\d+\-*/().\s]+$")
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def countdown_equation(response: str) -> str | None:
    """The equation of the last `<answer>...</answer>` on the response's last line (stripped), or None."""
    found = _ANSWER.findall(response.split("\n")[-1])
    return found[-1].strip() if found else None


def _value(node: ast.AST) -> float | int:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"exponent {right} is above {MAX_EXPONENT}")
        return _BINARY[type(node.op)](left, right)
    raise ValueError(f"not arithmetic: {ast.dump(node)}")


def evaluate_equation(equation: str) -> float | None:
    """The value of an arithmetic expression of numbers and `+ - * / ( )`; None if it is not one
    (other characters, a syntax error, a division by zero)."""
    if not _ALLOWED.match(equation):
        return None
    try:
        value = _value(ast.parse(equation.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ArithmeticError, TypeError):
        return None
    return float(value) if isinstance(value, (int, float)) else None


def uses_numbers_once(equation: str, numbers: list[int]) -> bool:
    """True if the integers written in the equation are exactly `numbers`, each as often as given."""
    return sorted(int(n) for n in re.findall(r"\d+", equation)) == sorted(int(n) for n in numbers)


def countdown_reward(response: str, truth: str | None) -> dict[str, float]:
    """{"score": 1} for a right equation, 0.1 for a wrong one, 0 for none (module doc)."""
    if truth is None:
        raise ValueError("the task has no ground truth: set format.response_key to the column holding "
                         '{"target": ..., "numbers": [...]}')
    try:
        game = json.loads(truth)
        target, numbers = game["target"], list(game["numbers"])
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f'countdown truth {truth!r} is not JSON {{"target": ..., "numbers": [...]}}: {e}') from None
    equation = countdown_equation(response)
    if equation is None:
        return {"score": 0.0}
    if not uses_numbers_once(equation, numbers):
        return {"score": FORMAT_SCORE}
    value = evaluate_equation(equation)
    if value is None or abs(value - float(target)) >= 1e-5:
        return {"score": FORMAT_SCORE}
    return {"score": 1.0}

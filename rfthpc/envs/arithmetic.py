"""A safe arithmetic evaluator: the calculator environment's tool.

An expression is parsed by Python's `ast` and walked here, never `eval`ed: only number literals, the
binary operators + - * / // % **, unary minus and plus, and parentheses are accepted; a name, call,
attribute, string, comparison or anything else is refused before any arithmetic runs. Limits keep one
call cheap: the expression's length, the exponent of `**`, and the size of every intermediate result
(so `9**9**9` or a chain of products is refused instead of computing huge integers).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

MAX_DIGITS = 100
"""Results (and intermediate results) must stay below 10**MAX_DIGITS in magnitude."""
_LIMIT = 10**MAX_DIGITS
_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[float], float]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
ALLOWED = "numbers, + - * / // % ** and parentheses"


class CalcError(ValueError):
    """The expression is refused or has no finite real value; the message says why, for the policy."""


def _checked(value: complex) -> float:
    if isinstance(value, complex):
        raise CalcError("the result is not a real number")
    if (isinstance(value, float) and not math.isfinite(value)) or abs(value) >= _LIMIT:
        raise CalcError(f"a result exceeds 10**{MAX_DIGITS}")
    return value


def _power(base: float, exponent: float, max_exponent: int) -> float:
    if abs(exponent) > max_exponent:
        raise CalcError(f"the exponent {exponent} exceeds {max_exponent} in magnitude")
    # Refused before computing: an int power's cost grows with its size.
    if abs(base) > 1 and exponent > 0 and exponent * math.log10(abs(base)) >= MAX_DIGITS:
        raise CalcError(f"a result exceeds 10**{MAX_DIGITS}")
    return base**exponent


def _value(node: ast.AST, max_exponent: int) -> float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _checked(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand, max_exponent))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left, max_exponent), _value(node.right, max_exponent)
        try:
            if isinstance(node.op, ast.Pow):
                return _checked(_power(left, right, max_exponent))
            return _checked(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise CalcError("division by zero") from None
        except OverflowError:
            raise CalcError(f"a result exceeds 10**{MAX_DIGITS}") from None
    if isinstance(node, ast.Tuple):
        raise CalcError("a comma is no operator: write numbers without thousands separators (1000, not 1,000)")
    raise CalcError(f"only {ALLOWED} are allowed, not {ast.unparse(node)!r}")


def evaluate(expression: str, max_chars: int, max_exponent: int) -> float:
    """The value of the arithmetic `expression`; CalcError if it is refused (see the module docstring)."""
    text = expression.strip()
    if not text:
        raise CalcError("the expression is empty")
    if len(text) > max_chars:
        raise CalcError(f"the expression is longer than {max_chars} characters")
    try:
        return _value(ast.parse(text, mode="eval").body, max_exponent)
    except CalcError:
        raise
    except (SyntaxError, ValueError):  # ValueError: e.g. a null byte in the text
        raise CalcError(f"not an arithmetic expression (use {ALLOWED})") from None
    except RecursionError:  # from the parser or the walk, on thousands of nested operators
        raise CalcError("the expression is nested too deeply") from None


def format_number(value: float) -> str:
    """A result as the calculator shows it: whole numbers without a decimal point, else 12 significant digits."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value) if isinstance(value, int) else format(value, ".12g")

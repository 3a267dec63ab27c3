"""The calculator tool environment and its safe arithmetic evaluator."""

from __future__ import annotations

import ast
import builtins

import pytest

from rfthpc.envs.arithmetic import CalcError, evaluate, format_number
from rfthpc.envs.calculator import INSTRUCTIONS, Calculator
from rfthpc.errors import ConfigError
from rfthpc.rewards.math_reward import extract_answer, marked_answer

QUESTION = "Tom has 3 bags of 14 apples and eats 5. How many apples are left?"
SOLUTION = "3*14 = 42 apples, 42-5 = 37.\n#### 37"


def calc(expression: str, max_chars: int = 200, max_exponent: int = 100) -> str:
    return format_number(evaluate(expression, max_chars, max_exponent))


@pytest.mark.parametrize(("expression", "value"), [
    ("12*(3+4)", "84"), ("7/2", "3.5"), ("7//2", "3"), ("-7 % 3", "2"), ("2**10", "1024"), ("-3**2", "-9"),
    ("+5 - -2", "7"), ("2**0.5", "1.41421356237"), ("1/3", "0.333333333333"), ("0.1 + 0.2", "0.3"),
    ("10**99", "1" + "0" * 99), ("2**-1", "0.5"), ("1_000 * 3", "3000"), ("1.5e3", "1500"),
])
def test_arithmetic_values(expression: str, value: str) -> None:
    assert calc(expression) == value


@pytest.mark.parametrize(("expression", "says"), [
    ("__import__('os').system('touch /tmp/x')", "only numbers, .* are allowed, not"),
    ("abs(-3)", "only numbers, .* are allowed, not 'abs\\(-3\\)'"),
    ("x + 1", "not 'x'"),
    ("(1).real", "not '1 .real'"),
    ("'a' * 3", "not \"'a'\""),
    ("True + 1", "not 'True'"),
    ("1 < 2", "not '1 < 2'"),
    ("[1, 2]", "not '\\[1, 2\\]'"),
    ("lambda: 1", "not 'lambda: 1'"),
    ("2 if 1 else 3", "not '2 if 1 else 3'"),
    ("1j", "not '1j'"),
    ("1,000", "a comma is no operator: write numbers without thousands separators"),
    ("x = 1", "not an arithmetic expression"),
    ("1 +", "not an arithmetic expression"),
    ("", "the expression is empty"),
    ("1/0", "division by zero"), ("5 % 0", "division by zero"), ("0**-1", "division by zero"),
    ("2**101", "the exponent 101 exceeds 100 in magnitude"),
    ("9**9**9", "the exponent 387420489 exceeds 100"),
    ("10**100", "a result exceeds 10\\*\\*100"),
    ("(10**50)*(10**50)", "a result exceeds 10\\*\\*100"),
    ("1e400", "a result exceeds 10\\*\\*100"),
    ("10.0**99 * 10", "a result exceeds 10\\*\\*100"),
    ("(-8)**(1/3)", "the result is not a real number"),
    ("1+" * 100 + "1", "the expression is longer than 200 characters"),
])
def test_everything_but_arithmetic_is_refused(expression: str, says: str) -> None:
    with pytest.raises(CalcError, match=says):
        evaluate(expression, 200, 100)


def test_deep_nesting_is_refused_not_a_crash() -> None:
    with pytest.raises(CalcError, match="not an arithmetic expression|nested too deeply"):
        evaluate("(" * 499 + "1" + ")" * 499, 1000, 100)
    with pytest.raises(CalcError, match="nested too deeply"):
        evaluate("-" * 999 + "1", 1000, 100)


def test_nothing_is_evaluated_by_python(monkeypatch: pytest.MonkeyPatch) -> None:
    real_compile = builtins.compile

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("eval or exec used")

    def parse_only(source: str, filename: str, mode: str, flags: int = 0, *args: object, **kwargs: object) -> object:
        # ast.parse compiles to a syntax tree only; compiling to code would be a way to run it.
        assert flags & ast.PyCF_ONLY_AST, "compiled to code"
        return real_compile(source, filename, mode, flags, *args, **kwargs)

    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)
    monkeypatch.setattr(builtins, "compile", parse_only)
    assert calc("2*(3+4)**2") == "98"


def test_a_marked_answer_is_the_final_one_only_when_marked() -> None:
    assert marked_answer("so #### 37 apples") == "37"
    assert marked_answer("it is \\boxed{37}") == "37"
    assert marked_answer("<calc>3*14</calc> gives 42") is None
    assert extract_answer("<calc>3*14</calc> gives 42") == "42"  # the reward's fallback to the last number


def start(**args: object) -> Calculator:
    env = Calculator(**{"question": QUESTION, "answer": SOLUTION, **args})
    observation, info = env.reset(seed=0)
    assert observation == f"{QUESTION}\n\n{INSTRUCTIONS}"
    assert info == {}
    return env


def test_the_first_observation_poses_the_question_and_the_tool() -> None:
    assert INSTRUCTIONS == (
        "You may use a calculator: write <calc>expression</calc> using numbers, + - * / // % ** and parentheses, "
        "e.g. <calc>12*(3+4)</calc>, and the result comes back. When you know the answer, write it on its own line "
        "as #### <answer>."
    )
    start()


def test_calls_are_answered_then_a_right_answer_ends_with_reward_one() -> None:
    env = start()
    observation, reward, terminated, truncated, info = env.step(
        "Bags first: <calc>3 * 14</calc>, then eaten: <calc>42-5")
    assert observation == "<calc>3 * 14</calc> = 42\n<calc>42-5</calc> = 37"
    assert (reward, terminated, truncated, info) == (0.0, False, False, {"calls": 2})
    observation, reward, terminated, truncated, info = env.step("37 apples are left.\n#### 37")
    assert observation == "Your final answer: 37."
    assert (reward, terminated, truncated, info) == (1.0, True, False, {"success": True, "answer": "37"})
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("#### 37")


def test_a_wrong_answer_ends_with_reward_zero_even_beside_a_call() -> None:
    env = start()
    observation, reward, terminated, _, info = env.step("<calc>3*14</calc> so \\boxed{42}")
    assert observation == "Your final answer: 42."
    assert (reward, terminated, info) == (0.0, True, {"success": False, "answer": "42"})


def test_a_refused_call_or_a_reply_without_either_is_an_invalid_action() -> None:
    env = start()
    observation, reward, terminated, _, info = env.step("<calc>3*14</calc> <calc>open('x')</calc>")
    assert observation == ("<calc>3*14</calc> = 42\n<calc>open('x')</calc> refused: only numbers, + - * / // % ** "
                           "and parentheses are allowed, not \"open('x')\"")
    assert (reward, terminated, info) == (0.0, False, {"invalid_action": True, "calls": 2})
    observation, reward, terminated, _, info = env.step("I think the answer is 37")
    assert observation.startswith("Your reply has neither a calculator call nor a final answer.")
    assert (reward, terminated, info) == (0.0, False, {"invalid_action": True})


def test_the_step_limit_truncates() -> None:
    env = start(max_steps=2, max_expression_chars=5)
    env.step("<calc>1+1</calc>")
    observation, reward, terminated, truncated, info = env.step("<calc>123456+1</calc>")
    assert observation == ("<calc>123456+1</calc> refused: the expression is longer than 5 characters\n"
                           "The step limit (2) is reached.")
    assert (reward, terminated, truncated, info) == (0.0, False, True, {"invalid_action": True, "calls": 1,
                                                                        "success": False})


def test_reset_options_give_the_episode_its_question_and_answer() -> None:
    env = Calculator()
    observation, _ = env.reset(options={"question": "What is 6 times 7?", "answer": 42})
    assert observation.startswith("What is 6 times 7?\n\n")
    assert env.step("#### 42")[1] == 1.0
    with pytest.raises(ConfigError, match=r"^workflow_args\.env_args\.answer: missing; the calculator environment "
                                          r"needs the task's answer"):
        Calculator(question="What is 6 times 7?").reset()
    with pytest.raises(RuntimeError, match="before reset"):
        Calculator(question="q", answer="1").step("#### 1")


@pytest.mark.parametrize(("args", "says"), [
    ({"answer": ["42"]}, r"workflow_args\.env_args\.answer: \['42'\] must be text"),
    ({"max_steps": 0}, r"workflow_args\.env_args\.max_steps: 0 must be an integer >= 1"),
    ({"max_expression_chars": 5000}, r"workflow_args\.env_args\.max_expression_chars: 5000 must be an integer"),
    ({"max_exponent": "10"}, r"workflow_args\.env_args\.max_exponent: '10' must be an integer"),
])
def test_bad_arguments_are_config_errors_naming_the_key(args: dict, says: str) -> None:
    with pytest.raises(ConfigError, match="^" + says):
        Calculator(**args)

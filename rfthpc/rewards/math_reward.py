"""Answer extraction and equivalence for math problems (GSM8K, MATH-style `\\boxed{}`).

The final answer of a response is the number that opens the line after its last `####` (GSM8K's
format: `#### 42 apples` answers 42, as GSM8K's and veRL's strict extraction read it; a line that opens
with no number, e.g. LaTeX, is taken whole), else the content of its last `\\boxed{...}`, else its last
number. Equivalence is decided by `math-verify` (symbolic: `42`,
`42.0`, `$42$`, `\\frac{84}{2}` are equal), with a numeric comparison as a fallback for what
it cannot parse.

`math_boxed_reward` and `math_dapo_reward` are Trinity-RFT's rewards of those names: only an answer in
`\\boxed{}` counts, and a reference answer that holds a `\\boxed{}` (a MATH solution) is read as
that box's content. Trinity decides equivalence by normalised strings (`math_boxed_reward`, the
Hendrycks MATH normalisation) or by normalisation then sympy (`math_dapo_reward`); here both use
`answers_equal`, symbolic: it also accepts forms a string normalisation cannot match
(`\\frac{84}{2}` for `42`).
"""

from __future__ import annotations

import math
import re
import threading

ANSWER_MARK = "####"
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
# The number opening an answer line: `42`, `-$5`, `$1,234.50`, `**7**`, `3/4`, `−18` (Unicode minus),
# ended by a space or punctuation; `2\sqrt{3}` or `3x+2` opens with no number and is taken whole.
_LEADING_NUMBER = re.compile(
    r"[\s*$(]*([-−]?)\s*\$?\s*(\d[\d,]*(?:\.\d+)?(?:\s*/\s*\d+)?|\.\d+)(?=$|[\s.,;:!?)*%$])"
)
# A plain decimal number (GSM8K's answers and most responses to them): compared as a number, without
# math-verify's parser, which costs about 0.5 ms a pair (a batch of 128 responses: 65 ms).
_PLAIN_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
# math-verify enforces its timeouts with SIGALRM, which only the main thread may use.
_TIMEOUT_SECONDS = 5


def _last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        return None
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1 : j].strip()
    return None


def marked_answer(response: str) -> str | None:
    """The answer a response marks as final: the number opening the line after the last `####` (else
    that line), else the last `\\boxed{}`; None if it marks none (a tool environment then goes on)."""
    if ANSWER_MARK in response:
        line = response.rsplit(ANSWER_MARK, 1)[1].strip().split("\n", 1)[0].strip()
        leading = _LEADING_NUMBER.match(line)
        if leading:
            return ("-" if leading.group(1) else "") + leading.group(2).replace(" ", "")
        return line or None
    return _last_boxed(response) or None


def extract_answer(response: str) -> str | None:
    """The final answer of a response: `marked_answer`, else (no `####` in it) its last number."""
    marked = marked_answer(response)
    if marked is not None or ANSWER_MARK in response:
        return marked
    numbers = _NUMBER.findall(response)
    return numbers[-1] if numbers else None


def gold_answer(truth: str) -> str:
    """The reference answer of a GSM8K solution (`… #### 42` → `42`), or the truth itself."""
    if ANSWER_MARK in truth:
        return truth.rsplit(ANSWER_MARK, 1)[1].strip()
    return truth.strip()


def _as_number(text: str) -> float | None:
    cleaned = text.strip().strip("$").rstrip(".").replace(",", "").strip()
    try:
        return float(cleaned)
    except ValueError:
        numbers = _NUMBER.findall(text)
        return float(numbers[-1].replace(",", "")) if len(numbers) == 1 else None


def answers_equal(predicted: str, gold: str) -> bool:
    """True if `predicted` and `gold` denote the same value (two plain decimal numbers: numerically,
    1e-6 rel; else math-verify, then numeric 1e-6 rel)."""
    if _PLAIN_NUMBER.fullmatch(predicted.strip()) and _PLAIN_NUMBER.fullmatch(gold.strip()):
        return math.isclose(float(predicted), float(gold), rel_tol=1e-6, abs_tol=1e-9)
    from math_verify import parse, verify

    timeout = _TIMEOUT_SECONDS if threading.current_thread() is threading.main_thread() else None
    gold_parsed = parse(gold, parsing_timeout=timeout)
    pred_parsed = parse(predicted, parsing_timeout=timeout)
    if gold_parsed and pred_parsed:
        return bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout))
    a, b = _as_number(predicted), _as_number(gold)
    if a is not None and b is not None:
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    return predicted.strip() == gold.strip()


def accuracy_reward(response: str, truth: str | None, *, strict: bool = False) -> dict[str, float]:
    """{"accuracy": 1} if the response's final answer equals the truth's, else 0.

    `strict`: only an answer after `####` counts (GSM8K's format, as veRL's default GSM8K score reads it),
    not a `\\boxed{}` or a last number."""
    if truth is None:
        raise ValueError("the task has no ground truth: set format.response_key for this taskset")
    predicted = (marked_answer(response) if ANSWER_MARK in response else None) if strict else extract_answer(response)
    ok = predicted is not None and answers_equal(predicted, gold_answer(truth))
    return {"accuracy": 1.0 if ok else 0.0}


def reference_answer(truth: str) -> str:
    """The reference answer of a solution: its last `\\boxed{}` (a MATH solution), else `gold_answer`."""
    return _last_boxed(truth) or gold_answer(truth)


def has_think_pattern(response: str) -> bool:
    """True if the response holds exactly one `<think>` and one `</think>`, in that order (Trinity's check)."""
    return (response.count("<think>") == 1 and response.count("</think>") == 1
            and response.index("<think>") < response.index("</think>"))


def boxed_accuracy_reward(
    response: str, truth: str | None, *, with_think: bool = False, format_score_coef: float = 0.1
) -> dict[str, float]:
    """Trinity-RFT's `math_boxed_reward`: {"accuracy": 1} if the last `\\boxed{}` of the response equals
    the reference answer (`reference_answer`), else 0.

    `with_think`: also {"format_score": -format_score_coef} unless the response holds one
    `<think>...</think>` (else 0). Trinity reads a coefficient of 0 as 0.1; here 0 means no penalty.
    """
    if truth is None:
        raise ValueError("the task has no ground truth: set format.response_key for this taskset")
    predicted = _last_boxed(response)
    ok = bool(predicted) and answers_equal(predicted, reference_answer(truth))
    scores = {"accuracy": 1.0 if ok else 0.0}
    if with_think:
        scores["format_score"] = 0.0 if has_think_pattern(response) else -format_score_coef
    return scores


def math_dapo_reward(response: str, truth: str | None) -> dict[str, float]:
    """Trinity-RFT's `math_dapo_reward`, DAPO's rule-based outcome reward: {"accuracy": 1} if the answer
    is right, else -1 (arXiv:2503.14476, section 2.4).

    The answer is the last `\\boxed{}` after the last `</think>`; with no box there, that text counts
    only if it is the bare answer (no spaces), as Trinity's normalised comparison of the whole text
    in effect requires. DAPO's overlong penalty, which Trinity computes in this function when its
    `enable_overlong_penalty` is set, is rfthpc's `algorithm.overlong_buffer`, added by the explorer.
    """
    if truth is None:
        raise ValueError("the task has no ground truth: set format.response_key for this taskset")
    tail = response.rsplit("</think>", 1)[-1]
    predicted = _last_boxed(tail)
    if predicted is None:
        bare = tail.strip()
        predicted = bare if bare and not any(c.isspace() for c in bare) else None
    ok = bool(predicted) and answers_equal(predicted, reference_answer(truth))
    return {"accuracy": 1.0 if ok else -1.0}

"""The GSM8K-format generator: every answer is right, splits are disjoint, runs are reproducible."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rfthpc.demos.synth_gsm8k import Difficulty, final_answer, generate_splits, main, sft_records
from rfthpc.errors import UserError

# Read the story back independently of the generator: each sentence is one operation.
_SENTENCE_OPS = [
    (re.compile(r"(?:buys|finds) (\d+) more|gives \w+ (\d+) more"), lambda a, n: a + n),
    (re.compile(r"(?:gives|loses|sells) (\d+) \w+(?: to a friend)?\.$"), lambda a, n: a - n),
    (re.compile(r"(\d+) times as"), lambda a, n: a * n),
    (re.compile(r"into (\d+) (?:boxes|equal groups)"), lambda a, n: a // n),
]


def _solve(question: str) -> int:
    sentences = re.split(r"(?<=[.?])\s", question)
    value = int(re.match(r"\w+ has (\d+) ", sentences[0]).group(1))
    for sentence in sentences[1:-1]:
        for pattern, op in _SENTENCE_OPS:
            m = pattern.search(sentence)
            if m:
                n = int(next(g for g in m.groups() if g))
                if op is _SENTENCE_OPS[3][1]:
                    assert value % n == 0, f"inexact division in {question!r}"
                value = op(value, n)
                break
        else:
            raise AssertionError(f"cannot read {sentence!r}")
        assert value >= 0
    assert sentences[-1].startswith("How many")
    return value


def _check_steps(answer: str) -> None:
    *steps, last = answer.split("\n")
    assert last.startswith("#### ")
    ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}
    for step in steps:
        a, op, b, eq, c = step.split()
        assert eq == "=" and ops[op](int(a), int(b)) == int(c)


@pytest.mark.parametrize("level", [1, 2, 3])
def test_every_answer_is_correct(level: int) -> None:
    difficulty = Difficulty.level(level)
    splits = generate_splits(300, 50, difficulty, seed=level)
    for record in splits["train"] + splits["test"]:
        assert int(final_answer(record["answer"])) == _solve(record["question"])
        _check_steps(record["answer"])
        assert len(record["answer"].split("\n")) == difficulty.num_ops + 1


def test_splits_are_disjoint_seeded_and_sized() -> None:
    a = generate_splits(500, 100, seed=7)
    assert len(a["train"]) == 500 and len(a["test"]) == 100
    questions = [r["question"] for r in a["train"] + a["test"]]
    assert len(set(questions)) == len(questions)
    assert generate_splits(500, 100, seed=7) == a
    assert generate_splits(500, 100, seed=8) != a


def test_exhausted_problem_space_is_a_user_error() -> None:
    with pytest.raises(UserError, match="distinct problems"):
        generate_splits(10_000, 10, Difficulty(num_ops=1, max_number=2, operators="+"))


@pytest.mark.parametrize(
    "kwargs", [{"num_ops": 0}, {"max_number": 1}, {"operators": "+^"}, {"operators": ""}]
)
def test_bad_difficulty_is_a_user_error(kwargs: dict) -> None:
    with pytest.raises(UserError):
        Difficulty(**kwargs)
    with pytest.raises(UserError, match="choose one of"):
        Difficulty.level(9)


def test_final_answer_reads_gsm8k_answers() -> None:
    assert final_answer("Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 1,072") == "1072"
    with pytest.raises(ValueError):
        final_answer("no mark")


def test_sft_records_in_both_styles() -> None:
    record = {"question": "Q?", "answer": "1 + 1 = 2\n#### 2"}
    assert sft_records([record], "prompt_response") == [{"prompt": "Q?", "response": "1 + 1 = 2\n#### 2"}]
    (msgs,) = sft_records([record], system_prompt="S")
    assert [m["role"] for m in msgs["messages"]] == ["system", "user", "assistant"]


def test_cli_writes_splits_and_sft(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out", str(tmp_path), "--train", "20", "--test", "5", "--sft", "--difficulty", "2"]) == 0
    assert "train=20 test=5" in capsys.readouterr().out
    train = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    sft = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert len(train) == 20 and len(sft) == 20
    assert sft[0]["messages"][-1] == {"role": "assistant", "content": train[0]["answer"]}
    assert sft[0]["messages"][0]["role"] == "system"

"""`rfthpc make-demo`'s data: balanced answers, disjoint splits, reproducible, made once."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from rfthpc.demos.gsm8k import balanced_splits
from rfthpc.demos.synth_gsm8k import final_answer
from rfthpc.errors import UserError


def test_every_answer_is_equally_frequent_in_both_splits() -> None:
    splits = balanced_splits(90, 27, seed=5)
    for name, n in (("train", 90), ("test", 27)):
        counts = Counter(final_answer(r["answer"]) for r in splits[name])
        assert sorted(counts, key=int) == [str(s) for s in range(2, 11)]
        assert set(counts.values()) == {n // 9}, (name, counts)
    assert not {r["question"] for r in splits["train"]} & {r["question"] for r in splits["test"]}


def test_splits_are_reproducible_and_depend_on_the_seed() -> None:
    assert balanced_splits(20, 9, seed=1) == balanced_splits(20, 9, seed=1)
    assert balanced_splits(20, 9, seed=1) != balanced_splits(20, 9, seed=2)


def test_demo_dir_holds_what_the_config_reads(demo_dir: Path) -> None:
    for path in ("model/config.json", "model/tokenizer.json", "gsm8k/train.jsonl", "gsm8k/test.jsonl", "sft.jsonl"):
        assert (demo_dir / path).is_file(), path
    sft = [json.loads(line) for line in (demo_dir / "sft.jsonl").read_text().splitlines()]
    train = [json.loads(line) for line in (demo_dir / "gsm8k" / "train.jsonl").read_text().splitlines()]
    assert sft == train[:len(sft)] and set(sft[0]) == {"question", "answer"}


def test_make_demo_refuses_more_demonstrations_than_tasks(tmp_path: Path) -> None:
    from rfthpc.demos.gsm8k import MakeDemoArgs, make_demo

    with pytest.raises(UserError, match="--sft <= --train"):
        make_demo(MakeDemoArgs(out=tmp_path, train=10, sft=20))

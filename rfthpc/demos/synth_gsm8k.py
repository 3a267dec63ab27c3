"""Synthetic GSM8K-format arithmetic word problems, and writers for every shape a user's data has.

Each record is `{"question": "...", "answer": "<one line per step> #### 42"}`, the shape of
`openai/gsm8k`, so the real taskset loaders and the math reward are exercised on the data users
bring. Difficulty is a number of operations on small numbers; splits are seeded and disjoint.

Usage:
    rfthpc make-data --out DIR [--format jsonl|json|parquet|hf-disk|hub] [--train 1000]
                     [--test 100] [--difficulty 1] [--seed 0] [--sft]
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import tyro

from rfthpc.errors import UserError

ANSWER_MARK = "####"
HUB_SHARD_SUFFIX = "-00000-of-00001.parquet"

_NAMES = (
    "Tom", "Anna", "Ben", "Lily", "Sam", "Mia", "Leo", "Emma", "Max", "Zoe",
    "Jack", "Nora", "Ravi", "Sara", "Omar", "Ella", "Ivan", "Lucy", "Kai", "Rosa",
)
_ITEMS = (
    "apples", "marbles", "books", "stickers", "coins", "pencils", "cookies", "shells",
    "cards", "stamps", "eggs", "balloons", "candles", "buttons", "flowers",
)
_ADD = ("{name} buys {n} more {item}.", "{name} finds {n} more {item}.",
        "A friend gives {name} {n} more {item}.")
_SUB = ("{name} gives {n} {item} to a friend.", "{name} loses {n} {item}.",
        "{name} sells {n} {item}.")
_MUL = ("Then {name} gets {n} times as many {item} as before.",
        "The number of {item} {name} has becomes {n} times as large.")
_DIV = ("{name} shares the {item} equally into {n} boxes and keeps one box.",
        "{name} splits the {item} into {n} equal groups and keeps one group.")
_QUESTION = ("How many {item} does {name} have now?", "How many {item} does {name} have in the end?")


@dataclass(frozen=True)
class Difficulty:
    """How hard the generated problems are."""

    num_ops: int = 1
    """Operations applied after the starting amount."""
    max_number: int = 20
    """Largest starting amount and largest added or removed amount."""
    operators: str = "+-"
    """Operators to draw from: any of `+-*/` (division is always exact)."""

    def __post_init__(self) -> None:
        if self.num_ops < 1:
            raise UserError(f"difficulty num_ops={self.num_ops}: use at least 1 operation")
        if self.max_number < 2:
            raise UserError(f"difficulty max_number={self.max_number}: use 2 or more")
        if not self.operators or set(self.operators) - set("+-*/"):
            raise UserError(f"difficulty operators={self.operators!r}: use a non-empty subset of '+-*/'")

    @classmethod
    def level(cls, level: int) -> Difficulty:
        """Preset knob: 1 = one +/- on numbers ≤ 20, 2 = two of +-* on ≤ 50, 3 = three of +-*/ on ≤ 100."""
        presets = {1: cls(1, 20, "+-"), 2: cls(2, 50, "+-*"), 3: cls(3, 100, "+-*/")}
        if level not in presets:
            raise UserError(f"difficulty {level}: choose one of {sorted(presets)}")
        return presets[level]


def _step(rng: random.Random, value: int, difficulty: Difficulty) -> tuple[str, int, str]:
    """Draw one operation that keeps the amount a non-negative integer: (symbol, operand, template)."""
    choices = list(difficulty.operators)
    if value == 0:
        choices = [c for c in choices if c in "+*"] or ["+"]
    while True:
        op = rng.choice(choices)
        if op == "+":
            return op, rng.randint(1, difficulty.max_number), rng.choice(_ADD)
        if op == "-":
            return op, rng.randint(1, value), rng.choice(_SUB)
        if op == "*":
            return op, rng.randint(2, max(2, min(9, difficulty.max_number))), rng.choice(_MUL)
        divisors = [d for d in range(2, min(value, 9) + 1) if value % d == 0]
        if divisors:
            return op, rng.choice(divisors), rng.choice(_DIV)
        choices = [c for c in choices if c != "/"] or ["+"]


def _apply(op: str, a: int, n: int) -> int:
    return {"+": a + n, "-": a - n, "*": a * n, "/": a // n}[op]


def generate_problem(rng: random.Random, difficulty: Difficulty) -> dict[str, str]:
    """One GSM8K-format record: a short story, then `a op n = b` per step and `#### b`."""
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    value = rng.randint(1, difficulty.max_number)
    sentences = [f"{name} has {value} {item}."]
    steps = []
    for _ in range(difficulty.num_ops):
        op, n, template = _step(rng, value, difficulty)
        new = _apply(op, value, n)
        sentences.append(template.format(name=name, n=n, item=item))
        steps.append(f"{value} {op} {n} = {new}")
        value = new
    sentences.append(rng.choice(_QUESTION).format(name=name, item=item))
    return {"question": " ".join(sentences), "answer": "\n".join(steps) + f"\n{ANSWER_MARK} {value}"}


def generate_splits(
    n_train: int, n_test: int, difficulty: Difficulty = Difficulty(), seed: int = 0
) -> dict[str, list[dict[str, str]]]:
    """Seeded `{"train": [...], "test": [...]}` with no question in both splits (nor twice in one)."""
    if n_train < 0 or n_test < 0:
        raise UserError(f"split sizes train={n_train} test={n_test}: use counts ≥ 0")
    rng = random.Random(seed)
    wanted = n_train + n_test
    seen: set[str] = set()
    records: list[dict[str, str]] = []
    # A small problem space runs out of new questions: give up after many repeats in a row.
    misses = 0
    while len(records) < wanted:
        record = generate_problem(rng, difficulty)
        if record["question"] in seen:
            misses += 1
            if misses > 1000:
                raise UserError(
                    f"only {len(records)} distinct problems found for {difficulty}; "
                    "ask for fewer records or raise max_number / num_ops"
                )
            continue
        misses = 0
        seen.add(record["question"])
        records.append(record)
    return {"train": records[:n_train], "test": records[n_train:]}


def final_answer(answer: str) -> str:
    """The text after the last `####` of a GSM8K answer, without thousands separators."""
    if ANSWER_MARK not in answer:
        raise ValueError(f"no {ANSWER_MARK!r} in answer {answer!r}")
    return answer.rsplit(ANSWER_MARK, 1)[1].strip().replace(",", "")


def write_jsonl(path: Path, records: Iterable[dict]) -> Path:
    """One JSON object per line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return path


def write_json(path: Path, records: Iterable[dict]) -> Path:
    """One JSON array of objects."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(list(records), indent=1) + "\n")
    return path


def write_parquet(path: Path, records: Sequence[dict]) -> Path:
    """One parquet file (the format of datasets on the Hugging Face Hub)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(list(records)), path)
    return path


def write_hf_disk(out_dir: Path, splits: dict[str, Sequence[dict]]) -> Path:
    """A `datasets.DatasetDict.save_to_disk` directory (what `load_from_disk` reads)."""
    from datasets import Dataset, DatasetDict

    DatasetDict({k: Dataset.from_list(list(v)) for k, v in splits.items()}).save_to_disk(str(out_dir))
    return Path(out_dir)


def write_hub_layout(out_dir: Path, splits: dict[str, Sequence[dict]], config: str = "main") -> Path:
    """The layout of a downloaded `openai/gsm8k` repo: `<config>/<split>-00000-of-00001.parquet`.

    The README's YAML header lists every config directory present, as the real repo's does, so
    `datasets.load_dataset(out_dir, config)` resolves subsets the same way.
    """
    out_dir = Path(out_dir)
    for split, records in splits.items():
        write_parquet(out_dir / config / f"{split}{HUB_SHARD_SUFFIX}", records)
    lines = ["---", "configs:"]
    for cfg_dir in sorted(p for p in out_dir.iterdir() if p.is_dir()):
        lines.append(f"- config_name: {cfg_dir.name}")
        lines.append("  data_files:")
        for shard in sorted(cfg_dir.glob(f"*{HUB_SHARD_SUFFIX}")):
            split = shard.name[: -len(HUB_SHARD_SUFFIX)]
            lines += [f"  - split: {split}", f"    path: {cfg_dir.name}/{split}-*"]
    lines += ["---", "", "Synthetic GSM8K-format arithmetic problems made by `rfthpc make-data`.", ""]
    (out_dir / "README.md").write_text("\n".join(lines))
    return out_dir


def sft_records(
    records: Iterable[dict[str, str]],
    style: Literal["messages", "prompt_response"] = "messages",
    system_prompt: str | None = None,
) -> list[dict]:
    """SFT examples from GSM8K records: chat `messages`, or flat `prompt`/`response` columns."""
    out: list[dict] = []
    for r in records:
        if style == "prompt_response":
            out.append({"prompt": r["question"], "response": r["answer"]})
            continue
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        messages += [{"role": "user", "content": r["question"]}, {"role": "assistant", "content": r["answer"]}]
        out.append({"messages": messages})
    return out


Format = Literal["jsonl", "json", "parquet", "hf-disk", "hub"]


def write_splits(out: Path, splits: dict[str, Sequence[dict]], fmt: Format) -> Path:
    """Write all splits in one format under `out`; return the path a taskset config points at."""
    out = Path(out)
    if fmt == "hf-disk":
        return write_hf_disk(out, splits)
    if fmt == "hub":
        return write_hub_layout(out, splits)
    writer = {"jsonl": write_jsonl, "json": write_json, "parquet": write_parquet}[fmt]
    for split, records in splits.items():
        writer(out / f"{split}.{fmt}", records)
    return out


@dataclass
class MakeDataArgs:
    """Write synthetic GSM8K-format train/test splits (and optionally an SFT set)."""

    out: Path
    """Output directory."""
    format: Format = "jsonl"
    """jsonl/json/parquet: `<split>.<ext>` files; hf-disk: `save_to_disk`; hub: `main/<split>-….parquet`."""
    train: int = 1000
    """Number of training problems."""
    test: int = 100
    """Number of test problems (disjoint from train)."""
    difficulty: int = 1
    """1: one +/- on numbers ≤ 20; 2: two of +-* on ≤ 50; 3: three of +-*/ on ≤ 100."""
    seed: int = 0
    """Random seed; the same seed gives the same files."""
    sft: bool = False
    """Also write `sft.jsonl` from the train split: chat messages with math_workflow's system prompt."""


def main(argv: Sequence[str] | None = None) -> int:
    """`rfthpc make-data`: generate the data set described by `MakeDataArgs`."""
    args = tyro.cli(MakeDataArgs, args=argv, prog="rfthpc make-data")
    splits = generate_splits(args.train, args.test, Difficulty.level(args.difficulty), args.seed)
    path = write_splits(args.out, splits, args.format)
    if args.sft:
        from rfthpc.workflows.math import MATH_SYSTEM_PROMPT

        write_jsonl(Path(args.out) / "sft.jsonl", sft_records(splits["train"], system_prompt=MATH_SYSTEM_PROMPT))
    sizes = " ".join(f"{k}={len(v)}" for k, v in splits.items())
    print(f"wrote {sizes} ({args.format}) to {path}")
    return 0


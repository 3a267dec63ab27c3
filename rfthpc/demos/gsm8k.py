"""The tiny CPU demo's model and data (`rfthpc make-demo`), and the figures of a finished demo run.

The demo (configs/tiny-cpu.yaml, docs/demo.md) trains a ~0.46M-parameter Qwen2 from scratch on
one-step addition word problems in GSM8K's format: an SFT warm-up on demonstrations, then GRPO
with vLLM rollouts, evaluated greedily on a held-out test split. Everything is made here, offline:

    <out>/model/            the random-init model (`rfthpc tiny-model --size demo`)
    <out>/gsm8k/train.jsonl tasks the explorers sample (question / answer)
    <out>/gsm8k/test.jsonl  held-out eval tasks (no question also in train)
    <out>/sft.jsonl         the warm-up demonstrations (question / answer, a slice of train)
    <out>/demo.json         what was made (a re-run with the same settings does nothing)
"""

from __future__ import annotations

import json
import random
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import tyro

from rfthpc.demos.figures import demo_figures
from rfthpc.demos.synth_gsm8k import Difficulty, final_answer, generate_splits, write_jsonl
from rfthpc.errors import UserError
from rfthpc.sharedfs.fileops import write_json_atomic

DEMO_DIFFICULTY = Difficulty(num_ops=1, max_number=5, operators="+")
"""One addition of two numbers from 1 to 5: 25 sums, but thousands of distinct phrasings."""
POOL_FACTOR = 6
"""Problems drawn per problem kept (the rarest answers, 2 and 10, come from 1 pair in 25: a draw
holds 6/25 x 9 = 2.2 times the share of each that balancing keeps), plus POOL_EXTRA."""
POOL_EXTRA = 200
STAMP = "demo.json"


@dataclass
class MakeDemoArgs:
    """Write the tiny CPU demo's model and data (the paths configs/tiny-cpu.yaml reads)."""

    out: Path = Path("demo-data")
    """Output directory (the config reads it from $RFTHPC_DEMO_DIR, default ./demo-data)."""
    seed: int = 0
    """Seed of the model's initial weights and of the problems."""
    train: int = 4000
    """Training tasks for the explorers."""
    test: int = 200
    """Held-out eval tasks."""
    sft: int = 2400
    """Warm-up demonstrations (the first rows of the training tasks)."""


def balanced_splits(n_train: int, n_test: int, seed: int) -> dict[str, list[dict[str, str]]]:
    """Train/test problems (no question in both) whose final answers are equally frequent.

    Drawn uniformly, a sum of two numbers from 1 to 5 is 6 five times as often as 2; a model that
    has not yet learned to read the numbers then answers 6 and is right 20% of the time, a plateau
    from which reward-driven learning escapes slowly. With every answer equally frequent no blind
    guess is worth more than 1/9.
    """
    total = n_train + n_test
    pool = generate_splits(POOL_FACTOR * total + POOL_EXTRA, 0, DEMO_DIFFICULTY, seed=seed)["train"]
    by_answer: dict[str, list[dict[str, str]]] = defaultdict(list)
    for record in pool:
        by_answer[final_answer(record["answer"])].append(record)
    answers = sorted(by_answer, key=int)

    def share(n: int, i: int) -> int:
        return n // len(answers) + (i < n % len(answers))

    if any(len(by_answer[a]) < share(n_train, i) + share(n_test, i) for i, a in enumerate(answers)):
        raise UserError(f"make-demo: {total} problems with balanced answers need more distinct problems than "
                        f"{DEMO_DIFFICULTY} has; ask for fewer --train/--test")
    splits: dict[str, list[dict[str, str]]] = {"train": [], "test": []}
    for i, answer in enumerate(answers):
        records = by_answer[answer]
        splits["test"] += records[:share(n_test, i)]
        splits["train"] += records[share(n_test, i):share(n_test, i) + share(n_train, i)]
    rng = random.Random(seed)
    for records in splits.values():
        rng.shuffle(records)
    return splits


def make_demo(args: MakeDemoArgs) -> dict[str, Any]:
    """Build the model and write the data described by `args` into `args.out`; return the stamp.

    Skips the work when `args.out` already holds a demo made with the same settings.
    """
    from rfthpc.demos.tinymodel import build_tiny_model

    if args.sft > args.train:
        raise UserError(f"make-demo --sft {args.sft}: the demonstrations are a slice of the {args.train} training "
                        "tasks; use --sft <= --train")
    out = Path(args.out)
    want = {**{k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(args).items() if k != "out"},
            "difficulty": asdict(DEMO_DIFFICULTY), "answers": "balanced"}
    stamp_path = out / STAMP
    if stamp_path.is_file() and json.loads(stamp_path.read_text()) == want:
        return want
    splits = balanced_splits(args.train, args.test, args.seed)
    write_jsonl(out / "gsm8k" / "train.jsonl", splits["train"])
    write_jsonl(out / "gsm8k" / "test.jsonl", splits["test"])
    write_jsonl(out / "sft.jsonl", splits["train"][: args.sft])
    build_tiny_model(out / "model", size="demo", seed=args.seed)
    # Written last: an interrupted run is redone next time.
    write_json_atomic(stamp_path, want)
    return want


def print_figures(run_dir: str | Path, wall_s: float) -> None:
    """Print the demo's summary line: `FIGURES eval_acc_sft=… eval_acc_rft=… wall_s=…`."""
    sft, rft = demo_figures(Path(run_dir))
    print(f"FIGURES eval_acc_sft={sft:.3f} eval_acc_rft={rft:.3f} wall_s={wall_s:.0f}")


def main(argv: Sequence[str] | None = None) -> int:
    """`rfthpc make-demo [--task arith]`: build the arithmetic demo's model and data."""
    args = tyro.cli(MakeDemoArgs, args=list(sys.argv[1:] if argv is None else argv), prog="rfthpc make-demo",
                    description=f"{MakeDemoArgs.__doc__} `--task frozenlake` makes the agentic demo's instead "
                                "(`rfthpc make-demo --task frozenlake --help` lists its flags).")
    made = make_demo(args)
    print(f"demo model and data in {args.out} (seed {made['seed']}: {made['train']} train, {made['test']} test, "
          f"{made['sft']} SFT rows)")
    return 0

"""Benchmark the explorer against a bare vLLM `generate` on the same prompts and the same engine.

usage: python tools/bench_rollout.py [--tasks 64] [--repeat 8] [--max-tokens 32] [--batch-size 64]
                                     [--rounds 2] [--model DIR] [--dir DIR]

One vLLM engine (CPU build here; the same code on GPU) serves the ~30M-parameter tiny model
(`bench30m`, built offline unless `--model` names one). After a warm-up call:

- vllm:     `LLM.generate` on the chat prompts of `--tasks` GSM8K-format problems, `n=--repeat`,
            with the explorer's sampling parameters, one call per `--batch-size` tasks: the limit.
- explorer: the full explorer (`rfthpc.explorer.loop.Explorer`) on a run directory holding those
            problems, driving the same engine: task claims, math_workflow (prompt building, the
            batched generate calls, math-verify scoring), staleness checks, HDF5 chunk commits and
            claim completion, timed from the engine being ready until the explorer returns. The
            share of that time spent outside engine calls is printed too: unlike the ratio, it
            hardly depends on other load on the machine.

Measurements alternate, vllm first and last (`--rounds` explorer runs between `--rounds + 1` vllm
runs), so a change in machine load hits both alike; the ratio compares total tokens over total
seconds of each. Prints a table and, last, `FIGURES explorer_vs_vllm=… explorer_tokens_per_s=…`
(the target is >= 0.9).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=64, help="problems (prompts)")
    p.add_argument("--repeat", type=int, default=8, help="responses per problem (repeat_times, vLLM n)")
    p.add_argument("--max-tokens", type=int, default=32, help="response token limit")
    p.add_argument("--batch-size", type=int, default=None,
                   help="tasks per explorer step and per vLLM call (default: all)")
    p.add_argument("--rounds", type=int, default=2, help="explorer runs, each between two vllm runs")
    p.add_argument("--model", type=Path, default=None, help="model directory (default: build bench30m)")
    p.add_argument("--dir", type=Path, default=None, help="working directory (default: a temporary one)")
    return p.parse_args()


def problems(n: int) -> list[dict[str, str]]:
    from rfthpc.demos.synth_gsm8k import Difficulty, generate_problem

    rng = random.Random(0)
    return [generate_problem(rng, Difficulty.level(1 + i % 3)) for i in range(n)]


def bare_vllm(engine, prompts: list[list[int]], args: argparse.Namespace, batch: int) -> tuple[int, float]:
    """Generated tokens and seconds of plain `LLM.generate` calls, `batch` prompts each."""
    from vllm import SamplingParams

    params = SamplingParams(n=args.repeat, temperature=1.0, top_p=1.0, top_k=0, max_tokens=args.max_tokens,
                            min_tokens=1, logprobs=0)
    tokens = 0
    start = time.perf_counter()
    for i in range(0, len(prompts), batch):
        chunk = [{"prompt_token_ids": p} for p in prompts[i : i + batch]]
        for out in engine.llm.generate(chunk, params, use_tqdm=False):
            tokens += sum(len(c.token_ids) for c in out.outputs)
    return tokens, time.perf_counter() - start


def run_explorer(engine, work: Path, model: Path, records: list[dict[str, str]], args: argparse.Namespace,
                 batch: int) -> tuple[int, float, int]:
    """Generated tokens, seconds and groups of a full explorer run driving `engine`."""
    import yaml

    from rfthpc.config import load_config, load_resolved
    from rfthpc.config.settings import explorer_settings
    from rfthpc.explorer.loop import Explorer
    from rfthpc.launch.run_dir import prepare_run_dir
    from rfthpc.store.chunks import read_chunk
    from rfthpc.store.layout import list_chunks, open_store

    data = work / "problems.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    cfg = {
        "project": "bench", "name": f"rollout-{os.getpid()}-{time.time_ns()}",
        "checkpoint_root_dir": str(work / "ckpt"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": args.repeat},
        "model": {"model_path": str(model), "max_prompt_tokens": 256, "max_response_tokens": args.max_tokens},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {"batch_size": batch, "explorer_input": {"taskset": {
            "name": "gsm8k", "path": str(data), "format": {"prompt_key": "question", "response_key": "answer"}},
            "default_workflow_type": "math_workflow"}},
        "explorer": {"runner_per_model": batch, "rollout_model": {"engine_type": "vllm"}},
        "synchronizer": {"sync_offset": 1000},
        "monitor": {"monitor_type": []},
    }
    (work / "bench.yaml").write_text(yaml.safe_dump(cfg))
    run = prepare_run_dir(load_config(work / "bench.yaml")).root
    ready: list[float] = []

    def same_engine(engine_type: str, settings):
        ready.append(time.perf_counter())
        return engine

    settings = explorer_settings(load_resolved(run / "config.yaml").stages)
    explorer = Explorer(run, "explorer", 0, settings, engine_factory=same_engine)
    code = explorer.run()
    elapsed = time.perf_counter() - ready[0]
    if code != 0:
        raise SystemExit(f"explorer exited with {code}")
    stored = [g for ref in list_chunks(open_store(run)) for g in read_chunk(ref.path)[1]]
    tokens = sum(len(e.response_ids) for g in stored for e in g.experiences)
    return tokens, elapsed, len(stored)


class _Lent:
    """The benchmark's engine lent to an explorer: not closed when the explorer returns, and the
    seconds spent inside the engine counted (the rest of the explorer's time is its overhead)."""

    def __init__(self, engine) -> None:
        self._engine = engine
        self.engine_s = 0.0

    def __getattr__(self, name: str):
        return getattr(self._engine, name)

    def generate_batch(self, requests):
        start = time.perf_counter()
        try:
            return self._engine.generate_batch(requests)
        finally:
            self.engine_s += time.perf_counter() - start

    def close(self) -> None:
        """Keep the engine for the next measurement."""


def main() -> int:
    args = parse_args()
    # math-verify warns on every call from a runner thread (no SIGALRM timeouts there).
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    batch = args.batch_size or args.tasks
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench_rollout_"))
    work.mkdir(parents=True, exist_ok=True)
    from transformers import AutoTokenizer

    from rfthpc.demos.tinymodel import build_tiny_model
    from rfthpc.engines import EngineSettings
    from rfthpc.engines.vllm_engine import VLLMEngine
    from rfthpc.tasks.tasksets import PromptBuilder
    from rfthpc.workflows.math import MATH_SYSTEM_PROMPT

    model = args.model or work / "bench30m"
    if not (Path(model) / "config.json").is_file():
        print(f"building the bench30m model in {model} ...", file=sys.stderr)
        build_tiny_model(model, "bench30m")
    records = problems(args.tasks)
    builder = PromptBuilder(AutoTokenizer.from_pretrained(str(model)), 256)
    prompts = [builder.render([{"role": "system", "content": MATH_SYSTEM_PROMPT},
                               {"role": "user", "content": r["question"]}]) for r in records]
    engine = VLLMEngine(EngineSettings(str(model), dtype="float32", max_model_len=256 + args.max_tokens,
                                       seed=0, cpu_kvcache_space_gb=2))
    bare_vllm(engine, prompts[: min(8, len(prompts))], args, batch)  # warm-up (first-call compilation)

    rows: list[tuple[str, int, float]] = []
    overhead = []
    for k in range(args.rounds):
        rows.append((f"vllm #{k + 1}", *bare_vllm(engine, prompts, args, batch)))
        lent = _Lent(engine)
        tokens, seconds, n_groups = run_explorer(lent, work, model, records, args, batch)
        assert n_groups == len(records), f"{n_groups} groups committed for {len(records)} tasks"
        rows.append((f"explorer #{k + 1}", tokens, seconds))
        overhead.append((seconds - lent.engine_s) / seconds)
    rows.append((f"vllm #{args.rounds + 1}", *bare_vllm(engine, prompts, args, batch)))
    print(f"{'':12} {'tokens':>8} {'seconds':>8} {'tokens/s':>9}")
    for name, tokens, seconds in rows:
        print(f"{name:12} {tokens:8d} {seconds:8.2f} {tokens / seconds:9.1f}")

    def rate(kind: str) -> float:
        picked = [(t, s) for name, t, s in rows if name.startswith(kind)]
        return sum(t for t, _ in picked) / sum(s for _, s in picked)

    print("explorer time outside engine calls (claims, prompts, scoring, commits): "
          + ", ".join(f"{o:.1%}" for o in overhead))
    print(f"setup: {args.tasks} tasks x {args.repeat} responses x <= {args.max_tokens} tokens, "
          f"{batch} tasks per call/step, model {model}")
    explorer_tps = rate("explorer")
    print(f"FIGURES explorer_vs_vllm={explorer_tps / rate('vllm'):.3f} explorer_tokens_per_s={explorer_tps:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The tiny CPU demo learns: `configs/tiny-cpu.yaml` run as shipped (SFT warm-up, then 150 GRPO steps) with the
real vLLM engine, evaluating only before and after RFT.

Noise is judged with binomial standard errors rather than several seeds (one run already takes minutes):

- eval accuracy: the 200 held-out problems are evaluated greedily after the warm-up and after
  RFT; with pooled accuracy p, the standard error of the difference of two such accuracies is
  sqrt(2 p (1 - p) / 200) (about 0.045 here); the test asks for 3 of them, a rise that chance
  alone gives with probability < 0.2 %;
- training reward: the mean over the first and the last 10 RL steps (1280 sampled responses
  each); the same rule with n = 1280 (a standard error of about 0.02).

Measured on this machine (docs/demo.md): eval accuracy goes from 0.425 after the warm-up to 0.74-0.785
after the 150 steps (three runs); the 3-sigma rise needs ~0.58. After 100 steps runs spread too widely for
that margin (0.56-0.75 at temperature 1), which is why the test runs the demo's whole RL stage.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rfthpc.demos.figures import demo_figures, last_stage_start
from tests.run.conftest import demo_variant, env_for, finish, rfthpc

RL_STEPS = 150
EVAL_TASKS = 200
SIGMAS = 3.0


def _rise_threshold(before: float, after: float, n: int) -> float:
    """SIGMAS standard errors of the difference of two proportions measured on n trials each."""
    p = (before + after) / 2
    return SIGMAS * math.sqrt(2 * p * (1 - p) / n)


@pytest.mark.slow
@pytest.mark.vllm
def test_demo_config_learns_beyond_noise(demo_dir: Path, tmp_path: Path) -> None:
    config = demo_variant(tmp_path / "demo.yaml", {"buffer": {"total_steps": RL_STEPS},
                                                   "explorer": {"eval_interval": 1000}})
    env = env_for(demo_dir, tmp_path / "ckpt")
    code, out, err = finish(rfthpc("run", "--config", str(config), env=env), 900)
    assert code == 0, f"exit {code}\n{out[-2000:]}\n{err[-3000:]}"
    run_dir = tmp_path / "ckpt" / "rfthpc-demo" / "tiny-cpu"

    sft, rft = demo_figures(run_dir)
    assert rft - sft >= _rise_threshold(sft, rft, EVAL_TASKS), f"eval accuracy {sft:.3f} -> {rft:.3f}"

    start = last_stage_start(run_dir)
    trainer = [json.loads(line) for line in (run_dir / "monitor" / "trainer.jsonl").read_text().splitlines()]
    rewards = [r["critic/score/mean"] for r in trainer if r["step"] > start]
    assert len(rewards) == RL_STEPS
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert last - first >= _rise_threshold(first, last, 10 * 128), f"batch reward {first:.3f} -> {last:.3f}"

    # The metrics went to wandb too (offline runs, one per role, for `wandb sync` later).
    runs = sorted(p.name for p in (run_dir / "monitor" / "wandb" / "wandb").glob("offline-run-*"))
    assert any(r.endswith("tiny-cpu_trainer") for r in runs) and any("tiny-cpu_explorer" in r for r in runs), runs

    code, out, err = finish(rfthpc("plot", str(run_dir), env=env), 120)
    assert code == 0, err
    for chart in ("reward", "eval", "staleness", "throughput", "overview"):
        assert (run_dir / "monitor" / "plots" / f"{chart}.png").stat().st_size > 10_000

"""The login-node commands start fast: they never import torch (seconds) or the other heavy libraries.

Each check runs the CLI's `main` in a fresh interpreter, since a module imported by an earlier test
would hide a regression, then lists which heavy modules the commands imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(str(p) for p in (ROOT / "configs").rglob("*.yaml"))

HEAVY = ("torch", "transformers", "vllm", "datasets", "wandb", "matplotlib", "math_verify", "h5py")
"""Libraries the trainer, explorers and plots need; a config check, a submission or `--help` needs none."""

SCRIPT = """
import contextlib, io, json, sys
from rfthpc.cli import main

def run(*argv):
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as e:  # argparse's --help
            code = e.code
    return {"code": code, "stderr": err.getvalue()}

results = [run(*argv) for argv in json.loads(sys.argv[1])]
print(json.dumps({"results": results, "heavy": [m for m in json.loads(sys.argv[2]) if m in sys.modules]}))
"""


def run_commands(*commands: list[str], env: dict[str, str] | None = None) -> tuple[list[dict], list[str]]:
    """Run each `rfthpc` argument list in one fresh interpreter: their outcomes and the heavy modules imported."""
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(commands), json.dumps(HEAVY)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    return out["results"], out["heavy"]


def test_validating_every_shipped_config_imports_no_torch(agentscope_python: str) -> None:
    # The AgentScope example's agent is imported by its own interpreter, a process of its own.
    results, heavy = run_commands(*(["config", "validate", "--no-path-checks", "--config", c] for c in SHIPPED),
                                  env={"RFTHPC_AGENTSCOPE_PYTHON": agentscope_python})
    assert [r["code"] for r in results] == [0] * len(SHIPPED), results
    assert heavy == []


def test_function_names_and_arguments_are_still_checked_without_torch(tmp_path: Path) -> None:
    cfg = yaml.safe_load((ROOT / "configs" / "grpo.yaml").read_text())
    cfg["algorithm"].update(advantage_fn_args={"std_normalise": False}, policy_loss_fn="ppo2", kl_loss_fn="k9")
    cfg["buffer"]["explorer_input"]["default_reward_fn_type"] = "math_rewrd"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    (result,), heavy = run_commands(["config", "validate", "--no-path-checks", "--config", str(bad)])
    assert result["code"] == 2
    for problem in (("algorithm.advantage_fn_args: 'std_normalise' not accepted by advantage function 'grpo'; "
                     "accepted: epsilon, rank_penalty, std_cal_level, std_normalize, std_threshold."),
                    "algorithm.policy_loss_fn: unknown policy loss 'ppo2'",
                    "algorithm.kl_loss_fn: unknown KL estimator 'k9'",
                    "tasksets[0].default_reward_fn_type: unknown reward function 'math_rewrd'"):
        assert problem in result["stderr"]
    assert heavy == []


def test_advantage_argument_values_are_checked_without_torch(tmp_path: Path) -> None:
    cfg = yaml.safe_load((ROOT / "configs" / "grpo.yaml").read_text())
    configs = []
    for i, (fn, args) in enumerate((("opmd", {"tau": -1}), ("opmd", {"opmd_baseline": "median"}),
                                    ("lite_ppo", {"difficulty_mask": True, "difficulty_low_threshold": 0.9,
                                                  "difficulty_high_threshold": 0.1}),
                                    ("lite_ppo", {"advantage_clip": 0}), ("lite_ppo", {"difficulty_mask": True}))):
        cfg["algorithm"].update(advantage_fn=fn, advantage_fn_args=args)
        configs.append(tmp_path / f"{i}.yaml")
        configs[-1].write_text(yaml.safe_dump(cfg))
    results, heavy = run_commands(*(["config", "validate", "--no-path-checks", "--config", str(c)] for c in configs))
    assert [r["code"] for r in results] == [2, 2, 2, 2, 0], results
    for result, problem in zip(results, ("algorithm.advantage_fn_args.tau must be > 0, got -1.",
                                         "algorithm.advantage_fn_args.opmd_baseline: unknown baseline 'median'",
                                         "algorithm.advantage_fn_args.difficulty_low_threshold (0.9) must be below "
                                         "difficulty_high_threshold (0.1)",
                                         "algorithm.advantage_fn_args.advantage_clip must be > 0")):
        assert f"  - {problem}" in result["stderr"], result  # the key once, first
    assert heavy == []


def test_replay_settings_are_checked_without_torch_or_h5py(tmp_path: Path) -> None:
    cfg = yaml.safe_load((ROOT / "configs" / "grpo.yaml").read_text())
    cfg["buffer"]["trainer_input"] = {"experience_buffer": {"replay_buffer": {
        "enable": True, "reuse_cooldown_time": 1.0, "priority_fn": "decay_limit_randomization",
        "priority_fn_args": {"decay": 1.0, "use_count_limit": 2}}}}
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(cfg))
    cfg["buffer"]["trainer_input"]["experience_buffer"]["replay_buffer"]["priority_fn_args"] = {"sigma": -1}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    (ok, refused), heavy = run_commands(*(["config", "validate", "--no-path-checks", "--config", str(p)]
                                          for p in (good, bad)))
    assert ok["code"] == 0, ok
    assert refused["code"] == 2 and "sigma must be >= 0" in refused["stderr"], refused
    assert heavy == []


def test_help_and_submit_dry_run_import_no_torch(tmp_path: Path) -> None:
    helps = [["--help"], *([cmd, "--help"] for cmd in ("submit", "status", "cancel", "plot", "add-explorers"))]
    dry_run = ["submit", "--config", "configs/grpo.yaml", "--no-path-checks", "--dry-run",
               "--checkpoint_root_dir", str(tmp_path)]
    results, heavy = run_commands(*helps, dry_run)
    assert [r["code"] for r in results] == [0] * len(results), results
    assert (tmp_path / "rfthpc-gsm8k" / "qwen2.5-1.5b-grpo" / "slurm" / "dry-run" / "trainer.sbatch").is_file()
    assert heavy == []


def test_status_and_cancel_import_no_torch(tmp_path: Path) -> None:
    (result,), _ = run_commands(["submit", "--config", "configs/grpo.yaml", "--no-path-checks", "--dry-run",
                                 "--checkpoint_root_dir", str(tmp_path)])
    assert result["code"] == 0, result
    run = tmp_path / "rfthpc-gsm8k" / "qwen2.5-1.5b-grpo"
    (run / "jobs.jsonl").write_text(json.dumps({"role": "trainer", "job_id": "4242", "trainer_nodes": 1}) + "\n")
    # Without Slurm on PATH both commands still get past parsing and reading the run directory.
    (status, cancel), heavy = run_commands(["status", str(run), "--timeout", "5"], ["cancel", str(run)],
                                           env={"PATH": str(tmp_path / "no-slurm")})
    assert status["code"] == 0, status
    assert cancel["code"] == 2 and "scancel" in cancel["stderr"], cancel
    # status counts the experience store's groups from its HDF5 chunks: h5py is its one heavy import.
    assert heavy in ([], ["h5py"])


def test_config_import_imports_no_torch(tmp_path: Path) -> None:
    example = ROOT / "tests" / "config" / "roll_examples" / "qwen2.5-0.5B-agentic" / "agent_val_frozen_lake_async.yaml"
    (result,), heavy = run_commands(["config", "import", "--from", "roll", str(example), "max_steps=2",
                                     "--out", str(tmp_path / "imported.yaml")])
    assert result["code"] == 0, result
    assert heavy == []

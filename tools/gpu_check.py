"""The GPU check: rfthpc's trainer, publisher, explorer and converter on this machine's accelerator.

Makes the demo's model and data offline (`rfthpc make-demo`), then runs `rfthpc run` on a short
GRPO config: trainer steps with FSDP2 on one rank (bf16 compute on CUDA, float32 on CPU), weights
published as full snapshots and deltas (`synchronizer.weight_deltas: on`, a full snapshot every 2
versions), rollouts with the transformers engine on the same device, a checkpoint; then converts
the checkpoint (`rfthpc convert`) and rebuilds the last policy version (`rfthpc weights
materialize`). Micro-batches are padding-free (`trainer.use_remove_padding`, on by default). Then
the same run with a LoRA adapter (`model.lora`): the adapter trains on the frozen base, each
version is published as the adapter alone and applied by the explorer through peft, and the
checkpoint converts by merging the adapter into the base. Then, with two GPUs (or on CPU), the run
with 2 trainer ranks at `trainer.ulysses_sequence_parallel_size: 2`. Then the colocated leg: the
trainer and a vLLM engine on the one device at once, as `slurm.layout: colocated` shares a GPU (the
engine at `gpu_memory_utilization` 0.3, validated against the GPU's memory), and once more time-sharing
the device (`explorer.rollout_model.enable_sleep_mode`: the engine, now at 0.8 of the GPU, sleeps while the
trainer steps, the trainer's state goes to CPU memory while the engine generates). Every step must succeed;
the figures come from the runs' metrics.

Last line: `FIGURES device=… dtype=… step_time_s=… train_tokens_per_s=… rollout_tokens_per_s=…
deltas=… full_snapshots=… weight_stall_s=… convert_s=… lora_step_time_s=… lora_adapters=…
lora_bytes_per_sync=… [sp2_step_time_s=…] colocated_step_time_s=… colocated_rollout_tokens_per_s=…
sleep_step_time_s=… sleep_rollout_tokens_per_s=… sleep_turns=… sleep_turn_wait_s=…`
(sp2 with two GPUs or on CPU).

Usage: `bash tools/gpu_check.sh [--wheels DIR]` (or this script with the project importable).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
STEPS = 4


def config(demo: Path, root: Path) -> dict:
    """A short GRPO run on the demo task: every part of a real run, minutes on a CPU."""
    arith = {"path": str(demo / "gsm8k"), "format": {"prompt_key": "question", "response_key": "answer"}}
    return {
        "project": "gpu-check", "name": "check", "checkpoint_root_dir": str(root), "mode": "both",
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "kl_loss_fn": "none",
                      "optimizer": {"lr": 1e-5}},
        "model": {"model_path": str(demo / "model"), "max_prompt_tokens": 48, "max_response_tokens": 16,
                  "dtype": "auto"},
        # `cluster` sizes Slurm jobs (the trainer gets the GPUs the explorers leave); these local processes share
        # the machine's GPU, whatever it says, so it stays unset as on a workstation.
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {"total_steps": STEPS, "batch_size": 4, "explorer_input": {
            "system_prompt": "",
            "taskset": {"name": "arith", "split": "train", **arith, "rollout_args": {"temperature": 1.0}},
            "eval_tasksets": [{"name": "arith-eval", "split": "test", **arith, "rollout_args": {"temperature": 0.0}}],
            "default_workflow_type": "math_workflow"}},
        "explorer": {"eval_interval": STEPS, "runner_per_model": 8,
                     "rollout_model": {"engine_type": "transformers", "engine_num": 1, "dtype": "auto"}},
        "synchronizer": {"sync_interval": 1, "sync_offset": 1, "weight_deltas": "on", "full_snapshot_interval": 2},
        "trainer": {"save_interval": 2, "save_hf_checkpoint": "never", "ppo_mini_batch_size": 4},
        "monitor": {"monitor_type": ["console"]},
    }


LORA = {"lora_rank": 8, "lora_alpha": 16, "target_modules": "all-linear"}
"""The LoRA leg's adapter: every linear layer of the decoder."""


def _rfthpc(*args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "rfthpc", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.stderr.write(result.stdout[-4000:] + result.stderr[-8000:])
        raise SystemExit(f"gpu_check: `rfthpc {' '.join(args)}` failed with exit code {result.returncode}")
    return result


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def _run_check(work: Path, cfg: dict, *run_args: str) -> tuple[Path, list[dict], list[dict]]:
    """Run `cfg` with `rfthpc run` (and `run_args`); (its run directory, trainer step records, rollout records)."""
    path = work / f"{cfg['name']}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    _rfthpc("run", "--config", str(path), *run_args)
    run = work / "runs" / cfg["project"] / cfg["name"]
    trainer = [r for r in _records(run / "monitor" / "trainer.jsonl") if "perf/time_per_step" in r]
    explorer = [r for f in sorted((run / "monitor").glob("explorer_*.jsonl")) for r in _records(f)
                if "rollout/tokens_per_s" in r]
    if len(trainer) < STEPS or not explorer:
        raise SystemExit(f"gpu_check: {len(trainer)} trainer steps and {len(explorer)} rollout batches recorded in "
                         f"{cfg['name']}; expected {STEPS} and some (see {run}/logs)")
    return run, trainer, explorer


def _convert(run: Path) -> float:
    """Seconds `rfthpc convert` takes to write the run's checkpoint as a Hugging Face model (checked)."""
    start = time.perf_counter()
    _rfthpc("convert", "--checkpoint-dir", str(run), "--no-progress")
    seconds = time.perf_counter() - start
    if not list(run.glob("global_step_*/actor/huggingface/*.safetensors")):
        raise SystemExit(f"gpu_check: rfthpc convert wrote no Hugging Face weights for {run.name}")
    return seconds


def _full_run(work: Path) -> dict[str, float | int]:
    """Full fine-tuning: steps, deltas and snapshots, rollouts, convert, materialize."""
    run, trainer, explorer = _run_check(work, config(work / "demo", work / "runs"))
    listing = json.loads(_rfthpc("weights", "list", str(run), "--json").stdout)
    deltas = sum(r["delta_mb"] is not None for r in listing)
    full = sum(r["full_mb"] is not None for r in listing)
    if not deltas:
        raise SystemExit("gpu_check: no delta was published")
    convert_s = _convert(run)
    _rfthpc("weights", "materialize", str(run), "--version", str(STEPS), "--out", str(work / "final"))
    # The first step pays for warm-up (CUDA kernels, allocator): the median of the rest.
    return {
        "step_time_s": statistics.median(r["perf/time_per_step"] for r in trainer[1:]),
        "train_tokens_per_s": statistics.median(r["perf/throughput"] for r in trainer[1:]),
        "rollout_tokens_per_s": statistics.median(r["rollout/tokens_per_s"] for r in explorer),
        "deltas": deltas, "full_snapshots": full,
        "weight_stall_s": max(r.get("rollout/weight_stall_s", 0.0) for r in explorer),
        "convert_s": convert_s,
    }


def _lora_run(work: Path, cfg: dict) -> dict[str, float | int]:
    """LoRA: adapter-only publications the explorer applies, and convert merging into the base."""
    run, trainer, _ = _run_check(work, cfg)
    adapters = sorted((run / "weights").glob("step_*/adapter_model.safetensors"))
    if not adapters:
        raise SystemExit("gpu_check: the LoRA run published no adapter (weights/step_*/adapter_model.safetensors)")
    _convert(run)
    return {
        "lora_step_time_s": statistics.median(r["perf/time_per_step"] for r in trainer[1:]),
        "lora_adapters": len(adapters),
        "lora_bytes_per_sync": adapters[-1].stat().st_size,
    }


def _sp_run(work: Path, cfg: dict) -> dict[str, float]:
    """Ulysses sequence parallelism: 2 trainer ranks, each holding half of every packed row."""
    _, trainer, _ = _run_check(work, cfg, "--trainer-procs", "2")
    return {"sp2_step_time_s": statistics.median(r["perf/time_per_step"] for r in trainer[1:])}


def _colocated_run(work: Path, cfg: dict, device: str, sleep: bool) -> dict[str, float]:
    """The trainer and a vLLM engine on the one device (`slurm.layout: colocated`). Without `sleep`, both at
    once: the engine takes 0.3 of the GPU, validated against its memory (on CPU a 1 GiB KV cache). With it,
    they take turns: the engine takes 0.8 of the GPU, and sleeps while the trainer steps."""
    import torch

    cfg["explorer"]["rollout_model"] = {"engine_type": "vllm", "engine_num": 1, "dtype": "auto",
                                        "gpu_memory_utilization": 0.8 if sleep else 0.3, "cpu_kvcache_space_gb": 1,
                                        "enable_sleep_mode": sleep}
    if device == "cuda":
        memory = torch.cuda.get_device_properties(0).total_memory / 1024 ** 3
        cfg["cluster"] = {"node_num": 1, "gpu_per_node": 1, "gpu_memory_gb": round(memory, 1)}
    if device == "cuda" or sleep:
        cfg["slurm"] = {"layout": "colocated"}
    _, trainer, explorer = _run_check(work, cfg)
    prefix = "sleep" if sleep else "colocated"
    figures = {f"{prefix}_step_time_s": statistics.median(r["perf/time_per_step"] for r in trainer[1:]),
               f"{prefix}_rollout_tokens_per_s": statistics.median(r["rollout/tokens_per_s"] for r in explorer)}
    if sleep:
        figures["sleep_turns"] = explorer[-1]["rollout/gpu_turns"]
        figures["sleep_turn_wait_s"] = sum(r["timing/gpu_turn_wait_s"] for r in trainer)
    return figures


def main() -> int:
    """Run the check; print the figures."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = "bfloat16" if device == "cuda" else "float32"
    print(f"gpu_check: torch {torch.__version__}, device {device}"
          + (f" ({torch.cuda.get_device_name(0)})" if device == "cuda" else " (no GPU: the CPU path)"), flush=True)
    with tempfile.TemporaryDirectory(prefix="rfthpc-gpu-check-") as tmp:
        work = Path(tmp)
        _rfthpc("make-demo", "--out", str(work / "demo"))
        figures = {"device": device, "dtype": dtype, **_full_run(work)}
        lora = config(work / "demo", work / "runs")
        lora["name"] = "check-lora"
        lora["model"]["lora"] = LORA
        figures.update(_lora_run(work, lora))
        # Two trainer ranks need two GPUs on CUDA; on CPU they are two gloo processes.
        if device == "cpu" or torch.cuda.device_count() >= 2:
            sp = config(work / "demo", work / "runs")
            sp["name"] = "check-sp2"
            sp["trainer"]["ulysses_sequence_parallel_size"] = 2
            figures.update(_sp_run(work, sp))
        for sleep in (False, True):
            colocated = config(work / "demo", work / "runs")
            colocated["name"] = "check-sleep" if sleep else "check-colocated"
            figures.update(_colocated_run(work, colocated, device, sleep))
    print("FIGURES " + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

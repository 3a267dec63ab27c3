#!/usr/bin/env python
"""Benchmark `rfthpc convert` against the limit: reading and writing the same bytes.

Usage (from the repository root):
    python tools/bench_convert.py [--workdir /tmp/rfthpc-bench-convert] [--keep]

Builds a random-init float32 Qwen2 of 512 MiB (no download), saves it as 4-rank FSDP2
checkpoints in both formats (rfthpc DCP and veRL/Trinity-RFT `model_world_size_4_rank_R.pt`),
then for each format:
- times a raw copy of the shard files (read + write + fsync of the same bytes): the limit;
- converts in a fresh process and records its conversion time and peak RSS (VmHWM) above the
  RSS it had after importing torch and transformers (the imports alone take ~300 MB whatever
  the model size, so the increment is what streaming controls);
- checks the converted weights equal the full weights gathered by rank 0.
Targets: convert time <= 1.5x the copy, peak RSS increment <= 0.5x the model size.
The last line is `FIGURES convert_vs_copy=… peak_rss_vs_model=…` (rfthpc format), followed on the
same line by the veRL figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Qwen2 shape: 9 layers, hidden 1024, 16 heads (head_dim 64), 4 KV heads, vocab 32000, tied:
# ~134M parameters, 512 MiB in float32.
SHAPE = {
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 9,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
}
WORLD_SIZE = 4


def _hwm_mb() -> float:
    """This process's peak resident set (VmHWM) in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(run_dir: str) -> None:
    """Convert `run_dir` (forced) in this fresh process; print timing and memory as JSON."""
    import torch  # noqa: F401
    import transformers
    from torch.distributed import checkpoint  # noqa: F401
    from torch.distributed.tensor import DTensor  # noqa: F401

    from rfthpc.convert.merge import ConvertOptions, convert_checkpoints

    _ = transformers.Qwen2ForCausalLM  # the converter builds the model class on the meta device
    baseline = _hwm_mb()
    t0 = time.perf_counter()
    outcomes = convert_checkpoints(run_dir, ConvertOptions(force=True, progress=False))
    seconds = time.perf_counter() - t0
    assert [o.status for o in outcomes] == ["converted"], [o.detail for o in outcomes]
    print("RESULT " + json.dumps({"seconds": seconds, "baseline_mb": baseline, "peak_mb": _hwm_mb()}))


def _build_base(path: Path) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(**SHAPE, architectures=["Qwen2ForCausalLM"])
    Qwen2ForCausalLM(config).to(torch.float32).save_pretrained(path)


def _raw_copy(files: list[Path], dest: Path) -> float:
    """Seconds to read `files` and write their bytes to `dest`, fsynced: the I/O a conversion needs."""
    dest.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for src in files:
        with open(src, "rb") as fin, open(dest / src.name, "wb") as fout:
            while chunk := fin.read(16 * 2**20):
                fout.write(chunk)
            fout.flush()
            os.fsync(fout.fileno())
    seconds = time.perf_counter() - t0
    shutil.rmtree(dest)
    return seconds


def _check_equal(hf_dir: Path, reference: Path) -> None:
    import torch
    from safetensors import safe_open

    got = {}
    for f in hf_dir.glob("*.safetensors"):
        with safe_open(f, framework="pt") as st:
            got.update({k: f for k in st.keys()})  # noqa: SIM118 — safe_open is not a dict
    with safe_open(reference, framework="pt") as ref:
        for name in ref.keys():  # noqa: SIM118 — safe_open is not a dict
            if name == "lm_head.weight" and name not in got:
                continue  # tied
            with safe_open(got[name], framework="pt") as st:
                assert torch.equal(st.get_tensor(name), ref.get_tensor(name)), name


def main() -> None:
    """Build the model and checkpoints, run both formats, print the figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=Path("/tmp/rfthpc-bench-convert"))
    p.add_argument("--keep", action="store_true", help="keep the model and checkpoints")
    args = p.parse_args()
    work = args.workdir
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        t0 = time.perf_counter()
        _build_base(work / "base")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.convert.make_checkpoints",
                "--base",
                str(work / "base"),
                "--out",
                str(work / "ckpt"),
                "--world-size",
                str(WORLD_SIZE),
                "--no-train",
            ],
            cwd=REPO,
            check=True,
            stderr=subprocess.DEVNULL,
        )
        print(f"built a {WORLD_SIZE}-rank checkpoint in {time.perf_counter() - t0:.0f} s")
        figures = {}
        for fmt, pattern in (("rfthpc", "model/*.distcp"), ("verl", "model_world_size_*_rank_*.pt")):
            actor = work / "ckpt" / fmt / "global_step_1" / "actor"
            shards = sorted(actor.glob(pattern))
            copy_s = _raw_copy(shards, work / "copy")
            proc = subprocess.run(
                [sys.executable, __file__, "--child", str(work / "ckpt" / fmt)],
                cwd=REPO,
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                sys.exit(f"conversion of the {fmt} checkpoint failed:\n{proc.stderr[-3000:]}")
            r = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
            hf = actor / "huggingface"
            model_mb = sum(f.stat().st_size for f in hf.glob("*.safetensors")) / 2**20
            _check_equal(hf, work / "ckpt" / "reference_actor.safetensors")
            ratio_t = r["seconds"] / copy_s
            ratio_m = (r["peak_mb"] - r["baseline_mb"]) / model_mb
            print(
                f"{fmt}: model {model_mb:.0f} MiB in {len(shards)} shards; raw copy {copy_s:.2f} s, "
                f"convert {r['seconds']:.2f} s ({ratio_t:.2f}x); peak RSS {r['peak_mb']:.0f} MiB = "
                f"{r['baseline_mb']:.0f} MiB after imports + {r['peak_mb'] - r['baseline_mb']:.0f} MiB "
                f"({ratio_m:.2f}x the model; {r['peak_mb'] / model_mb:.2f}x counting the imports); weights equal"
            )
            prefix = "" if fmt == "rfthpc" else f"{fmt}_"
            figures[f"{prefix}convert_vs_copy"] = ratio_t
            figures[f"{prefix}peak_rss_vs_model"] = ratio_m
        print("FIGURES " + " ".join(f"{k}={v:.2f}" for k, v in figures.items()))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        sys.path.insert(0, str(REPO))
        child(sys.argv[2])
    else:
        main()

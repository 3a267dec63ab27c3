"""Write real sharded checkpoints the way the trainers do: W gloo ranks, FSDP2, one SGD step.

Usage (from the repository root):
    python -m tests.convert.make_checkpoints --base MODEL_DIR --out DIR [--world-size 2]
        [--roles actor,critic] [--formats rfthpc,verl] [--no-train]

Writes, for each format, `DIR/<format>/global_step_1/<role>/`:
- rfthpc: `model/` (`dcp.save` of `{"model": get_model_state_dict(model)}`, as rfthpc's trainer
  saves it), `hf_config/`, `rfthpc_checkpoint.json` last;
- verl: `model_world_size_W_rank_R.pt` (`torch.save` of each rank's sharded `state_dict()`, i.e.
  DTensor local shards), `huggingface/` (config + tokenizer), `fsdp_config.json`;
and `DIR/reference_<role>.safetensors`, the full trained weights gathered on rank 0.
The actor is the causal LM in MODEL_DIR; the critic is a one-label token-classification model
on the same backbone (as rfthpc's and veRL's critics are).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
from pathlib import Path

import torch
import torch.distributed as dist


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _build(role: str, base: Path):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification

    if role == "actor":
        return AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = AutoConfig.from_pretrained(base, num_labels=1)
    config.architectures = ["Qwen2ForTokenClassification"]
    torch.manual_seed(1)
    return AutoModelForTokenClassification.from_pretrained(base, config=config, dtype=torch.float32)


def _train_step(model, vocab: int, world_size: int) -> None:
    # Each rank sees other tokens, so the gradient (and the weights after the step) need all ranks.
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    ids = torch.randint(0, vocab, (2, 12), generator=g)
    out = model(input_ids=ids)
    loss = out.logits.float().pow(2).mean()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.add_(p.grad, alpha=-0.5)


def _save_hf_files(model, base: Path, dest: Path, config_of_base: bool) -> None:
    """Tokenizer files from `base`; the config of the model (veRL) or of `base` (rfthpc's trainer,
    whose critic keeps the causal-LM config it was built from)."""
    dest.mkdir(parents=True, exist_ok=True)
    if config_of_base:
        shutil.copyfile(base / "config.json", dest / "config.json")
    else:
        model.config.save_pretrained(dest)
    for p in base.iterdir():
        if p.is_file() and (
            p.name.startswith("tokenizer") or p.name in ("chat_template.jinja", "generation_config.json")
        ):
            shutil.copyfile(p, dest / p.name)


def _rank_main(rank: int, args: argparse.Namespace, port: int) -> None:
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import save_file
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=args.world_size)
    mesh = init_device_mesh("cpu", (args.world_size,), mesh_dim_names=("fsdp",))
    out = Path(args.out)
    for role in args.roles.split(","):
        model = _build(role, Path(args.base))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        if not args.no_train:
            _train_step(model, model.config.vocab_size, args.world_size)
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if rank == 0:
            save_file({k: v.clone().contiguous() for k, v in full.items()}, out / f"reference_{role}.safetensors")
        del full
        if "rfthpc" in args.formats:
            role_dir = out / "rfthpc" / "global_step_1" / role
            dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=role_dir / "model")
            dist.barrier()
            if rank == 0:
                _save_hf_files(model, Path(args.base), role_dir / "hf_config", config_of_base=True)
                meta = {"step": 1, "stage": "rft", "world_size": args.world_size, "dtype": "float32"}
                (role_dir / "rfthpc_checkpoint.json").write_text(json.dumps(meta))
        if "verl" in args.formats:
            role_dir = out / "verl" / "global_step_1" / role
            role_dir.mkdir(parents=True, exist_ok=True)
            torch.save(model.state_dict(), role_dir / f"model_world_size_{args.world_size}_rank_{rank}.pt")
            if rank == 0:
                _save_hf_files(model, Path(args.base), role_dir / "huggingface", config_of_base=False)
                (role_dir / "fsdp_config.json").write_text(
                    json.dumps({"FSDP_version": 2, "world_size": args.world_size})
                )
        dist.barrier()
        del model
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments and run the ranks."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--roles", default="actor")
    p.add_argument("--formats", default="rfthpc,verl")
    p.add_argument("--no-train", action="store_true")
    args = p.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    # Imported once here and inherited by forked ranks: importing transformers per rank doubles the time.
    import transformers  # noqa: F401
    from torch.distributed import checkpoint  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification  # noqa: F401

    torch.multiprocessing.start_processes(
        _rank_main, args=(args, _free_port()), nprocs=args.world_size, start_method="fork"
    )


if __name__ == "__main__":
    main()

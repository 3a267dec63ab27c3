"""Run under torchrun with 2 ranks (gloo, CPU): the trainer's forward passes on an FSDP2-sharded model.

Usage: python -m torch.distributed.run --standalone --nproc-per-node 2 tests/trainer/fsdp_forward_worker.py MODEL OUT

Every rank runs the same micro-batches (`forward_cases`) through the sharded policy: log-probs and
entropy with their gradients (the LM head in chunks of a few positions), then log-probs with
sum_v pi_v^2 without. Rank 0 writes what came out, with the whole (gathered) gradients, to OUT
(torch.save) for tests/trainer/test_forward.py to compare with an unsharded model.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from rfthpc.trainer import forward, packed_attention
from rfthpc.trainer.dist import init_distributed
from rfthpc.trainer.fsdp import build_sharded_model
from tests.trainer.test_forward import CHUNK_POSITIONS, forward_cases


def main(model_dir: str, out: str) -> None:
    """Run every case on the sharded model; rank 0 saves the results."""
    env = init_distributed()
    model = build_sharded_model(Path(model_dir), env)
    assert model.config._attn_implementation == packed_attention.ATTENTION
    forward.HEAD_CHUNK_LOGITS = CHUNK_POSITIONS * model.config.vocab_size
    results = {}
    for name, mb in forward_cases(model.config.vocab_size).items():
        model.zero_grad(set_to_none=True)
        lp, entropy = forward.token_logprobs(model, mb, with_entropy=True, entropy_grad=True)
        # Every rank has the same micro-batch and FSDP2 averages the ranks' gradients: the mean is it.
        ((lp + 0.1 * entropy) * mb.response_mask).sum().backward()
        grads = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
        both = forward.token_logprobs_and_stats(model, mb, ("sum_pi_squared",))
        results[name] = {"lp": lp.detach(), "entropy": entropy.detach(), "grads": grads, "both": both}
    if env.is_main:
        torch.save(results, out)
    env.close()


if __name__ == "__main__":
    main(*sys.argv[1:3])

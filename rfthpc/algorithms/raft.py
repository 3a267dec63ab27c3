"""Reward-ranked fine-tuning (RAFT, arXiv:2304.06767): of each task's group of responses, the best
ones are kept and the policy is fine-tuned on them with the SFT loss.

Trinity-RFT's `raft` algorithm trains the SFT loss on whatever experience its workflows emit (its RAFT
workflows emit the successful episodes only); here the ranking is the `raft` advantage function's, so
any workflow and reward serve: `algorithm_type: raft` names it with `policy_loss_fn: sft`.
"""

from __future__ import annotations

import torch

from rfthpc.algorithms.advantage_args import raft_args
from rfthpc.algorithms.advantages import AdvantageInputs, _broadcast, _group_ids, _scores
from rfthpc.algorithms.declare import declare


@declare("advantage", "raft", groups=True, drops_responses=True,
         checked_by="rfthpc.algorithms.advantage_args:raft_args")
@torch.no_grad()
def raft(
    inputs: AdvantageInputs, *, top_k: int = 1, min_reward: float | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Keep, in each group, the `top_k` responses of highest reward (ties: the earlier response first),
    and of those only the ones with reward >= `min_reward` when it is set (e.g. 1 with 0/1 rewards:
    successes only, as Trinity-RFT's RAFT workflows keep). The kept responses get A = 1 (the SFT loss
    reads none); the others leave the step's loss mask. Returns (A, A) and the (B,) responses kept.
    """
    raft_args(top_k=top_k, min_reward=min_reward)
    scores = _scores(inputs)
    groups = _group_ids(inputs, "raft")
    order = torch.arange(scores.numel(), device=scores.device)
    same = groups.unsqueeze(0) == groups.unsqueeze(1)
    # ahead[i, j]: response j ranks before response i in i's group.
    ahead = same & ((scores.unsqueeze(0) > scores.unsqueeze(1))
                    | ((scores.unsqueeze(0) == scores.unsqueeze(1)) & (order.unsqueeze(0) < order.unsqueeze(1))))
    kept = ahead.sum(dim=1) < top_k
    if min_reward is not None:
        kept &= scores >= min_reward
    advantages = _broadcast(kept.to(scores.dtype), inputs.response_mask)
    return advantages, advantages, kept

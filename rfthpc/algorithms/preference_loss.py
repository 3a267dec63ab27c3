"""Preference losses: DPO (`algorithm.policy_loss_fn: dpo`, arXiv:2305.18290), on pairs of responses.

Notation: for a response y of a pair, r(y) = sum_t m_t (log pi(y_t) - log pi_ref(y_t)), its log-ratio
to the frozen reference model over its trained tokens; c the chosen response, r the rejected one;
z = beta (r(c) - r(r)). The pair's loss, with label smoothing eps (conservative DPO: the label is
wrong with probability eps), is

    l(z) = -(1 - eps) log sigmoid(z) - eps log sigmoid(-z)

and the batch's loss the mean of l over its pairs.

How a pair is split (differs from Trinity-RFT, which needs both responses side by side in one
micro-batch): the trainer may put the two responses of a pair in different micro-batches or on
different ranks. Each response's row therefore computes its pair's z from its own r, with the
gradient, and its partner's r under the policy at the start of the step, without (the step makes
one update, so that policy is the current one). A row's term is 2 l(z) - sg(l(z)): its value is
l(z) and its gradient twice dl/dr(own) dr(own); averaged over the 2P rows of P pairs, the values give
the mean pair loss and the gradients add up to the gradient of the mean pair loss, exactly.

Metrics (Trinity-RFT's names, with TRL's margin): actor/dpo_loss; actor/chosen_reward and
actor/rejected_reward, the means of beta r(c) and beta r(r); actor/accuracy_mean, the share of
pairs with r(c) > r(r); actor/reward_margin, the mean of beta (r(c) - r(r)).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rfthpc.algorithms.aggregation import masked_mean, masked_sum
from rfthpc.algorithms.declare import declare
from rfthpc.algorithms.policy_loss import PolicyLossInputs, _need, masked_inputs


def dpo_pair_loss(z: torch.Tensor, label_smoothing: float) -> torch.Tensor:
    """l(z) = -(1 - eps) log sigmoid(z) - eps log sigmoid(-z), elementwise."""
    return -(1.0 - label_smoothing) * F.logsigmoid(z) - label_smoothing * F.logsigmoid(-z)


@declare("policy_loss", "dpo", old_log_prob="proximal", preference_pairs=True)
def dpo(
    inputs: PolicyLossInputs,
    *,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
    loss_agg_mode: str = "seq-mean-token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """DPO's sigmoid loss (module docstring), a mean over the rows of the micro-batch with a trained
    token. `beta` and `label_smoothing` as Trinity-RFT's dpo loss (defaults 0.1 and 0; the config
    checks label_smoothing is in [0, 0.5)). Each pair is scored on its own (the DPO paper's and TRL's
    form); Trinity-RFT 0.6.0 sums r over every chosen row of the micro-batch and every rejected row and
    takes one logit of the two sums, which differs with more than one pair. The loss is a mean over pairs whatever `loss_agg_mode`;
    the config accepts only a seq-mean mode for it, so that micro-batches are weighted by their
    responses."""
    ref = _need(inputs.ref_log_prob, "the reference model's log-probabilities", "dpo")
    sign = _need(inputs.pair_sign, "preference pairs (a DPO dataset)", "dpo").to(inputs.log_prob.dtype)
    partner = _need(inputs.partner_log_ratio, "preference pairs (a DPO dataset)", "dpo").to(inputs.log_prob.dtype)
    inputs = masked_inputs(inputs)
    mask = inputs.response_mask
    own = masked_sum(inputs.log_prob - ref.to(inputs.log_prob.dtype), mask, dim=-1)
    z = beta * sign * (own - partner)
    pair_loss = dpo_pair_loss(z, label_smoothing)
    rows = mask.sum(dim=-1) > 0
    loss = masked_mean(2.0 * pair_loss - pair_loss.detach(), rows)
    with torch.no_grad():
        chosen = torch.where(sign > 0, own, partner)
        rejected = torch.where(sign > 0, partner, own)
        metrics = {
            "actor/dpo_loss": masked_mean(pair_loss, rows).item(),
            "actor/chosen_reward": masked_mean(beta * chosen, rows).item(),
            "actor/rejected_reward": masked_mean(beta * rejected, rows).item(),
            "actor/accuracy_mean": masked_mean((chosen > rejected).to(own.dtype), rows).item(),
            "actor/reward_margin": masked_mean(beta * (chosen - rejected), rows).item(),
        }
    return loss, metrics

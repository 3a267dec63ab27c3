"""Advantage estimators (`algorithm.advantage_fn`, arguments from `algorithm.advantage_fn_args`).

Every estimator takes an `AdvantageInputs` (one reward per sequence, token-level tensors of shape
(batch, tokens)) plus its keyword-only arguments and returns `(advantages, returns)`, both
(batch, tokens), zero outside the response mask; one declaring `drops_responses` (grpo) also
returns which responses the step trains, (batch,) bool.

Outcome estimators (grpo, rloo, opmd, reinforce) score sequence b by R_b = its reward, or by
sum_t r_bt when token-level rewards are given (e.g. after a KL penalty, as veRL does). Token
estimators (ppo, reinforceplusplus) use the token-level rewards, or the sequence reward placed on
the last response token (`outcome_token_rewards`).

Group estimators (grpo, rloo, opmd here; the others in `group_advantages`) compare the responses
to one task (same group id). A group without contrast (one response, or all scores exactly equal)
gets advantage exactly 0: computing R - mean(R) in floating point would otherwise leave rounding
noise that the std division magnifies, and a lone response has nothing to be compared with. veRL
differs there: it gives a lone response its reward as advantage (grpo: R / (1 + epsilon)).

Masked-out positions never reach a result, even when they hold inf or NaN: R_b sums the token-level
rewards of response tokens only (veRL sums the whole row, which is the same when, as there, rewards
sit on response tokens).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rfthpc.algorithms.advantage_args import opmd_args
from rfthpc.algorithms.aggregation import masked_mean, masked_sum, masked_whiten
from rfthpc.algorithms.declare import declare
from rfthpc.errors import ConfigError

AdvantageFn = Callable[..., tuple[torch.Tensor, ...]]
"""(advantages, returns), and the responses trained for a function declaring drops_responses."""


@dataclass(frozen=True)
class AdvantageInputs:
    """What an advantage estimator may read, for a batch of B responses padded to T tokens."""

    rewards: torch.Tensor
    """(B,) reward of each response."""
    response_mask: torch.Tensor
    """(B, T) 1 for response tokens the policy generated, 0 for padding (and tool/observation tokens)."""
    token_level_rewards: torch.Tensor | None = None
    """(B, T) reward per token, if the rewards are shaped per token (e.g. by a KL penalty)."""
    group_ids: torch.Tensor | None = None
    """(B,) integer id of the task each response answers; needed by grpo, rloo and opmd."""
    episode_ids: torch.Tensor | None = None
    """(B,) integer id of the episode each response is a step of (one per response when each is a whole
    episode); read by step-wise advantages, which compare a group's episodes by their last steps."""
    steps: torch.Tensor | None = None
    """(B,) each response's place in its episode's steps (0 for a whole episode)."""
    step_rewards: torch.Tensor | None = None
    """(B,) what each step earned on its own (the environment's reward for that turn); NaN where not said,
    and then the episode's reward counts as its last step's. Read by step_reinforce and the GiGPOs."""
    state_ids: torch.Tensor | None = None
    """(B,) integer id of the environment state each step acted in, equal for equal states across the batch
    (GiGPO's anchor states); one per response when not given."""
    values: torch.Tensor | None = None
    """(B, T) critic values V(s_t); needed by ppo (GAE)."""
    old_log_probs: torch.Tensor | None = None
    """(B, T) log-probabilities of the trained policy before this step's update (the trainer's
    forward pass); given when the estimator declares forward_outputs (optimal_token_baseline)."""
    behaviour_log_probs: torch.Tensor | None = None
    """(B, T) log-probabilities of the policy that generated the tokens (the explorer's)."""
    sum_pi_squared: torch.Tensor | None = None
    """(B, T) sum_v pi_v^2 over the vocabulary at each response position, from the same forward pass;
    given when the estimator declares forward_outputs=("sum_pi_squared",)."""
    entropy: torch.Tensor | None = None
    """(B, T) entropy of the policy before this step's update at each response position, from the same
    forward pass; given when the estimator declares forward_outputs=("entropy",) (clipb)."""
    reward_components: dict[str, torch.Tensor] | None = None
    """Name -> (B,) value of each named reward component (the reward function's dict; 0 for a
    response whose reward has no such component); given when the estimator declares reward_components."""
    baseline_rewards: torch.Tensor | None = None
    """(B,) reward of the greedy response to each response's task (NaN where the group has none);
    needed by remax (functions declared with greedy_baseline=True)."""
    truncated: torch.Tensor | None = None
    """(B,) True for a response cut at the token limit (model.max_response_tokens); given when the
    trainer knows the limit (lite_ppo's max_len_mask reads it)."""
    teacher_log_probs: torch.Tensor | None = None
    """(B, T) log-probabilities of the sampled tokens under the teacher model (`model.teacher_model_path`);
    given to estimators declared with teacher=True."""
    rollout_is_weights: torch.Tensor | None = None
    """(B, T) rollout-correction importance weights of `old_log_probs` against `behaviour_log_probs`
    (algorithm.rollout_correction); given to estimators declared with rollout_is_weights=True when
    rollout_is is on (None otherwise)."""


def outcome_token_rewards(rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Place each sequence reward R_b on the last unmasked token of row b: r_bt = R_b [t = last_b].

    Rows with no unmasked token get all zeros.
    """
    mask = response_mask.bool()
    positions = torch.arange(1, mask.shape[-1] + 1, device=mask.device).expand_as(mask)
    last = torch.where(mask, positions, 0).argmax(dim=-1)
    out = torch.zeros(mask.shape, dtype=rewards.dtype, device=rewards.device)
    out[torch.arange(mask.shape[0]), last] = rewards
    return torch.where(mask, out, torch.zeros_like(out))


def _scores(inputs: AdvantageInputs) -> torch.Tensor:
    """R_b: the sequence reward, or the sum of the token-level rewards of its response tokens when given."""
    if inputs.token_level_rewards is None:
        return inputs.rewards
    return masked_sum(inputs.token_level_rewards, inputs.response_mask, dim=-1)


def _token_rewards(inputs: AdvantageInputs) -> torch.Tensor:
    """r_bt: the token-level rewards, or the sequence reward on the last response token."""
    if inputs.token_level_rewards is None:
        return outcome_token_rewards(inputs.rewards, inputs.response_mask)
    return inputs.token_level_rewards


def _group_ids(inputs: AdvantageInputs, name: str) -> torch.Tensor:
    if inputs.group_ids is None:
        raise ConfigError(
            f"algorithm.advantage_fn: {name!r} compares responses within a task group, but this batch "
            "has no group ids; use an advantage_fn that needs no groups (ppo, reinforceplusplus, reinforce)."
        )
    return inputs.group_ids


def _group_index(group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """For each response, the index of its group in 0..G-1, the size of that group, and G."""
    _, inverse, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    return inverse, counts[inverse], int(counts.numel())


def _group_mean(scores: torch.Tensor, inverse: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Per response, the mean score of its group."""
    sums = torch.zeros(n_groups, dtype=scores.dtype, device=scores.device).index_add_(0, inverse, scores)
    counts = torch.zeros_like(sums).index_add_(0, inverse, torch.ones_like(scores))
    return (sums / counts)[inverse]


def _group_normalise(
    scores: torch.Tensor, inverse: torch.Tensor, sizes: torch.Tensor, n_groups: int, epsilon: float,
    std_normalize: bool,
) -> torch.Tensor:
    """GRPO's (R - mean_g) / (std_g + epsilon) (unbiased std), or R - mean_g; 0 for a group without contrast."""
    adv = scores - _group_mean(scores, inverse, n_groups)
    if std_normalize:
        var = _group_mean(adv**2, inverse, n_groups) * sizes / (sizes - 1).clamp(min=1)
        adv = adv / (var.sqrt() + epsilon)
    return torch.where(_has_contrast(scores, inverse, n_groups), adv, torch.zeros_like(adv))


def _has_contrast(scores: torch.Tensor, inverse: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Per response, whether its group holds at least two different scores."""
    init = torch.zeros(n_groups, dtype=scores.dtype, device=scores.device)
    high = init.scatter_reduce(0, inverse, scores, reduce="amax", include_self=False)
    low = init.scatter_reduce(0, inverse, scores, reduce="amin", include_self=False)
    return (high > low)[inverse]


def _broadcast(per_seq: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """(B,) → (B, T): the sequence value on every response token, 0 elsewhere."""
    full = per_seq.unsqueeze(-1).expand(response_mask.shape)
    return torch.where(response_mask.bool(), full, torch.zeros_like(full))


@declare("advantage", "grpo", groups=True, drops_responses=True)
@torch.no_grad()
def grpo(
    inputs: AdvantageInputs, *, epsilon: float = 1e-6, std_normalize: bool = True, std_threshold: float | None = None,
    rank_penalty: float | None = None, std_cal_level: str = "group",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Group-normalised outcome advantage (GRPO; Dr.GRPO with std_normalize=False).

    For response i in group g with n_g responses and scores R:
        A_i = (R_i - mean_g(R)) / (std_g(R) + epsilon)     if std_normalize
        A_i =  R_i - mean_g(R)                              otherwise
    std_g is the unbiased standard deviation. A group without contrast gives A = 0.

    `std_threshold` (Trinity-RFT's GRPO argument): a group with std_g(R) <= std_threshold, or with a
    single response, is left out of the step, as Trinity's GRPOGroupedAdvantage removes it from the
    batch (without its duplicate_experiences, which refills the batch with copies of kept groups).
    None (default): every response is trained.

    `std_cal_level: batch` (Trinity's): std_g is replaced by the unbiased standard deviation of every
    score in the batch (1 for a batch of one); the mean stays the group's.

    `rank_penalty` p (Trinity's, after arXiv 2506.02355): the group's mean and std are taken of the
    scores R_j (1 - p rank_j / n_g), rank_j in 0..n_g-1 being j's place when the group is sorted by
    the mean behaviour log-probability of its response tokens (the most likely response is penalised
    most); as in Trinity, each response's own R_i stays unpenalised in the numerator, and the
    contrast test reads the penalised scores. Ties keep their batch order (Trinity's sort leaves
    them unspecified).
    Returns (A, A) broadcast over the response tokens, and the (B,) responses trained.
    """
    _check_normalisation("grpo", std_threshold, std_cal_level)
    if rank_penalty is not None and not (isinstance(rank_penalty, (int, float)) and math.isfinite(rank_penalty)):
        raise ConfigError(f"algorithm.advantage_fn_args.rank_penalty must be a number or null for 'grpo', got "
                          f"{rank_penalty!r}.")
    scores = _scores(inputs)
    inverse, sizes, n_groups = _group_index(_group_ids(inputs, "grpo"))
    baseline_scores = scores if rank_penalty is None else _rank_penalised(inputs, scores, inverse, sizes,
                                                                          n_groups, rank_penalty)
    adv = _group_normalise(baseline_scores, inverse, sizes, n_groups, epsilon, std_normalize)
    if rank_penalty is not None or std_cal_level == "batch":
        centred = scores - _group_mean(baseline_scores, inverse, n_groups)
        if std_normalize:
            if std_cal_level == "batch":
                std = _batch_std(scores)
            else:
                std = _unbiased_group_std(baseline_scores, inverse, sizes, n_groups)
            centred = centred / (std + epsilon)
        adv = torch.where(_has_contrast(baseline_scores, inverse, n_groups), centred, torch.zeros_like(centred))
    trained = torch.ones_like(scores, dtype=torch.bool)
    if std_threshold is not None:
        trained = _above_std_threshold(baseline_scores, inverse, sizes, n_groups, std_threshold)
    out = _broadcast(adv, inputs.response_mask)
    return out, out, trained


def _check_normalisation(name: str, std_threshold: float | None, std_cal_level: str) -> None:
    """ConfigError for a bad `std_threshold` or `std_cal_level` of group-normalising advantage `name`."""
    if std_threshold is not None and not (isinstance(std_threshold, (int, float)) and math.isfinite(std_threshold)):
        raise ConfigError(f"algorithm.advantage_fn_args.std_threshold must be a number or null for {name!r}, got "
                          f"{std_threshold!r}.")
    if std_cal_level not in ("group", "batch"):
        raise ConfigError(f"algorithm.advantage_fn_args.std_cal_level must be 'group' or 'batch' for {name!r}, got "
                          f"{std_cal_level!r}.")


def _batch_std(scores: torch.Tensor) -> torch.Tensor:
    """Trinity-RFT's `std_cal_level: batch` denominator: the unbiased std of every score (1 for one score)."""
    return scores.std() if scores.numel() > 1 else torch.ones((), dtype=scores.dtype)


def _above_std_threshold(scores: torch.Tensor, inverse: torch.Tensor, sizes: torch.Tensor, n_groups: int,
                         threshold: float) -> torch.Tensor:
    """Per member, whether its group has more than one member and an unbiased std above `threshold`
    (Trinity-RFT's std_threshold: the others leave the step)."""
    std = _unbiased_group_std(scores, inverse, sizes, n_groups)
    # Equal scores have std 0 exactly (float rounding of the mean would leave a trace above 0).
    std = torch.where(_has_contrast(scores, inverse, n_groups), std, torch.zeros_like(std))
    return (sizes > 1) & (std > threshold)


def _unbiased_group_std(scores: torch.Tensor, inverse: torch.Tensor, sizes: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Per response, the unbiased standard deviation of its group's scores."""
    centred = scores - _group_mean(scores, inverse, n_groups)
    return (_group_mean(centred**2, inverse, n_groups) * sizes / (sizes - 1).clamp(min=1)).sqrt()


def _rank_penalised(inputs: AdvantageInputs, scores: torch.Tensor, inverse: torch.Tensor, sizes: torch.Tensor,
                    n_groups: int, penalty: float) -> torch.Tensor:
    """R_j (1 - penalty rank_j / n_g), rank_j: j's place in its group by mean behaviour log-probability."""
    if inputs.behaviour_log_probs is None:
        raise ConfigError("algorithm.advantage_fn_args.rank_penalty ranks responses by their behaviour "
                          "log-probabilities, which this batch lacks; unset rank_penalty")
    likelihood = masked_mean(inputs.behaviour_log_probs, inputs.response_mask, dim=-1)
    # Sort by group, then by likelihood (stable): a response's place within its group is its rank.
    order = torch.argsort(likelihood, stable=True)
    order = order[torch.argsort(inverse[order], stable=True)]
    place = torch.empty_like(order)
    place[order] = torch.arange(order.numel(), device=order.device)
    first = torch.zeros(n_groups, dtype=place.dtype, device=place.device).scatter_reduce(
        0, inverse, place, reduce="amin", include_self=False)
    rank = (place - first[inverse]).to(scores.dtype)
    return scores * (1 - rank / sizes.to(scores.dtype) * penalty)


@declare("advantage", "rloo", groups=True)
@torch.no_grad()
def rloo(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE leave-one-out: the baseline of response i is the mean of the other n_g - 1 in its group.

        A_i = R_i - (sum_{j in g, j != i} R_j) / (n_g - 1) = n_g / (n_g - 1) * (R_i - mean_g(R))
    A group without contrast gives 0. Returns (A, A) broadcast over the response tokens.
    """
    scores = _scores(inputs)
    inverse, sizes, n_groups = _group_index(_group_ids(inputs, "rloo"))
    mean = _group_mean(scores, inverse, n_groups)
    adv = (scores - mean) * sizes / (sizes - 1).clamp(min=1)
    adv = torch.where(_has_contrast(scores, inverse, n_groups), adv, torch.zeros_like(adv))
    out = _broadcast(adv, inputs.response_mask)
    return out, out


@declare("advantage", "opmd", groups=True, checked_by="rfthpc.algorithms.advantage_args:opmd_args")
@torch.no_grad()
def opmd(
    inputs: AdvantageInputs, *, opmd_baseline: str = "mean", tau: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Online policy mirror descent advantage (Trinity-RFT): reward minus a group baseline b_g.

        A_i = R_i - b_g,   b_g = mean_g(R)                                   (opmd_baseline="mean")
                           b_g = tau * log( (1/n_g) sum_{j in g} exp(R_j / tau) )  ("logavgexp")
    tau also scales the matching `opmd` policy loss by 1 / (1 + tau). A group without contrast
    gives 0 (Trinity gives a lone response A = R_i, with no baseline to compare it with).
    Returns (A, A) broadcast over the response tokens.
    """
    opmd_args(opmd_baseline=opmd_baseline, tau=tau)
    scores = _scores(inputs)
    inverse, _, n_groups = _group_index(_group_ids(inputs, "opmd"))
    if opmd_baseline == "mean":
        baseline = _group_mean(scores, inverse, n_groups)
    else:
        scaled = scores / tau
        # Subtracting the group maximum keeps exp() finite for large rewards / small tau.
        peak = torch.full((n_groups,), -math.inf, dtype=scores.dtype, device=scores.device)
        peak = peak.scatter_reduce(0, inverse, scaled, reduce="amax")[inverse]
        mean_exp = _group_mean(torch.exp(scaled - peak), inverse, n_groups)
        baseline = tau * (peak + torch.log(mean_exp))
    adv = torch.where(_has_contrast(scores, inverse, n_groups), scores - baseline, torch.zeros_like(scores))
    out = _broadcast(adv, inputs.response_mask)
    return out, out


@declare("advantage", "reinforce")
@torch.no_grad()
def reinforce(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain REINFORCE: A_i = R_i on every response token (TOPR's default). Returns (A, A)."""
    out = _broadcast(_scores(inputs), inputs.response_mask)
    return out, out


@declare("advantage", "reinforceplusplus", "reinforce++", "reinforce_plus_plus")
@torch.no_grad()
def reinforce_plus_plus(inputs: AdvantageInputs, *, gamma: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted token returns, whitened over the whole batch.

        G_t = r_t + gamma * G_{t'}    over response tokens only (t' = the next one; masked-out tokens,
                                      past EOS or a tool's output between turns, neither add nor break it)
        A   = whiten_{mask}(G) * mask
    Returns (A, G * mask). A batch with a single response token whitens to 0 (veRL raises).
    As veRL 0.9.1; Trinity-RFT discounts at masked positions too (a tool's output counts as time),
    which differs from this with gamma < 1 and holes in the mask: here only the policy's tokens are
    steps.
    """
    rewards = _token_rewards(inputs)
    mask = inputs.response_mask.to(rewards.dtype)
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[-1])):
        running = torch.where(mask[:, t] > 0, rewards[:, t] + gamma * running, running)
        returns[:, t] = running
    returns = torch.where(mask > 0, returns, torch.zeros_like(returns))
    adv = masked_whiten(returns, mask) * mask
    return adv, returns


@declare("advantage", "ppo", "gae", critic=True)
@torch.no_grad()
def ppo(inputs: AdvantageInputs, *, gamma: float = 1.0, lam: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation from critic values (PPO), token level.

        delta_t = r_t + gamma * V_{t'} - V_t              (t' = next response token; V = 0 past the end)
        A_t     = delta_t + gamma * lam * A_{t'}
        returns = (A + V) * mask;  advantages = whiten_{mask}(A) * mask
    Masked-out tokens (e.g. tool output inside a response) are skipped: they carry V and A through
    unchanged, and what they hold (even inf or NaN) never reaches a result. veRL's returns also hold
    A + V outside the mask, where nothing reads them; here they are 0 there, as for every estimator.
    Returns (advantages, returns).
    """
    if inputs.values is None:
        raise ConfigError(
            "algorithm.advantage_fn: 'ppo' (GAE) needs critic values, but this run has no critic; "
            "use algorithm_type ppo (which trains a critic) or a critic-free advantage_fn such as grpo."
        )
    rewards, values = _token_rewards(inputs), inputs.values
    on = inputs.response_mask.bool()
    mask = on.to(rewards.dtype)
    next_value = torch.zeros_like(rewards[:, 0])
    next_adv = torch.zeros_like(rewards[:, 0])
    adv = torch.zeros_like(rewards)
    for t in reversed(range(rewards.shape[-1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        step_adv = delta + gamma * lam * next_adv
        # where, not mask * x + (1 - mask) * y: 0 * NaN is NaN.
        next_value = torch.where(on[:, t], values[:, t], next_value)
        next_adv = torch.where(on[:, t], step_adv, next_adv)
        adv[:, t] = next_adv
    returns = torch.where(on, adv + values, torch.zeros_like(adv))
    return masked_whiten(adv, mask) * mask, returns

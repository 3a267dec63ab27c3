"""More group-relative advantage estimators: the ones veRL 0.9.1 names beyond grpo and rloo, ROLL's
LitePPO normalisation, and Trinity-RFT's asymre and rec.

They follow `advantages`' conventions: an `AdvantageInputs` in, `(advantages, returns)` out, both
(B, T) and zero outside the response mask; R_b is the sequence reward (or the sum of the token-level
rewards of its response tokens); a group without contrast (a lone response, or all scores exactly
equal) gets advantage exactly 0 before any batch-wide whitening, where veRL gives a lone response its
reward (see `advantages`).
"""

from __future__ import annotations

import math

import torch

from rfthpc.algorithms.advantage_args import lite_ppo_args
from rfthpc.algorithms.advantages import (
    AdvantageInputs,
    _broadcast,
    _group_ids,
    _group_index,
    _group_mean,
    _group_normalise,
    _has_contrast,
    _scores,
    _token_rewards,
)
from rfthpc.algorithms.aggregation import masked_whiten
from rfthpc.algorithms.declare import declare
from rfthpc.errors import ConfigError


def _group_sum(values: torch.Tensor, inverse: torch.Tensor, n_groups: int) -> torch.Tensor:
    """(n_groups, ...) sums of `values` (B, ...) over the members of each group."""
    out = torch.zeros((n_groups, *values.shape[1:]), dtype=values.dtype, device=values.device)
    return out.index_add_(0, inverse, values)


def _unbiased_std(adv: torch.Tensor, inverse: torch.Tensor, sizes: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Per response, the unbiased standard deviation of its group's scores, from adv = R - mean_g(R)."""
    return (_group_mean(adv**2, inverse, n_groups) * sizes / (sizes - 1).clamp(min=1)).sqrt()


def _outcome(inputs: AdvantageInputs, adv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, A) with the per-response advantage broadcast over the response tokens."""
    out = _broadcast(adv, inputs.response_mask)
    return out, out


def _whitened(inputs: AdvantageInputs, adv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, A) with A = whiten_{mask}(adv broadcast over the response tokens) * mask, as veRL's
    masked_whiten (unbiased variance, eps 1e-8; a batch of one token whitens to 0 where veRL raises)."""
    mask = inputs.response_mask.to(adv.dtype)
    out = masked_whiten(_broadcast(adv, inputs.response_mask), mask) * mask
    return out, out


@declare("advantage", "opo", groups=True)
@torch.no_grad()
def opo(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """On-policy RL with the optimal reward baseline (OPO): the group baseline weights each reward by
    its response's length.

        b_g = sum_{j in g} L_j R_j / sum_{j in g} L_j,   L_j = number of response tokens of j
        A_i = R_i - b_g
    A group without contrast gives 0. Returns (A, A) broadcast over the response tokens.
    """
    scores = _scores(inputs)
    inverse, _, n_groups = _group_index(_group_ids(inputs, "opo"))
    lengths = inputs.response_mask.bool().sum(dim=-1).to(scores.dtype)
    # A group of empty responses only: no token to train, so any finite baseline will do.
    baseline = (_group_sum(lengths * scores, inverse, n_groups)
                / _group_sum(lengths, inverse, n_groups).clamp(min=1))[inverse]
    adv = torch.where(_has_contrast(scores, inverse, n_groups), scores - baseline, torch.zeros_like(scores))
    return _outcome(inputs, adv)


@declare("advantage", "gpg", groups=True)
@torch.no_grad()
def gpg(inputs: AdvantageInputs, *, f_norm: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Group policy gradient (GPG): the group-centred reward, scaled up by the share of the batch
    that carries a reward.

        A_i = alpha * (R_i - mean_g(R)) / f_norm,   alpha = B / max(#{b : R_b != 0}, 1)
    over the whole batch of B responses. A group without contrast gives 0. Returns (A, A) broadcast
    over the response tokens.
    """
    if not f_norm > 0:
        raise ConfigError(f"algorithm.advantage_fn_args.f_norm must be > 0, got {f_norm}; the default is 1.0.")
    scores = _scores(inputs)
    inverse, _, n_groups = _group_index(_group_ids(inputs, "gpg"))
    alpha = scores.numel() / max(int(torch.count_nonzero(scores)), 1)
    adv = alpha * (scores - _group_mean(scores, inverse, n_groups)) / f_norm
    adv = torch.where(_has_contrast(scores, inverse, n_groups), adv, torch.zeros_like(adv))
    return _outcome(inputs, adv)


@declare("advantage", "grpo_passk", groups=True)
@torch.no_grad()
def grpo_passk(
    inputs: AdvantageInputs, *, epsilon: float = 1e-6, std_normalize: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k training (GRPO-style): only the best response of each group is rewarded, by its margin
    over the runner-up.

        A_i = (R_max - R_second) / (std_g(R) + epsilon)   for i the best of g (the first, on a tie)
        A_i = 0                                            for the others
    without the division when not std_normalize; std_g is the unbiased standard deviation. A group
    without contrast gives 0 (veRL refuses a group of one). Returns (A, A) broadcast over the
    response tokens.
    """
    scores = _scores(inputs)
    inverse, sizes, n_groups = _group_index(_group_ids(inputs, "grpo_passk"))
    index = torch.arange(scores.numel(), device=scores.device)
    init = torch.zeros(n_groups, dtype=scores.dtype, device=scores.device)
    peak = init.scatter_reduce(0, inverse, scores, reduce="amax", include_self=False)[inverse]
    first_best = torch.full((n_groups,), scores.numel(), dtype=index.dtype, device=scores.device)
    first_best = first_best.scatter_reduce(0, inverse, torch.where(scores == peak, index, scores.numel()),
                                           reduce="amin")[inverse]
    best = index == first_best
    others = torch.where(best, torch.full_like(scores, -torch.inf), scores)
    runner_up = init.scatter_reduce(0, inverse, others, reduce="amax", include_self=False)[inverse]
    # A lone response's runner-up is -inf; it has no contrast, so its margin is not taken.
    margin = torch.where(best & _has_contrast(scores, inverse, n_groups), peak - runner_up, torch.zeros_like(scores))
    if std_normalize:
        std = _unbiased_std(scores - _group_mean(scores, inverse, n_groups), inverse, sizes, n_groups)
        margin = margin / (std + epsilon)
    return _outcome(inputs, margin)


@declare("advantage", "reinforce_plus_plus_baseline", "reinforceplusplus_baseline", "reinforce++_baseline",
         groups=True)
@torch.no_grad()
def reinforce_plus_plus_baseline(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group baseline: the group-centred reward on every response token, whitened
    over the batch's response tokens.

        A = whiten_{mask}(R_i - mean_g(R)) * mask
    A group without contrast enters the whitening with 0 (veRL: a lone response with R_i).
    Returns (A, A).
    """
    scores = _scores(inputs)
    inverse, sizes, n_groups = _group_index(_group_ids(inputs, "reinforce_plus_plus_baseline"))
    adv = _group_normalise(scores, inverse, sizes, n_groups, 0.0, std_normalize=False)
    return _whitened(inputs, adv)


@declare("advantage", "gdpo", groups=True, reward_components=True)
@torch.no_grad()
def gdpo(
    inputs: AdvantageInputs,
    *,
    reward_keys: list[str] | None = None,
    reward_weights: list[float] | None = None,
    epsilon: float = 1e-6,
    std_normalize: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group reward-decoupled normalisation (GDPO): each reward component is normalised within the
    group on its own, so a large component cannot drown a small one; then they are combined.

        A_k,i = (c_k,i - mean_g(c_k)) / (std_g(c_k) + epsilon)   (GRPO on component k; 0 without contrast)
        A     = whiten_{mask}(sum_k w_k A_k,i) * mask
    The components are the named values of the reward function's dict ({"accuracy": 1, "format": 0.5});
    `reward_keys` picks them (veRL's gdpo_reward_keys; default: every component in the batch),
    `reward_weights` weighs them in the order of `reward_keys` (default 1 each). A response without a
    component counts 0 for it. When the batch carries no components (the reward function returns a
    number) the reward is the one component. Returns (A, A).
    """
    components = inputs.reward_components or {}
    if reward_keys is not None:
        if isinstance(reward_keys, str) or not reward_keys:
            raise ConfigError("algorithm.advantage_fn_args.reward_keys must be a non-empty list of component "
                              f"names, got {reward_keys!r}; or leave it out to use every component.")
        missing = [k for k in reward_keys if k not in components]
        if missing:
            raise ConfigError(
                f"algorithm.advantage_fn_args.reward_keys names {missing}, which no response's reward has; "
                f"the reward function returned {sorted(components) or 'a plain number (no components)'}; "
                "name those, or leave reward_keys out."
            )
    keys = list(reward_keys) if reward_keys is not None else sorted(components)
    if reward_weights is not None and (reward_keys is None or isinstance(reward_weights, str)
                                       or len(reward_weights) != len(keys)):
        raise ConfigError(
            f"algorithm.advantage_fn_args.reward_weights: {reward_weights!r} must hold one weight per name of "
            f"reward_keys ({reward_keys}), in the same order; set both, or leave reward_weights out."
        )
    values = [components[k] for k in keys] if keys else [_scores(inputs)]
    weights = [float(w) for w in reward_weights] if reward_weights is not None else [1.0] * len(values)
    inverse, sizes, n_groups = _group_index(_group_ids(inputs, "gdpo"))
    dtype = inputs.rewards.dtype
    total = torch.zeros_like(inputs.rewards)
    for w, c in zip(weights, values, strict=True):
        total = total + w * _group_normalise(c.to(dtype), inverse, sizes, n_groups, epsilon, std_normalize)
    return _whitened(inputs, total)


@declare("advantage", "lite_ppo", "liteppo", groups=True, drops_responses=True,
         checked_by="rfthpc.algorithms.advantage_args:lite_ppo_args")
@torch.no_grad()
def lite_ppo(
    inputs: AdvantageInputs,
    *,
    norm_mean_type: str | None = "group",
    norm_std_type: str | None = "batch",
    epsilon: float = 1e-6,
    reward_clip: float | None = None,
    whiten_advantages: bool = False,
    advantage_clip: float | None = None,
    difficulty_mask: bool = False,
    difficulty_low_threshold: float = 0.1,
    difficulty_high_threshold: float = 0.95,
    max_len_mask: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ROLL's reward normalisation; by default LitePPO's: the group mean, the batch standard deviation.

        N_i = (R_i - m_i) / (s_i + epsilon)     (N_i = R_i - m_i when norm_std_type is None)
        m_i = mean_g(R) ("group"), mean over the batch ("batch") or 0 (None)
        s_i = std_g(R)  ("group"), std over the batch's responses ("batch")
    with unbiased standard deviations, as ROLL's `norm_mean_type` / `norm_std_type` (ROLL's "running"
    statistics are not offered). With a group statistic, a group without contrast gives 0; group/group
    is grpo. The rest of ROLL's advantage pipeline (its `reinforce` and `grpo` estimators, gamma 1)
    follows, each step off unless set:
        N_i <- clip(N_i, -reward_clip, reward_clip)                 (ROLL's reward_clip)
        A   =  N_i on every response token of i
        A   <- whiten_{mask}(A) * mask                              (whiten_advantages: over the batch's tokens)
        A   <- clip(A, -advantage_clip, advantage_clip)             (ROLL's advantage_clip)
    ROLL's RLVR loss masks then leave responses out of the step's loss (every term and denominator;
    the advantages above are computed over the whole batch, as in ROLL):
        difficulty_mask: keep i only if low < mean_g(R) < high        (groups of one response are kept)
        max_len_mask:    keep i only if it was not cut at the token limit
    with low, high = difficulty_low_threshold, difficulty_high_threshold (ROLL's 0.1 and 0.95).
    Returns (A, A) and the (B,) responses trained.
    """
    lite_ppo_args(norm_mean_type=norm_mean_type, norm_std_type=norm_std_type, reward_clip=reward_clip,
                  advantage_clip=advantage_clip, difficulty_mask=difficulty_mask,
                  difficulty_low_threshold=difficulty_low_threshold,
                  difficulty_high_threshold=difficulty_high_threshold)
    scores = _scores(inputs)
    inverse, sizes, n_groups = _group_index(_group_ids(inputs, "lite_ppo"))
    adv = roll_normalise(scores, (inverse, sizes, n_groups), norm_mean_type, norm_std_type, epsilon)
    out = roll_pipeline(inputs, adv, reward_clip, whiten_advantages, advantage_clip)
    return out, out, _roll_loss_mask(inputs, scores, inverse, sizes, n_groups, difficulty_mask,
                                     (difficulty_low_threshold, difficulty_high_threshold), max_len_mask)


def roll_normalise(scores: torch.Tensor, groups: tuple[torch.Tensor, torch.Tensor, int], norm_mean_type: str | None,
                   norm_std_type: str | None, epsilon: float) -> torch.Tensor:
    """(B,) `scores` normalised as ROLL's reward normalisation (see `lite_ppo`) within `groups` (each
    response's group index, the groups' sizes and number, as `_group_index` gives them)."""
    inverse, sizes, n_groups = groups
    if norm_mean_type == "group":
        mean = _group_mean(scores, inverse, n_groups)
    elif norm_mean_type == "batch":
        mean = scores.mean().expand_as(scores)
    else:
        mean = torch.zeros_like(scores)
    adv = scores - mean
    if norm_std_type == "group":
        adv = adv / (_unbiased_std(scores - _group_mean(scores, inverse, n_groups), inverse, sizes, n_groups)
                     + epsilon)
    elif norm_std_type == "batch":
        centred = scores - scores.mean()
        adv = adv / ((centred**2).sum() / max(scores.numel() - 1, 1)).sqrt().add(epsilon)
    if "group" in (norm_mean_type, norm_std_type):
        adv = torch.where(_has_contrast(scores, inverse, n_groups), adv, torch.zeros_like(adv))
    return adv


def roll_pipeline(inputs: AdvantageInputs, adv: torch.Tensor, reward_clip: float | None, whiten_advantages: bool,
                  advantage_clip: float | None) -> torch.Tensor:
    """ROLL's advantage pipeline after its normalisation (see `lite_ppo`): the (B,) normalised scores
    clipped, broadcast over the response tokens, whitened, clipped again, each step off unless set."""
    if reward_clip is not None:
        adv = adv.clamp(-reward_clip, reward_clip)
    out = _whitened(inputs, adv)[0] if whiten_advantages else _broadcast(adv, inputs.response_mask)
    if advantage_clip is not None:
        out = out.clamp(-advantage_clip, advantage_clip)
    return out


def _roll_loss_mask(inputs: AdvantageInputs, scores: torch.Tensor, inverse: torch.Tensor, sizes: torch.Tensor,
                    n_groups: int, difficulty: bool, bounds: tuple[float, float], max_len: bool) -> torch.Tensor:
    """(B,) bool: the responses ROLL's RLVR masks (`get_sample_level_mask`) keep in the loss."""
    kept = torch.ones_like(scores, dtype=torch.bool)
    if difficulty:
        low, high = bounds
        mean = _group_mean(scores, inverse, n_groups)
        kept &= ((mean > low) & (mean < high)) | (sizes == 1)
    if max_len:
        if inputs.truncated is None:
            raise ConfigError("algorithm.advantage_fn_args.max_len_mask needs the responses' token limit: set "
                              "model.max_response_tokens.")
        kept &= ~inputs.truncated.bool()
    return kept


@declare("advantage", "optimal_token_baseline", groups=True, forward_outputs=("sum_pi_squared",),
         rollout_is_weights=True)
@torch.no_grad()
def optimal_token_baseline(
    inputs: AdvantageInputs, *, handle_zero_tail: bool = True, epsilon: float = 1e-8
) -> tuple[torch.Tensor, torch.Tensor]:
    """Optimal token baseline (veRL's optimal_token_baseline): a baseline per position, weighting each
    response's return by how much gradient its path has carried so far.

        G_t = sum_{t' >= t} m_t' r_t'                      (reward-to-go over response tokens)
        w_t = 1 - 2 pi(y_t) + sum_v pi_v^2                 (= ||grad_logits log pi(y_t)||^2)
        W_t = sum_{t' <= t} m_t' w_t'                      (the path's accumulated variance)
        B_t = sum_{i in g} m_it G_it W_it / (sum_{i in g} m_it W_it + epsilon)
        A_t = (G_t - B_t) * m_t
    pi is the trained policy before this step's update (its log-probabilities and sum_v pi_v^2 come
    from one forward pass of the trainer). The responses of a group are compared at the same position
    t; `tir_optimal_token_baseline` compares them at their k-th response token instead (multi-turn).
    With rollout importance weights rho_t (algorithm.rollout_correction: those of the policy at the
    step's start against the behaviour policy), w_t is scaled by rho_t^2, as veRL does.
    With handle_zero_tail, positions of a group's single longest response from the second longest's
    token count on get B = 0 (no other response to compare with there). A group without contrast
    gives 0 (veRL: A = G for a lone response). Returns (A, G * mask).
    """
    return _optimal_token_baseline(inputs, "optimal_token_baseline", handle_zero_tail, epsilon, by_token=False)


@declare("advantage", "tir_optimal_token_baseline", groups=True, forward_outputs=("sum_pi_squared",),
         rollout_is_weights=True)
@torch.no_grad()
def tir_optimal_token_baseline(
    inputs: AdvantageInputs, *, handle_zero_tail: bool = True, epsilon: float = 1e-8
) -> tuple[torch.Tensor, torch.Tensor]:
    """The optimal token baseline for multi-turn responses (veRL's tir_optimal_token_baseline): as
    `optimal_token_baseline`, but the responses of a group are compared at their k-th response token
    (tool output between turns skipped), so B_k, the tail cut and A are indexed by k, not by position.
    A group without contrast gives 0 (veRL: A = G for a group with one non-empty response).
    Returns (A, G * mask).
    """
    return _optimal_token_baseline(inputs, "tir_optimal_token_baseline", handle_zero_tail, epsilon, by_token=True)


def _optimal_token_baseline(
    inputs: AdvantageInputs, name: str, handle_zero_tail: bool, epsilon: float, by_token: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The optimal token baseline, its group sums taken per position or (by_token) per response token k."""
    if inputs.old_log_probs is None or inputs.sum_pi_squared is None:
        raise ConfigError(
            f"algorithm.advantage_fn: {name!r} needs the policy's log-probabilities and sum_pi_squared from the "
            "trainer's forward pass, and this batch has none; the trainer computes them for an advantage_fn "
            "that declares forward_outputs=('sum_pi_squared',)."
        )
    on = inputs.response_mask.bool()
    rewards = _token_rewards(inputs)
    zero = torch.zeros_like(rewards)
    returns = torch.where(on, torch.where(on, rewards, zero).flip(-1).cumsum(-1).flip(-1), zero)
    w = 1 - 2 * inputs.old_log_probs.exp() + inputs.sum_pi_squared
    if inputs.rollout_is_weights is not None:
        # veRL's correction under truncated importance sampling: B_t* = sum G rho^2 W / sum rho^2 W.
        w = w * inputs.rollout_is_weights.to(w.dtype) ** 2
    cumulative = torch.where(on, w, torch.zeros_like(w)).to(rewards.dtype).cumsum(-1)
    weight = torch.where(on, cumulative, zero)
    scores = _scores(inputs)
    inverse, _, n_groups = _group_index(_group_ids(inputs, name))
    width = rewards.shape[-1]
    # Where each token is compared: its position, or its rank k among its row's response tokens.
    slot = (on.long().cumsum(-1) - 1).clamp(min=0) if by_token else torch.arange(width, device=on.device).expand_as(on)
    flat = (inverse.unsqueeze(-1) * width + slot).flatten()
    sums = torch.zeros(2, n_groups * width, dtype=rewards.dtype, device=rewards.device)
    sums[0].index_add_(0, flat, (returns * weight).flatten())
    sums[1].index_add_(0, flat, weight.flatten())
    baseline = (sums[0] / (sums[1] + epsilon))[flat].view_as(rewards)
    if handle_zero_tail:
        lengths = on.sum(-1)
        init = torch.zeros(n_groups, dtype=lengths.dtype, device=lengths.device)
        longest = init.scatter_reduce(0, inverse, lengths, reduce="amax", include_self=False)[inverse]
        at_longest = _group_sum((lengths == longest).to(lengths.dtype), inverse, n_groups)[inverse]
        second = init.scatter_reduce(0, inverse, torch.where(lengths == longest, -1, lengths), reduce="amax",
                                     include_self=False)[inverse]
        alone = (lengths == longest) & (at_longest == 1) & (second >= 0)
        # Without by_token, veRL cuts at the second longest's token count taken as a position.
        tail = alone.unsqueeze(-1) & (slot >= second.unsqueeze(-1))
        baseline = torch.where(tail, zero, baseline)
    adv = torch.where(on, returns - baseline, zero)
    adv = torch.where(_has_contrast(scores, inverse, n_groups).unsqueeze(-1), adv, zero)
    return adv, returns


@declare("advantage", "asymre", groups=True)
@torch.no_grad()
def asymre(inputs: AdvantageInputs, *, baseline_shift: float = -0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """Asymmetric REINFORCE (AsymRE, Trinity-RFT's `asymre`): the group mean shifted by a constant.

        A_i = R_i - (mean_g(R) + baseline_shift)
    A negative shift (Trinity's default -0.1) lowers the baseline, so positive rewards weigh more
    than negative ones (AsymRE's remedy for training off-policy). A group whose scores are all equal gets A = -baseline_shift
    exactly, as in Trinity (the shift is the point; no rounding noise of R - mean survives). A lone
    response gets 0, where Trinity's baseline 0 gives it A = R: it has no group to be compared with.
    Returns (A, A) broadcast over the response tokens.
    """
    if isinstance(baseline_shift, bool) or not (isinstance(baseline_shift, (int, float))
                                                and math.isfinite(baseline_shift)):
        raise ConfigError(f"algorithm.advantage_fn_args.baseline_shift must be a finite number for 'asymre', got "
                          f"{baseline_shift!r}; Trinity-RFT's default is -0.1.")
    scores = _scores(inputs)
    inverse, sizes, n_groups = _group_index(_group_ids(inputs, "asymre"))
    centred = torch.where(_has_contrast(scores, inverse, n_groups),
                          scores - _group_mean(scores, inverse, n_groups), torch.zeros_like(scores))
    adv = torch.where(sizes > 1, centred - baseline_shift, torch.zeros_like(scores))
    return _outcome(inputs, adv)


REC_DROPS = (None, "balance")
"""`rec`'s drop strategies: none, or balance (drop negatives until they are no more than the positives)."""


@declare("advantage", "rec", groups=True)
@torch.no_grad()
def rec(
    inputs: AdvantageInputs, *, epsilon: float = 1e-6, std_normalize: bool = False, drop: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The REC family's advantage (Trinity-RFT's `rec`): group-centred rewards, optionally balanced.

    A response is positive when R_i >= mean_g(R), negative otherwise. With drop="balance", a group
    with more negatives than positives has randomly chosen negatives dropped until the counts are
    equal; a dropped response gets A = 0 and stays in the batch (as in Trinity: its tokens still
    count in the loss's denominator and in any KL or entropy term). Over the kept responses K_g:
        A_i = R_i - mean_K(R)                                   (std_normalize false, the default)
        A_i = (R_i - mean_K(R)) / (std_K(R) + epsilon)          (std_normalize; population std)
    A group without contrast (a lone response, or all scores equal) gives 0 (Trinity raises on a lone
    response). The draw uses torch's global generator (seeded by the trainer).
    Returns (A, A) broadcast over the response tokens.
    """
    if drop not in REC_DROPS:
        raise ConfigError(f"algorithm.advantage_fn_args.drop: {drop!r} is not a 'rec' choice; use null or 'balance'.")
    if not epsilon >= 0:
        raise ConfigError(f"algorithm.advantage_fn_args.epsilon must be >= 0 for 'rec', got {epsilon}.")
    scores = _scores(inputs)
    inverse, sizes, n_groups = _group_index(_group_ids(inputs, "rec"))
    kept = torch.ones_like(scores, dtype=torch.bool)
    if drop == "balance":
        kept = _balanced(scores, inverse, sizes, n_groups)
    weight = kept.to(scores.dtype)
    count = _group_sum(weight, inverse, n_groups)[inverse]
    mean = _group_sum(weight * scores, inverse, n_groups)[inverse] / count
    adv = scores - mean
    if std_normalize:
        std = (_group_sum(weight * adv**2, inverse, n_groups)[inverse] / count).sqrt()
        adv = adv / (std + epsilon)
    adv = torch.where(kept & _has_contrast(scores, inverse, n_groups), adv, torch.zeros_like(adv))
    return _outcome(inputs, adv)


def _balanced(scores: torch.Tensor, inverse: torch.Tensor, sizes: torch.Tensor, n_groups: int) -> torch.Tensor:
    """(B,) bool: the responses kept when each group drops random negatives (R < mean_g) until it has
    no more negatives than positives (R >= mean_g)."""
    negative = scores < _group_mean(scores, inverse, n_groups)
    n_negative = _group_sum(negative.long(), inverse, n_groups)[inverse]
    excess = (2 * n_negative - sizes).clamp(min=0)
    # Each negative's rank among its group's negatives in a random order; the first `excess` go.
    noise = torch.rand(scores.shape, device=scores.device)
    same = (inverse.unsqueeze(0) == inverse.unsqueeze(1)) & negative.unsqueeze(0)
    rank = (same & (noise.unsqueeze(0) < noise.unsqueeze(1))).sum(-1)
    return ~(negative & (rank < excess))

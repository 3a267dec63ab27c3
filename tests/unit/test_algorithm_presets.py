"""Algorithm presets: every name resolves, and the derived flags match Trinity-RFT's classes."""

from pathlib import Path

import pytest

from rfthpc.algorithms import (
    ADVANTAGE_FNS,
    ALGORITHM_PRESETS,
    ENTROPY_LOSS_FNS,
    KL_FNS,
    LOSS_AGG_MODES,
    POLICY_LOSS_FNS,
    needs_critic,
    needs_greedy_baseline,
    needs_groups,
    needs_reference,
)


@pytest.mark.parametrize("algorithm_type", sorted(ALGORITHM_PRESETS))
def test_preset_names_resolve_and_args_bind(algorithm_type):
    preset = ALGORITHM_PRESETS[algorithm_type]
    if preset["advantage_fn"] is not None:
        ADVANTAGE_FNS.bind(preset["advantage_fn"], preset.get("advantage_fn_args"))
    POLICY_LOSS_FNS.bind(preset["policy_loss_fn"], preset.get("policy_loss_fn_args"))
    KL_FNS.get(preset["kl_penalty_fn"])
    KL_FNS.get(preset["kl_loss_fn"])
    ENTROPY_LOSS_FNS.get(preset["entropy_loss_fn"])
    assert preset["loss_agg_mode"] in LOSS_AGG_MODES
    assert needs_groups(preset["advantage_fn"]) <= (preset["repeat_times"] > 1)


@pytest.mark.parametrize(
    ("algorithm_type", "advantage_fn", "policy_loss_fn", "kl_loss_fn", "repeat_times", "critic", "reference", "groups"),
    [
        ("ppo", "ppo", "ppo", "k2", 1, True, True, False),
        ("grpo", "grpo", "ppo", "k2", 2, False, True, True),
        ("grpo_verl", "grpo", "ppo", "k2", 2, False, True, True),
        ("dapo", "grpo", "ppo", "none", 16, False, False, True),
        ("reinforceplusplus", "reinforceplusplus", "ppo", "k2", 2, False, True, False),
        ("rloo", "rloo", "ppo", "k2", 2, False, True, True),
        ("opmd", "opmd", "opmd", "k2", 2, False, True, True),
        ("topr", "reinforce", "topr", "k2", 2, False, True, False),
        ("cispo", "grpo", "cispo", "k2", 2, False, True, True),
        ("m2po", "grpo", "m2po", "none", 8, False, False, True),
        ("asymre", "asymre", "opmd", "none", 2, False, False, True),
        ("sppo", "opmd", "sppo", "none", 2, False, False, True),
        ("rec", "rec", "rec", "none", 2, False, False, True),
        ("sft", None, "sft", "none", 1, False, False, False),
    ],
)
def test_trinity_defaults(
    algorithm_type, advantage_fn, policy_loss_fn, kl_loss_fn, repeat_times, critic, reference, groups
):
    preset = ALGORITHM_PRESETS[algorithm_type]
    assert preset["advantage_fn"] == advantage_fn
    assert preset["policy_loss_fn"] == policy_loss_fn
    assert preset["kl_loss_fn"] == kl_loss_fn
    assert preset["kl_penalty_fn"] == "none"
    assert preset["repeat_times"] == repeat_times
    flags = (needs_critic(preset["advantage_fn"]), needs_reference(preset["kl_penalty_fn"], preset["kl_loss_fn"]),
             needs_groups(preset["advantage_fn"]))
    assert flags == (critic, reference, groups)


def test_m2po_preset_is_trinitys():
    """Trinity-RFT's M2POAlgorithm: no reference model, no entropy term; its loss reads the behaviour
    policy's log-probabilities (what Trinity's bypass_old_logprobs: true, which it requires, asks for)."""
    m2po = ALGORITHM_PRESETS["m2po"]
    assert (m2po["entropy_loss_fn"], m2po["loss_agg_mode"]) == ("none", "token-mean")
    assert POLICY_LOSS_FNS.needs(m2po["policy_loss_fn"]).old_log_prob == "behaviour"


@pytest.mark.parametrize("algorithm_type", ["asymre", "sppo", "rec"])
def test_trinitys_presets_without_entropy_term(algorithm_type):
    """Trinity-RFT's AsymREAlgorithm, sPPOAlgorithm and RECAlgorithm: no entropy term, token-mean,
    and no function arguments of their own (Trinity's functions' defaults apply)."""
    preset = ALGORITHM_PRESETS[algorithm_type]
    assert (preset["entropy_loss_fn"], preset["loss_agg_mode"]) == ("none", "token-mean")
    assert not any(key.endswith("_args") for key in preset)


def test_sppo_compares_with_the_policy_at_the_start_of_the_step():
    assert POLICY_LOSS_FNS.needs("sppo").old_log_prob == "proximal"


def test_flags_after_user_overrides():
    assert not needs_reference(kl_penalty_fn="none", kl_loss_fn="none")
    assert needs_reference(kl_penalty_fn="k3", kl_loss_fn="none")
    assert needs_critic("gae") and not needs_critic("grpo")
    assert needs_groups("rloo") and not needs_groups("reinforceplusplus")


@pytest.mark.parametrize(("algorithm_type", "expected"), [
    ("dr_grpo", {"advantage_fn": "grpo", "advantage_fn_args": {"std_normalize": False}, "policy_loss_fn": "ppo",
                 "loss_agg_mode": "seq-mean-token-sum-norm", "kl_loss_fn": "none"}),
    ("lite_ppo", {"advantage_fn": "lite_ppo", "policy_loss_fn": "ppo", "loss_agg_mode": "token-mean"}),
    ("gspo", {"advantage_fn": "grpo", "policy_loss_fn": "gspo", "loss_agg_mode": "seq-mean-token-mean",
              "policy_loss_fn_args": {"clip_range_low": 3e-4, "clip_range_high": 4e-4}, "kl_loss_fn": "none"}),
    ("gmpo", {"policy_loss_fn": "geo_mean", "policy_loss_fn_args": {"clip_range": 0.4},
              "loss_agg_mode": "seq-mean-token-mean"}),
    ("sapo", {"policy_loss_fn": "sapo", "policy_loss_fn_args": {"tau_pos": 1.0, "tau_neg": 1.05},
              "loss_agg_mode": "seq-mean-token-mean"}),
    ("decoupled_ppo", {"advantage_fn": "grpo", "policy_loss_fn": "decoupled_ppo"}),
    ("reinforce_plus_plus_baseline", {"advantage_fn": "reinforce_plus_plus_baseline", "repeat_times": 4,
                                      "kl_loss_fn": "k2", "kl_loss_fn_args": {"kl_coef": 0.001}}),
])
def test_the_papers_settings(algorithm_type, expected):
    preset = ALGORITHM_PRESETS[algorithm_type]
    assert {k: preset[k] for k in expected} == expected


def test_dapo_preset_is_dapo():
    """Clip-higher (0.2 / 0.28), token-level loss, dynamic sampling on the accuracy, the soft overlong
    penalty with its defaults (a fifth of the response limit, factor 1), no KL term."""
    dapo = ALGORITHM_PRESETS["dapo"]
    assert dapo["policy_loss_fn_args"] == {"clip_range_low": 0.2, "clip_range_high": 0.28}
    assert dapo["loss_agg_mode"] == "token-mean"
    assert dapo["filter_groups"] == {"enable": True, "metric": "acc"}
    assert dapo["overlong_buffer"] == {"enable": True}
    assert (dapo["kl_loss_fn"], dapo["kl_penalty_fn"]) == ("none", "none")
    assert dapo["repeat_times"] == 16
    # Trinity-RFT's dapo preset clips at 0.2 on both sides: said where the presets and the docs list it.
    from rfthpc.algorithms import presets
    docs = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    assert "where Trinity's dapo preset clips at 0.2 on both sides" in " ".join(presets.__doc__.split())
    assert "Trinity-RFT's dapo preset clips at 0.2 on both sides" in docs


def test_remax_preset_follows_verl_recipe():
    """veRL's examples/remax_trainer: 4 samples per task, k1 KL in the reward at 0.001, no KL loss."""
    remax = ALGORITHM_PRESETS["remax"]
    assert (remax["advantage_fn"], remax["policy_loss_fn"], remax["repeat_times"]) == ("remax", "ppo", 4)
    assert (remax["kl_penalty_fn"], remax["kl_penalty_fn_args"], remax["kl_loss_fn"]) == ("k1", {"kl_coef": 0.001},
                                                                                         "none")
    assert needs_greedy_baseline("remax") and not needs_greedy_baseline("grpo") and not needs_greedy_baseline(None)
    assert needs_reference(remax["kl_penalty_fn"], remax["kl_loss_fn"]) and not needs_groups("remax")

"""veRL's algorithm settings (policy loss, its arguments, aggregation, KL loss and penalty,
advantage estimator) in a Trinity-RFT config's `trainer.trainer_config`, or on the command line,
become rfthpc's `algorithm.*` settings, and the config validates."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.config import load_config
from rfthpc.config.settings import trainer_settings
from rfthpc.errors import ConfigError
from tests.config.conftest import write
from tests.config.test_bad_input import base  # noqa: F401  (fixture)

# veRL 0.9.1's actor and algorithm blocks as a dumped config holds them (defaults included), with
# a few values changed: clip-higher, Dr. GRPO's aggregation, a straight-through KL loss, no std.
VERL_ALGORITHM = """
trainer:
  trainer_config:
    actor_rollout_ref:
      actor:
        policy_loss:
          _target_: verl.workers.config.PolicyLossConfig
          loss_mode: {loss_mode}
          clip_cov_ratio: 0.0002
          clip_cov_lb: 1.0
          clip_cov_ub: 5.0
          kl_cov_ratio: 0.0002
          ppo_kl_coef: 0.1
          dro_beta: null
        clip_ratio: 0.2
        clip_ratio_low: 0.2
        clip_ratio_high: 0.28
        clip_ratio_c: 3.0
        tau_pos: 1.0
        tau_neg: 1.05
        loss_agg_mode: seq-mean-token-sum-norm
        loss_scale_factor: null
        use_kl_loss: true
        kl_loss_coef: 0.01
        kl_loss_type: k3+
    algorithm:
      adv_estimator: grpo_vectorized
      norm_adv_by_std_in_grpo: false
      gamma: 1.0
      lam: 1.0
      use_kl_in_reward: false
      kl_penalty: kl
      kl_ctrl:
        type: fixed
        kl_coef: 0.001
        horizon: 10000
        target_kl: 0.1
"""


def test_verls_vanilla_is_clipped_ppo_and_every_setting_reaches_its_key(tmp_path: Path, base: str) -> None:  # noqa: F811
    loaded = load_config(write(tmp_path, base + VERL_ALGORITHM.format(loss_mode="vanilla")))
    alg = loaded.config.algorithm
    assert alg.policy_loss_fn == "ppo"
    # The settings PPO reads; the other losses' (tau_*, clip_cov_*, ...) have no effect, as in veRL.
    assert alg.policy_loss_fn_args == {"clip_range": 0.2, "clip_range_low": 0.2, "clip_range_high": 0.28,
                                       "clip_ratio_c": 3.0}
    assert alg.loss_agg_mode == "seq-mean-token-sum-norm"
    assert alg.loss_scale_factor == 32  # veRL's null: the default, model.max_response_tokens
    assert (alg.kl_loss_fn, alg.kl_loss_fn_args) == ("k3+", {"kl_coef": 0.01})
    assert alg.kl_penalty_fn == "none"
    # grpo takes std_normalize, not gamma or lam.
    assert (alg.advantage_fn, alg.advantage_fn_args) == ("grpo", {"std_normalize": False})
    stage = trainer_settings(loaded.stages).stages[0]
    assert stage.algorithm.loss_scale_factor == 32 and stage.algorithm.kl_loss_fn == "k3+"


@pytest.mark.parametrize(("loss_mode", "args"), [
    ("gspo", {"clip_range": 0.2, "clip_range_low": 0.2, "clip_range_high": 0.28}),
    ("sapo", {"tau_pos": 1.0, "tau_neg": 1.05}),
    ("kl_cov", {"kl_cov_ratio": 0.0002, "ppo_kl_coef": 0.1}),
    ("clip_cov", {"clip_range": 0.2, "clip_range_low": 0.2, "clip_range_high": 0.28, "clip_cov_ratio": 0.0002,
                  "clip_cov_lb": 1.0, "clip_cov_ub": 5.0}),
    ("dro", {"beta": 0.5}),
])
def test_each_verl_loss_gets_the_arguments_it_takes(tmp_path: Path, base: str, loss_mode: str,  # noqa: F811
                                                     args: dict) -> None:
    text = base + VERL_ALGORITHM.format(loss_mode=loss_mode).replace("dro_beta: null", "dro_beta: 0.5")
    loaded = load_config(write(tmp_path, text))
    alg = loaded.config.algorithm
    assert (alg.policy_loss_fn, alg.policy_loss_fn_args) == (loss_mode, args)
    trainer_settings(loaded.stages)


def test_an_explicit_rfthpc_key_wins_over_its_verl_spelling(tmp_path: Path, base: str) -> None:  # noqa: F811
    explicit = base.replace("  algorithm_type: grpo\n", "  algorithm_type: grpo\n  policy_loss_fn: cispo\n"
                            "  policy_loss_fn_args:\n    clip_range_high: 0.5\n  kl_loss_fn: k2\n")
    alg = load_config(write(tmp_path, explicit + VERL_ALGORITHM.format(loss_mode="vanilla"))).config.algorithm
    assert alg.policy_loss_fn == "cispo" and alg.kl_loss_fn == "k2"
    # cispo takes clip_range_low/high only; the explicit clip_range_high stays.
    assert alg.policy_loss_fn_args == {"clip_range_low": 0.2, "clip_range_high": 0.5}


def test_rfthpcs_own_vanilla_stays_the_plain_policy_gradient(tmp_path: Path, base: str) -> None:  # noqa: F811
    own = base.replace("  algorithm_type: grpo\n", "  algorithm_type: grpo\n  policy_loss_fn: vanilla\n")
    alg = load_config(write(tmp_path, own)).config.algorithm
    assert alg.policy_loss_fn == "vanilla"
    from rfthpc.algorithms import POLICY_LOSS_FNS

    assert POLICY_LOSS_FNS.get("vanilla") is POLICY_LOSS_FNS.get("pg")


@pytest.mark.parametrize(
    ("kl", "loss_fn"),
    [
        # The flag off: no term, whatever the estimator.
        ("use_kl_loss: false\n        kl_loss_type: k1", "none"),
        # The flag on without an estimator: veRL's default, low_var_kl.
        ("use_kl_loss: true", "low_var_kl"),
        # An estimator without the flag turns the term on.
        ("kl_loss_type: k1+", "k1+"),
    ],
)
def test_verls_kl_loss_switch(tmp_path: Path, base: str, kl: str, loss_fn: str) -> None:  # noqa: F811
    text = base + f"""
trainer:
  trainer_config:
    actor_rollout_ref:
      actor:
        {kl}
"""
    alg = load_config(write(tmp_path, text)).config.algorithm
    assert alg.kl_loss_fn == loss_fn


def test_verls_adaptive_kl_in_the_reward(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = base + """
trainer:
  trainer_config:
    algorithm:
      use_kl_in_reward: true
      kl_ctrl:
        type: adaptive
        kl_coef: 0.05
        horizon: 500
        target_kl: 0.2
"""
    alg = load_config(write(tmp_path, text)).config.algorithm
    assert alg.kl_penalty_fn == "kl"
    assert alg.kl_penalty_fn_args == {"adaptive": True, "kl_coef": 0.05, "horizon": 500, "target_kl": 0.2}
    with pytest.raises(ConfigError, match=r"kl_ctrl.type: 'pid'; veRL's controllers are 'fixed' and 'adaptive'"):
        load_config(write(tmp_path, text.replace("adaptive", "pid")))


def test_gae_takes_verls_gamma_and_lam(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = base.replace("algorithm_type: grpo", "algorithm_type: ppo") + """
trainer:
  trainer_config:
    algorithm:
      adv_estimator: gae
      gamma: 0.99
      lam: 0.95
      norm_adv_by_std_in_grpo: true
"""
    alg = load_config(write(tmp_path, text)).config.algorithm
    assert (alg.advantage_fn, alg.advantage_fn_args) == ("gae", {"gamma": 0.99, "lam": 0.95})


def test_an_unknown_verl_loss_is_named_by_validation(tmp_path: Path, base: str) -> None:  # noqa: F811
    with pytest.raises(ConfigError, match=r"algorithm.policy_loss_fn: unknown policy loss 'no_such_loss'"):
        load_config(write(tmp_path, base + VERL_ALGORITHM.format(loss_mode="no_such_loss")))


def test_verl_algorithm_settings_on_the_command_line(tmp_path: Path, base: str) -> None:  # noqa: F811
    path = write(tmp_path, base + VERL_ALGORITHM.format(loss_mode="vanilla"))
    prefix = "--trainer.trainer_config.actor_rollout_ref.actor."
    cfg = load_config(path, [prefix + "policy_loss.loss_mode", "cispo", prefix + "clip_ratio_high", "0.3",
                             prefix + "loss_agg_mode", "token-sum", prefix + "no-use_kl_loss",
                             "--trainer.trainer_config.algorithm.use_kl_in_reward"]).config
    alg = cfg.algorithm
    assert alg.policy_loss_fn == "cispo"
    # The new loss gets the veRL settings it takes; PPO's clip_range and clip_ratio_c, mapped from
    # the YAML for ppo, go.
    assert alg.policy_loss_fn_args == {"clip_range_low": 0.2, "clip_range_high": 0.3}
    assert alg.loss_agg_mode == "token-sum" and alg.loss_scale_factor is None
    assert alg.kl_loss_fn == "none"
    assert alg.kl_penalty_fn == "kl"  # the YAML's estimator, switched on
    # An rfthpc key on the same command line wins over its veRL spelling.
    cfg = load_config(path, [prefix + "kl_loss_type", "k1", "--algorithm.kl_loss_fn", "abs"]).config
    assert cfg.algorithm.kl_loss_fn == "abs"
    cfg = load_config(path, [prefix + "kl_loss_type", "k1"]).config
    assert cfg.algorithm.kl_loss_fn == "k1"


def test_loss_scale_factor_is_checked(tmp_path: Path, base: str) -> None:  # noqa: F811
    agg = base.replace("  algorithm_type: grpo\n", "  algorithm_type: grpo\n  loss_agg_mode: seq-mean-token-sum-norm\n")
    assert load_config(write(tmp_path, agg)).config.algorithm.loss_scale_factor == 32
    with pytest.raises(ConfigError, match=r"algorithm.loss_scale_factor: -1.0; .* must be a positive number"):
        load_config(write(tmp_path, agg), ["--algorithm.loss_scale_factor", "-1"])
    with pytest.raises(ConfigError, match=r"algorithm.loss_scale_factor: 64.0 is used by loss_agg_mode "
                                          r"seq-mean-token-sum-norm and token-sum-norm only, and the mode is "
                                          r"'token-mean'"):
        load_config(write(tmp_path, base), ["--algorithm.loss_scale_factor", "64"])
    trinity = base.replace("  algorithm_type: grpo\n", "  algorithm_type: grpo\n  loss_agg_mode: token-sum-norm\n")
    assert load_config(write(tmp_path, trinity)).config.algorithm.loss_scale_factor == 32


def test_seq_mean_token_sum_norm_says_it_is_verls_and_names_trinitys(tmp_path: Path, base: str) -> None:  # noqa: F811
    agg = base.replace("  algorithm_type: grpo\n", "  algorithm_type: grpo\n  loss_agg_mode: seq-mean-token-sum-norm\n")
    notes = load_config(write(tmp_path, agg)).notes
    assert any(n.startswith("algorithm.loss_agg_mode: seq-mean-token-sum-norm is veRL's") and
               "Trinity-RFT's divides by L only" in n and "rfthpc's token-sum-norm" in n for n in notes), notes
    trinity = base.replace("  algorithm_type: grpo\n", "  algorithm_type: grpo\n  loss_agg_mode: token-sum-norm\n")
    assert not any("loss_agg_mode" in n for n in load_config(write(tmp_path, trinity)).notes)


def test_a_stages_verl_arguments_follow_the_runs_policy_loss(tmp_path: Path, base: str) -> None:  # noqa: F811
    """The stage names no policy loss: the run's (cispo) decides which veRL settings apply."""
    run = base.replace("  algorithm_type: grpo\n", "  algorithm_type: grpo\n  policy_loss_fn: cispo\n")
    stages = """
stages:
  - stage_name: first
  - stage_name: second
    trainer:
      trainer_config:
        actor_rollout_ref:
          actor:
            clip_ratio_high: 0.28
            clip_ratio_c: 3.0
"""
    first, second = load_config(write(tmp_path, run + stages)).stages
    assert first.config.algorithm.policy_loss_fn_args == {}
    assert second.config.algorithm.policy_loss_fn_args == {"clip_range_high": 0.28}

"""Name lookup of algorithm functions: known names, unknown names, user `module:function`."""

import textwrap

import pytest
import torch

from rfthpc.algorithms import ADVANTAGE_FNS, KL_FNS, POLICY_LOSS_FNS, AdvantageInputs, kl_loss
from rfthpc.errors import ConfigError


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A user's module on sys.path with an advantage function and a KL estimator."""
    (tmp_path / "my_rl_parts.py").write_text(
        textwrap.dedent(
            """
            import torch

            def scaled_reward(inputs, *, scale=1.0):
                adv = inputs.rewards.unsqueeze(-1) * scale * inputs.response_mask
                return adv, adv

            def squared_gap(log_prob, ref_log_prob):
                return (log_prob - ref_log_prob) ** 2

            NOT_A_FUNCTION = 3
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_rl_parts"


def test_unknown_name_lists_known_names():
    with pytest.raises(ConfigError) as err:
        ADVANTAGE_FNS.get("gpro")
    message = str(err.value)
    assert "algorithm.advantage_fn" in message and "'gpro'" in message
    for name in ("grpo", "ppo", "reinforceplusplus", "rloo", "opmd", "module:function"):
        assert name in message


def test_names_include_aliases():
    assert {"reinforce++", "reinforceplusplus", "reinforce_plus_plus"} <= set(ADVANTAGE_FNS.names())
    assert ADVANTAGE_FNS.get("reinforce++") is ADVANTAGE_FNS.get("reinforceplusplus")
    assert POLICY_LOSS_FNS.get("vanilla") is POLICY_LOSS_FNS.get("pg")
    assert KL_FNS.get("low_var_kl") is KL_FNS.get("k3")


def test_user_function_by_module_path(user_module):
    fn = ADVANTAGE_FNS.bind(f"{user_module}:scaled_reward", {"scale": 2.0})
    adv, _ = fn(AdvantageInputs(rewards=torch.tensor([1.0, -1.0]), response_mask=torch.tensor([[1, 1], [1, 0]])))
    assert adv.tolist() == [[2.0, 2.0], [-2.0, 0.0]]
    assert ADVANTAGE_FNS.defaults(f"{user_module}:scaled_reward") == {"scale": 1.0}


def test_user_kl_estimator_reaches_kl_loss(user_module):
    loss, metrics = kl_loss(
        torch.tensor([[-1.0, -2.0]]),
        torch.tensor([[-3.0, -2.0]]),
        torch.tensor([[1, 1]]),
        kl_fn=f"{user_module}:squared_gap",
        kl_coef=1.0,
    )
    assert loss.item() == pytest.approx(2.0)  # ((2)^2 + 0) / 2 tokens
    assert metrics["actor/kl_loss"] == pytest.approx(2.0)


def test_bind_rejects_unknown_argument_and_lists_accepted():
    with pytest.raises(ConfigError) as err:
        POLICY_LOSS_FNS.bind("ppo", {"clip_ratio": 0.2})
    message = str(err.value)
    assert "algorithm.policy_loss_fn_args" in message and "'clip_ratio'" in message
    assert "clip_range_high" in message and "clip_ratio_c" in message


def test_bind_applies_arguments():
    fn = ADVANTAGE_FNS.bind("grpo", {"std_normalize": False})
    adv, _, _ = fn(
        AdvantageInputs(
            rewards=torch.tensor([3.0, 1.0]), response_mask=torch.ones(2, 1), group_ids=torch.tensor([7, 7])
        )
    )
    assert adv.flatten().tolist() == [1.0, -1.0]


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("no_such_module_xyz:fn", "cannot import module 'no_such_module_xyz'"),
        ("my_rl_parts:missing", "has no callable 'missing'"),
        ("my_rl_parts:NOT_A_FUNCTION", "has no callable 'NOT_A_FUNCTION'"),
        ("my_rl_parts:", "must look like 'package.module:function'"),
    ],
)
def test_bad_user_function_specs(user_module, spec, fragment):
    with pytest.raises(ConfigError, match=fragment):
        ADVANTAGE_FNS.get(spec)

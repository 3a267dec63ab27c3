"""`algorithm.rollout_correction`: parsed, validated before anything runs, reachable from a veRL config."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.config import load_config
from rfthpc.config.settings import trainer_settings
from rfthpc.errors import ConfigError
from tests.config.conftest import write
from tests.config.test_bad_input import base  # noqa: F401  (fixture)


def _settings(path: Path, overrides: list[str] | None = None):
    return trainer_settings(load_config(path, overrides).stages).stages[-1].algorithm


def _error(path: Path, overrides: list[str] | None = None) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(path, overrides)
    return str(e.value)


def test_off_by_default(tmp_path: Path, base: str) -> None:  # noqa: F811
    rc = _settings(write(tmp_path, base)).rollout_correction
    assert not rc.active and rc.rollout_is is None and not rc.bypass_mode


def test_parsed_from_the_algorithm_section(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = base.replace("  repeat_times: 4\n", """  repeat_times: 4
  rollout_correction:
    rollout_is: sequence
    rollout_is_threshold: 0.5_5.0
    rollout_rs: seq_mean_k1,token_k3
    rollout_rs_threshold: 0.999_1.001,0.01
""")
    rc = _settings(write(tmp_path, text)).rollout_correction
    assert rc.active and rc.rollout_is == "sequence" and (rc.is_lower, rc.is_upper) == (0.5, 5.0)
    geo, k3 = rc.rejection
    assert (geo.option, geo.reduce, geo.stat, geo.lower, geo.upper) == ("seq_mean_k1", "mean", "k1", 0.999, 1.001)
    assert (k3.option, k3.reduce, k3.stat, k3.lower, k3.upper) == ("token_k3", "token", "k3", None, 0.01)
    # Unquoted, YAML 1.1 would read 0.5_5 as the float 0.55; rfthpc's loader keeps veRL's pair.
    rc = _settings(write(tmp_path, text.replace("0.5_5.0", "0.5_5"))).rollout_correction
    assert (rc.is_lower, rc.is_upper) == (0.5, 5.0)


def test_reachable_from_a_verl_config(tmp_path: Path, base: str) -> None:  # noqa: F811
    verl = """
trainer:
  trainer_config:
    algorithm:
      rollout_correction:
        rollout_is: token
        rollout_is_threshold: 2.0
        rollout_is_batch_normalize: false
        rollout_rs: null
        rollout_rs_threshold: null
        bypass_mode: false
        loss_type: ppo_clip
"""
    path = write(tmp_path, base + verl)
    rc = _settings(path).rollout_correction
    assert rc.rollout_is == "token" and rc.is_upper == 2.0 and rc.is_lower is None and not rc.rejection
    # From the command line too; the rfthpc key on the same line wins.
    rc = _settings(path, ["--trainer.trainer_config.algorithm.rollout_correction.rollout_is", "sequence",
                          "--trainer.trainer_config.algorithm.rollout_correction.rollout_is_threshold", "4.0",
                          "--algorithm.rollout_correction.rollout_is_threshold", "3.0"]).rollout_correction
    assert rc.rollout_is == "sequence" and rc.is_upper == 3.0


def test_bypass_mode_picks_veRLs_loss_by_loss_type(tmp_path: Path, base: str) -> None:  # noqa: F811
    def config(loss_type: str, extra: str = "") -> Path:
        return write(tmp_path, base.replace("  repeat_times: 4\n", f"""  repeat_times: 4
{extra}  rollout_correction:
    bypass_mode: true
    loss_type: {loss_type}
    rollout_is: token
"""))

    alg = _settings(config("reinforce"))
    assert alg.policy_loss_fn == "bypass_mode" and alg.rollout_correction.bypass_mode
    assert _settings(config("ppo_clip")).policy_loss_fn == "ppo"
    msg = _error(config("reinforce", "  policy_loss_fn: cispo\n"))
    assert "algorithm.rollout_correction.bypass_mode" in msg and "policy_loss_fn: bypass_mode" in msg


@pytest.mark.parametrize(("settings", "needle"), [
    ({"rollout_is": "tokens"}, "algorithm.rollout_correction.rollout_is: 'tokens'"),
    ({"rollout_is": "token", "rollout_is_threshold": "5.0_0.5"}, "lower bound 5.0 exceeds the upper bound 0.5"),
    ({"rollout_is": "token", "rollout_is_threshold": "-1"}, "positive"),
    ({"rollout_is": "token", "rollout_is_threshold": "two"}, "rollout_is_threshold: 'two' is not a number"),
    ({"rollout_rs": "geometric", "rollout_rs_threshold": "1.01"}, "rollout_rs: unknown rule 'geometric'"),
    ({"rollout_rs": "seq_mean_k1"}, "rollout_rs_threshold: missing"),
    ({"rollout_rs": "seq_mean_k1,token_k3", "rollout_rs_threshold": "0.9_1.1,0.1,0.2"}, "3 thresholds for 2 rules"),
    ({"rollout_rs": "seq_mean_k3", "rollout_rs_threshold": "0.1_0.2"}, "takes one upper bound"),
    ({"rollout_rs": "seq_sum_k1", "rollout_rs_threshold": "0.5"}, "u must be >= 1"),
    ({"loss_type": "vanilla"}, "algorithm.rollout_correction.loss_type"),
    ({"rollout_is": "token", "policy_loss_fn": "sft"}, "reads no behaviour log-probabilities"),
    ({"rollout_is": "token", "policy_loss_fn": "decoupled_ppo"}, "would correct twice"),
])
def test_bad_settings_are_refused_naming_the_key_and_the_fix(tmp_path: Path, base: str,  # noqa: F811
                                                             settings: dict[str, str], needle: str) -> None:
    loss = settings.pop("policy_loss_fn", None)
    lines = "".join(f"    {k}: '{v}'\n" for k, v in settings.items())
    extra = f"  policy_loss_fn: {loss}\n" if loss else ""
    text = base.replace("  repeat_times: 4\n", f"  repeat_times: 4\n{extra}  rollout_correction:\n{lines}")
    assert needle in _error(write(tmp_path, text))


def test_an_sft_stage_ignores_the_runs_rollout_correction(tmp_path: Path, base: str) -> None:  # noqa: F811
    stages = """
stages:
  - stage_name: warmup
    mode: train
    algorithm:
      algorithm_type: sft
    buffer:
      trainer_input:
        experience_buffer:
          path: {data}
          format:
            prompt_key: question
            response_key: answer
  - stage_name: rl
""".format(data=tmp_path / "data.jsonl")
    text = base.replace("  repeat_times: 4\n", "  repeat_times: 4\n  rollout_correction:\n    rollout_is: token\n")
    sft, rl = trainer_settings(load_config(write(tmp_path, text + stages)).stages).stages
    assert not sft.algorithm.rollout_correction.active and rl.algorithm.rollout_correction.rollout_is == "token"

"""The shipped algorithm examples run as written: a veRL config (GSPO, Dr. GRPO's aggregation,
rollout correction), Trinity-RFT configs (SAPO, RAFT, CHORD, GiGPO on FrozenLake) and agents written with the
`openai` client and the OpenAI Agents SDK, explorer and trainer, on the demo's tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rfthpc.config import load_config
from rfthpc.rundir.paths import RunDir
from tests.run.conftest import ROOT, env_for, finish, monitor_records, rfthpc

EXAMPLES = ROOT / "configs" / "examples"


def _short(example: Path, out: Path, steps: int) -> Path:
    """The example with a short budget and the transformers engine; its algorithm untouched."""
    raw = yaml.safe_load(example.read_text())
    raw["buffer"].update(total_steps=steps, batch_size=4)
    raw["algorithm"]["repeat_times"] = 4
    if "train_batch_size" in raw["buffer"]:
        # A mix example's batch: the 16 rollouts and a fifth more expert rows (its expert_data_ratio 0.2).
        raw["buffer"]["train_batch_size"] = 20
    raw["explorer"]["rollout_model"]["engine_type"] = "transformers"
    raw["explorer"]["runner_per_model"] = 4
    raw["monitor"] = {"monitor_type": []}
    raw["filesystem"] = {"poll_interval_s": 0.2}
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


def test_the_verl_example_is_read_as_gspo_with_rollout_correction(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    for d in ("model", "gsm8k"):
        (tmp_path / d).mkdir()
    monkeypatch.setenv("RFTHPC_DEMO_DIR", str(tmp_path))
    alg = load_config(EXAMPLES / "verl-gspo.yaml").config.algorithm
    assert (alg.advantage_fn, alg.policy_loss_fn, alg.loss_agg_mode) == ("grpo", "gspo", "seq-mean-token-sum-norm")
    assert alg.policy_loss_fn_args == {"clip_range_low": 0.0003, "clip_range_high": 0.0004}
    assert alg.loss_scale_factor == 16 and alg.kl_loss_fn == "none"
    assert (alg.rollout_correction.rollout_is, float(alg.rollout_correction.rollout_is_threshold)) == ("token", 2.0)


@pytest.mark.parametrize(("example", "signature"), [
    ("verl-gspo.yaml", "rollout_corr/rollout_is_mean"),
    ("trinity-sapo.yaml", "actor/sapo_gate_mean"),
    ("trinity-raft.yaml", ("actor/sft_loss", "critic/dropped_responses")),
    ("trinity-chord.yaml", ("expert/sft_loss", "mix/mu", "actor/pg_loss")),
    ("agent-openai.yaml", ("actor/pg_loss", "critic/advantages/mean")),
    ("agent-openai-agents-sdk.yaml", ("actor/pg_loss", "critic/advantages/mean")),
])
def test_each_example_trains(example: str, signature: str | tuple[str, ...], demo_dir: Path, tmp_path: Path) -> None:
    steps = 3
    config = _short(EXAMPLES / example, tmp_path / example, steps)
    code, out, err = finish(rfthpc("run", "--config", str(config), env=env_for(demo_dir, tmp_path / "ckpt")), 600)
    assert code == 0, f"exit {code}\n{out[-2000:]}\n{err[-3000:]}"
    raw = yaml.safe_load(config.read_text())
    run = RunDir(tmp_path / "ckpt" / raw["project"] / raw["name"])
    records = monitor_records(run.root)
    assert [r["step"] for r in records] == list(range(1, steps + 1))
    for key in (signature,) if isinstance(signature, str) else signature:
        assert all(key in r for r in records), key


def test_the_agentscope_example_trains_five_steps_through_the_endpoint(demo_dir: Path, tmp_path: Path,
                                                                        agentscope_python: str) -> None:
    """Trinity-RFT's AgentScope ReAct example, as shipped: a real AgentScope agent (its own interpreter) talks to
    the policy over loopback HTTP for every episode; each of its calls is a step multi_step_grpo trains."""
    steps = 5
    config = _short(EXAMPLES / "trinity-agentscope-react.yaml", tmp_path / "agentscope.yaml", steps)
    env = {**env_for(demo_dir, tmp_path / "ckpt"), "RFTHPC_AGENTSCOPE_PYTHON": agentscope_python}
    code, out, err = finish(rfthpc("run", "--config", str(config), env=env), 900)
    assert code == 0, f"exit {code}\n{out[-2000:]}\n{err[-3000:]}"
    run = RunDir(tmp_path / "ckpt" / "rfthpc-examples" / "trinity-agentscope-react")
    records = monitor_records(run.root)
    assert [r["step"] for r in records] == list(range(1, steps + 1))
    assert all(r["response_length/mean"] > 0 for r in records)
    rollouts = monitor_records(run.root, "explorer_explorer_0")
    batches = [r for r in rollouts if "rollout/groups" in r]
    assert batches and all(r["rollout/failed_episodes"] == 0 for r in batches), batches
    # The tiny policy never calls a tool: each episode is the agent's 3 rounds and its closing call.
    assert all(r["rollout/tokens"] > 0 for r in batches)

"""On-policy distillation (`algorithm_type: on_policy_distill`, `jsd`): the advantages against hand-computed
numbers, the teacher checked at validate, and the trainer scoring each sample with a frozen teacher."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from rfthpc.algorithms import ADVANTAGE_FNS
from rfthpc.algorithms.advantages import AdvantageInputs
from rfthpc.config.teacher import teacher_problems
from rfthpc.errors import ConfigError
from rfthpc.rundir.metrics import read_metrics
from rfthpc.store import ChunkWriter
from tests.trainer.conftest import make_run, random_group, rl_config, run_trainer_inprocess


def test_the_advantage_is_the_teachers_log_ratio_to_the_student() -> None:
    behaviour = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]])
    teacher = torch.tensor([[-0.5, -2.5, -1.0], [-1.5, -0.25, -9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    inputs = AdvantageInputs(rewards=torch.zeros(2), response_mask=mask, behaviour_log_probs=behaviour,
                             teacher_log_probs=teacher)
    adv, returns = ADVANTAGE_FNS.get("on_policy_distill")(inputs, kl_coef=2.0)
    torch.testing.assert_close(adv, torch.tensor([[1.0, -1.0, 4.0], [-2.0, 0.5, 0.0]]))
    assert torch.equal(adv, returns)


@pytest.mark.parametrize("lam, temperature", [(0.5, 1.0), (0.25, 2.0), (0.0, 1.0), (1.0, 1.0)])
def test_jsd_is_trinitys_mixture_divergence_on_the_sampled_token(lam: float, temperature: float) -> None:
    behaviour = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]])
    teacher = torch.tensor([[-0.5, -2.5, -1.0], [-1.5, -0.25, -9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    inputs = AdvantageInputs(rewards=torch.zeros(2), response_mask=mask, behaviour_log_probs=behaviour,
                             teacher_log_probs=teacher)
    adv, _ = ADVANTAGE_FNS.get("jsd")(inputs, lambda_coef=lam, kl_coef=2.0, temperature=temperature)
    expected = torch.zeros(2, 3)
    for i in range(2):
        for j in range(3):
            s, t = behaviour[i, j].item() / temperature, teacher[i, j].item() / temperature
            if lam == 0:
                d = s - t  # Trinity's end points: the reverse and the forward single-sample KL
            elif lam == 1:
                d = t - s
            else:
                log_m = math.log(lam * math.exp(t) + (1 - lam) * math.exp(s))
                d = lam * (t - log_m) + (1 - lam) * (s - log_m)
            expected[i, j] = -2.0 * d * mask[i, j].item()
    torch.testing.assert_close(adv, expected)


def test_jsd_arguments_are_checked() -> None:
    for bad in ({"lambda_coef": 1.5}, {"temperature": 0.0}, {"chunk_size": 0}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            ADVANTAGE_FNS.check("jsd", bad)


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model with the `tiny` fixture's tokenizer and other weights (seed 1)."""
    from rfthpc.demos.tinymodel import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("teacher"), "tiny", seed=1)


def test_a_teacher_with_another_tokenizer_is_refused(tmp_path: Path, tiny_model: Path, teacher: Path) -> None:
    from rfthpc.demos.tinymodel import build_tiny_model

    assert teacher_problems(str(teacher), str(tiny_model), True, "on_policy_distill", True) == []
    other = build_tiny_model(tmp_path / "demo", "demo", seed=0)  # a 512-token vocabulary, not 384
    [problem] = teacher_problems(str(other), str(tiny_model), True, "on_policy_distill", True)
    assert problem.startswith("model.teacher_model_path: the teacher's tokenizer differs from the policy's")
    assert "holds no config.json" in teacher_problems(str(tmp_path), str(tiny_model), True, "x", True)[0]


def test_the_trainer_distils_the_teacher_into_the_policy(tmp_path: Path, tiny_model: Path, teacher: Path) -> None:
    cfg = rl_config(tiny_model, **{"algorithm.algorithm_type": "on_policy_distill", "algorithm.repeat_times": 1,
                                   "algorithm.policy_loss_fn": "importance_sampling",
                                   "model.teacher_model_path": str(teacher), "buffer.batch_size": 8,
                                   "buffer.total_steps": 2, "trainer.save_hf_checkpoint": "never"})
    run = make_run(tmp_path / "run", cfg)
    rng = np.random.default_rng(0)
    with ChunkWriter(run.root, "ex", 0, groups_per_chunk=8, max_chunk_delay_s=3600) as w:
        for i in range(16):
            w.add(random_group(rng, f"t{i}", 1, 384))
    assert run_trainer_inprocess(run) == 0
    records = {r["step"]: r for r in read_metrics(run.monitor / "trainer.jsonl")}
    assert sorted(records) == [1, 2]
    for r in records.values():
        # random_group's behaviour log-probs lie in [-7, -4]; the teacher's are its own: a finite gap
        assert math.isfinite(r["distill/reverse_kl"]) and "actor/ratio_mean" in r
        assert r["actor/grad_norm"] > 0

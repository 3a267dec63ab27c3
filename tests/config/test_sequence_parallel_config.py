"""`trainer.ulysses_sequence_parallel_size`: accepted where it can split the trainer's GPUs and the
model's heads, with padding-free micro-batches; each other case is an error naming the key and the
fix (`config validate` reads the model's config.json, never torch)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from rfthpc.config import load_config
from rfthpc.config.settings import trainer_settings
from rfthpc.errors import ConfigError
from tests.config.conftest import write

KEY = "trainer.ulysses_sequence_parallel_size"

BASE = """
project: p
name: n
mode: train
algorithm:
  algorithm_type: grpo
  repeat_times: 4
model:
  model_path: {model}
  max_prompt_tokens: 64
  max_response_tokens: 32
cluster:
  node_num: 1
  gpu_per_node: {gpus}
buffer:
  batch_size: 4
trainer:
  ulysses_sequence_parallel_size: {sp}
"""
AS_GIVEN = "  ulysses_sequence_parallel_size: 1\n"
"""The rfthpc key at 1, taken out where another framework's key is to set it (a given rfthpc key wins)."""


def _config(tmp_path: Path, sp: int, gpus: int = 4, heads: int = 8, kv_heads: int = 4, extra: str = "") -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2", "num_attention_heads": heads,
                                                   "num_key_value_heads": kv_heads}))
    return write(tmp_path, textwrap.dedent(BASE).format(model=model, gpus=gpus, sp=sp) + extra)


def _error(path: Path) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(path)
    return str(e.value)


def test_a_size_that_splits_gpus_and_heads_is_accepted(tmp_path: Path) -> None:
    loaded = load_config(_config(tmp_path, sp=4))
    assert loaded.config.trainer.ulysses_sequence_parallel_size == 4
    assert trainer_settings(loaded.stages).sequence_parallel_size == 4


def test_a_size_below_one_is_refused(tmp_path: Path) -> None:
    assert f"{KEY}: 0 must be >= 1" in _error(_config(tmp_path, sp=0))


def test_the_size_must_divide_the_trainers_gpus(tmp_path: Path) -> None:
    msg = _error(_config(tmp_path, sp=2, gpus=3, heads=6, kv_heads=2))
    assert f"{KEY}: 2 does not divide the trainer's 3 GPUs" in msg and "use a divisor" in msg


@pytest.mark.parametrize(("heads", "kv_heads"), [(6, 4), (8, 2)])
def test_the_size_must_divide_the_attention_and_key_value_heads(tmp_path: Path, heads: int, kv_heads: int) -> None:
    msg = _error(_config(tmp_path, sp=4, heads=heads, kv_heads=kv_heads))
    assert f"{KEY}: 4 does not divide the {heads} attention heads and {kv_heads} key/value heads of " \
           "model.model_path" in msg


def test_a_value_model_is_checked_too(tmp_path: Path) -> None:
    critic = tmp_path / "critic"
    critic.mkdir()
    (critic / "config.json").write_text(json.dumps({"num_attention_heads": 6, "num_key_value_heads": 6}))
    extra = f"  critic_model_path: {critic}\n"
    path = _config(tmp_path, sp=4, extra="")
    text = path.read_text().replace("  max_prompt_tokens: 64\n", "  max_prompt_tokens: 64\n" + extra)
    msg = _error(write(tmp_path, text.replace("algorithm_type: grpo", "algorithm_type: ppo")))
    assert "6 attention heads and 6 key/value heads of model.critic_model_path" in msg


def test_padding_free_micro_batches_are_needed(tmp_path: Path) -> None:
    msg = _error(_config(tmp_path, sp=2, extra="  use_remove_padding: false\n"))
    assert f"{KEY}: 2 splits padding-free micro-batches; set trainer.use_remove_padding: true" in msg


def test_verl_and_roll_keys_are_read(tmp_path: Path) -> None:
    """veRL's actor keys (the current one under fsdp_config too) and ROLL's actor_train key set it; the
    critic's and other roles' sizes are noted: every model splits as the actor does."""
    verl = ("  trainer_config:\n    actor_rollout_ref:\n      actor:\n        fsdp_config:\n"
            "          ulysses_sequence_parallel_size: 2\n    critic:\n      ulysses_sequence_parallel_size: 4\n")
    path = _config(tmp_path, sp=1, extra=verl)
    loaded = load_config(write(tmp_path, path.read_text().replace(AS_GIVEN, "")))
    assert loaded.config.trainer.ulysses_sequence_parallel_size == 2
    assert any(n.startswith("trainer.trainer_config.critic.ulysses_sequence_parallel_size: ignored: every model")
               for n in loaded.notes), loaded.notes
    path = _config(tmp_path, sp=1)
    roll = path.read_text().replace(AS_GIVEN, "") + (
        "actor_train:\n  model_args:\n    ulysses_size: 2\nreference:\n  model_args:\n    ulysses_size: 4\n")
    loaded = load_config(write(tmp_path, roll))
    assert loaded.config.trainer.ulysses_sequence_parallel_size == 2
    assert any(n.startswith("reference.model_args.ulysses_size: ignored") for n in loaded.notes), loaded.notes


def test_stages_share_one_size(tmp_path: Path) -> None:
    extra = ("stages:\n  - stage_name: a\n  - stage_name: b\n    trainer:\n      ulysses_sequence_parallel_size: 4\n")
    msg = _error(_config(tmp_path, sp=2, extra=extra))
    assert f"stage 'b': {KEY} 4 differs from stage 'a''s 2" in msg and "set it for the whole run" in msg


def test_local_trainer_processes_must_split_into_groups(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """On CPUs `rfthpc run --trainer-procs` sets the trainer's ranks: the size must divide them (before
    anything starts)."""
    from rfthpc.cli import main

    assert main(["run", "--config", str(_config(tmp_path, sp=2, gpus=0)), "--trainer-procs", "3"]) != 0
    assert f"--trainer-procs 3: {KEY} 2 (stage 'rft') splits each sequence over 2" in capsys.readouterr().err
    assert not (tmp_path / "checkpoints").exists()


def test_a_roll_import_keeps_actor_trains_ulysses_size(tmp_path: Path) -> None:
    """`rfthpc config import --from roll`: fsdp2_train's ulysses_size becomes the size (ROLL's data-parallel
    size, which its batch sizes count, is then its GPUs over it, as rfthpc's)."""
    from rfthpc.dialects.roll_import import import_roll
    from tests.config.test_roll_import import AGENTIC

    result = import_roll(AGENTIC, tmp_path / "tasks", overrides=[
        "actor_train.strategy_args.strategy_name=fsdp2_train", "~actor_train.strategy_args.strategy_config",
        "+actor_train.model_args.ulysses_size=2"])
    assert result.config["trainer"]["ulysses_sequence_parallel_size"] == 2
    assert "ulysses_sequence_parallel_size: 2  # actor_train.model_args.ulysses_size" in result.text
    out = write(tmp_path, result.text, "imported.yaml")
    assert load_config(out, check_paths=False).config.trainer.ulysses_sequence_parallel_size == 2

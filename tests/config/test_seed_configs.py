"""The configs of the reference documents (Trinity-RFT quick start, async guide, veRL alignment
guide), pasted as users would, load; where rfthpc reads a value differently it says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.config import load_config
from tests.config.conftest import SEEDS


def test_quickstart_gsm8k_loads_with_a_note_on_nccl(local_paths: Path) -> None:
    loaded = load_config(SEEDS / "gsm8k.yaml")
    cfg = loaded.config
    assert cfg.algorithm.algorithm_type == "grpo"
    assert cfg.algorithm.repeat_times == 8
    assert cfg.algorithm.optimizer.lr == pytest.approx(1e-5)
    assert cfg.buffer.train_batch_size == 128 * 8
    assert cfg.model.max_prompt_tokens == 2048 - 1024
    assert [t.name for t in cfg.buffer.explorer_input.tasksets] == ["gsm8k"]
    assert cfg.buffer.explorer_input.eval_tasksets[0].split == "test"
    assert cfg.buffer.explorer_input.eval_tasksets[0].repeat_times == 1
    assert cfg.buffer.explorer_input.tasksets[0].default_workflow_type == "math_workflow"
    assert cfg.model.model_path == str(local_paths / "models" / "Qwen2.5-1.5B-Instruct")
    assert any("sync_method" in n and "nccl" in n for n in loaded.notes)
    assert cfg.synchronizer.max_staleness == 0


@pytest.mark.parametrize("name", ["explorer.yaml", "trainer.yaml", "explorer_new.yaml"])
def test_async_pair_and_new_explorer_load(local_paths: Path, name: str) -> None:
    loaded = load_config(SEEDS / name)
    cfg = loaded.config
    assert cfg.mode in ("explore", "train")
    assert cfg.synchronizer.sync_interval == 10
    assert cfg.synchronizer.max_staleness == 9
    assert any("sqlite:///gsm8k.db" in n for n in loaded.notes)
    if name == "explorer_new.yaml":
        assert cfg.explorer.name == "explorer_new"
        assert cfg.slurm.explorer.array_size == 8
    if name == "trainer.yaml":
        # Only train_batch_size is set: one optimizer update per step still covers all its 64 groups.
        assert cfg.buffer.train_batch_size == 512 and cfg.trainer.ppo_mini_batch_size == 512 // 8


def test_verl_ppo_example_maps_trainer_config(local_paths: Path) -> None:
    cfg = load_config(SEEDS / "ppo_example.yaml").config
    assert cfg.algorithm.advantage_fn == "ppo"
    assert cfg.algorithm.kl_loss_fn == "none"
    assert cfg.trainer.enable_gradient_checkpointing is True
    assert cfg.trainer.ppo_micro_batch_size_per_gpu == 16
    assert cfg.trainer.critic_lr == pytest.approx(1e-5)
    assert cfg.trainer.critic_lr_warmup_steps_ratio == pytest.approx(0.05)
    assert cfg.model.critic_model_path.endswith("Qwen2-7B-Instruct")
    assert len(cfg.buffer.explorer_input.tasksets) == 2
    assert cfg.explorer.auxiliary_models[0].engine_num == 2
    assert cfg.explorer.auxiliary_models[0].name == "auxiliary_0"  # unnamed in Trinity-RFT's file
    assert cfg.monitor.monitor_type == ["wandb"]
    assert cfg.synchronizer.max_staleness == 4


def test_verl_grpo_example_loads(local_paths: Path) -> None:
    # Its model is a hub id: a user downloads it and points model.model_path at the copy.
    local_model = str(local_paths / "models" / "Qwen2-7B-Instruct")
    cfg = load_config(SEEDS / "grpo_example.yaml", ["--model.model_path", local_model]).config
    assert cfg.algorithm.kl_loss_fn == "low_var_kl"
    assert cfg.algorithm.kl_loss_fn_args["kl_coef"] == pytest.approx(0.001)
    assert cfg.algorithm.entropy_loss_fn_args["entropy_coef"] == 0
    assert cfg.buffer.train_batch_size == 2048
    assert cfg.trainer.max_token_len_per_gpu == 24000


def test_sft_warmup_stages_snippet_added_to_quickstart(local_paths: Path, tmp_path: Path) -> None:
    sft_data = tmp_path / "sft"
    sft_data.mkdir()
    text = (SEEDS / "gsm8k.yaml").read_text() + (SEEDS / "sft_stages_snippet.yaml").read_text().replace(
        "/PATH/TO/YOUR/SFT/DATASET", str(sft_data)
    )
    cfg_file = tmp_path / "gsm8k_sft.yaml"
    cfg_file.write_text(text)
    loaded = load_config(cfg_file)
    names = [s.name for s in loaded.stages]
    assert names == ["sft_warmup", "rft"]
    sft, rft = loaded.stages[0].config, loaded.stages[1].config
    assert sft.mode == "train" and sft.algorithm.algorithm_type == "sft"
    assert sft.algorithm.policy_loss_fn == "sft" and sft.algorithm.repeat_times == 1
    assert sft.buffer.train_batch_size == 128 and sft.buffer.total_steps == 10
    assert rft.algorithm.algorithm_type == "grpo" and rft.buffer.train_batch_size == 1024


@pytest.mark.parametrize("name", ["eval_tasksets_snippet.yaml", "reward_model_snippet.yaml"])
def test_snippets_merged_into_the_quickstart(local_paths: Path, tmp_path: Path, name: str) -> None:
    """The guide's snippets are fragments users merge into a full config; merged, they load (or name the problem)."""
    import yaml

    base = yaml.safe_load((SEEDS / "gsm8k.yaml").read_text())
    snippet = yaml.safe_load((SEEDS / name).read_text())
    base["buffer"]["explorer_input"].update(snippet["buffer"]["explorer_input"])
    if "explorer" in snippet:
        base["explorer"].update(snippet["explorer"])
        base["cluster"]["gpu_per_node"] = 8
    cfg_file = tmp_path / "merged.yaml"
    cfg_file.write_text(yaml.safe_dump(base))
    if name == "reward_model_snippet.yaml":
        from rfthpc.errors import ConfigError

        with pytest.raises(ConfigError) as e:
            load_config(cfg_file)
        # A user's reward function must be named as module:function; the hub id is not local.
        assert "custom_reward" in str(e.value)
        assert "explorer.auxiliary_models[0].model_path" in str(e.value) and "huggingface-cli download" in str(e.value)
    else:
        cfg = load_config(cfg_file, check_paths=False).config
        aime = cfg.buffer.explorer_input.eval_tasksets[0]
        assert aime.name == "AIME2024" and aime.repeat_times == 32 and aime.rollout_args.top_p == pytest.approx(0.7)


@pytest.mark.parametrize("name", sorted(p.name for p in SEEDS.glob("*.yaml") if "snippet" not in p.name))
def test_seed_configs_name_hub_ids_without_download(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pasted unchanged (no local downloads, no variables exported), a seed config fails only on the missing
    local paths."""
    from rfthpc.errors import ConfigError

    for var in ("TRINITY_MODEL_PATH", "TRINITY_TASKSET_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", "/nonexistent-home")
    with pytest.raises(ConfigError) as e:
        load_config(SEEDS / name)
    lines = [ln for ln in str(e.value).splitlines() if ln.startswith("  - ")]
    assert lines and all("path" in ln and ("does not exist" in ln or "not a local path" in ln or "is not set" in ln)
                         for ln in lines), lines
    for var in ("TRINITY_MODEL_PATH", "TRINITY_TASKSET_PATH"):
        monkeypatch.setenv(var, "/not/downloaded")
    assert load_config(SEEDS / name, check_paths=False).config is not None

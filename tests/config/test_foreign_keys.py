"""Each Trinity-RFT, veRL or ROLL key rfthpc does not take as its own gets one of three answers: mapped
(and listed by `rfthpc config show` with the key it came from), ignored with one note, or refused with
the reason and the alternative. A refused key whose value changes nothing is ignored, with a note."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rfthpc.config import load_config
from rfthpc.dialects import trinity as foreign
from rfthpc.errors import ConfigError
from tests.config.conftest import SEEDS, write
from tests.config.test_bad_input import base  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[2]


def _verl(text: str) -> str:
    """A trainer.trainer_config section holding `text` (YAML indented as under trainer_config)."""
    return "trainer:\n  trainer_config:\n" + "".join(f"    {line}\n" for line in text.strip("\n").splitlines())


def _error(path: Path) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(path)
    return str(e.value)


def test_verl_keys_without_meaning_here_are_ignored_with_one_note_each(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = base + _verl("""
actor_rollout_ref:
  hybrid_engine: true
  actor:
    strategy: fsdp2
    checkpoint: {save_contents: [model, optimizer, extra], load_contents: [model, optimizer, extra]}
trainer: {balance_batch: true, total_epochs: 30}
""")
    notes = load_config(write(tmp_path, text)).notes
    assert any(n.startswith("trainer.trainer_config.actor_rollout_ref.hybrid_engine: ignored: veRL colocates")
               for n in notes), notes
    assert any("actor.strategy: ignored: rfthpc always trains with FSDP2" in n for n in notes), notes
    # One note for the keys ignored for one reason.
    [checkpoint] = [n for n in notes if "checkpoint.save_contents" in n]
    assert "checkpoint.load_contents" in checkpoint and "trainer.save_hf_checkpoint" in checkpoint
    assert any("trainer.balance_batch: ignored" in n for n in notes)
    assert any("trainer.total_epochs: ignored" in n and "buffer.total_epochs" in n for n in notes)


@pytest.mark.parametrize("key", ["actor_rollout_ref.model", "actor_rollout_ref.actor", "critic.model"])
def test_verls_use_remove_padding_switches_padding_free_micro_batches(tmp_path: Path, base: str,  # noqa: F811
                                                                     key: str) -> None:
    """veRL's use_remove_padding (the actor's model, the actor, the critic's model) is rfthpc's
    trainer.use_remove_padding, on by default: a veRL config that turns it off runs padded."""
    assert load_config(write(tmp_path, base)).config.trainer.use_remove_padding is True
    section, leaf = key.split(".")
    loaded = load_config(write(tmp_path, base + _verl(f"{section}:\n  {leaf}: {{use_remove_padding: false}}")))
    assert loaded.config.trainer.use_remove_padding is False
    assert not any("use_remove_padding" in n for n in loaded.notes), loaded.notes  # mapped, not ignored


def test_verl_keys_that_would_change_results_are_refused_with_the_alternative(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = base + _verl("""
actor_rollout_ref:
  model: {enable_activation_offload: true}
  actor: {strategy: megatron, shuffle: true}
critic: {cliprange_value: 0.2, model: {lora_rank: 8}}
trainer: {default_hdfs_dir: hdfs://x}
""")
    msg = _error(write(tmp_path, text))
    refused = msg.split("refused features:\n", 1)[1]
    for key, why in [("critic.model.lora_rank", "the policy only"),
                     ("actor_rollout_ref.model.enable_activation_offload", "trainer.enable_gradient_checkpointing"),
                     ("actor_rollout_ref.actor.strategy", "FSDP2 only"),
                     ("actor_rollout_ref.actor.shuffle", "committed in"),
                     ("critic.cliprange_value", "clips at 0.5"),
                     ("trainer.default_hdfs_dir", "run directory only")]:
        line = next(ln for ln in refused.splitlines() if f"trainer.trainer_config.{key}:" in ln)
        assert "veRL key not supported by rfthpc" in line and why in line, line


def test_a_refused_key_left_at_a_value_that_changes_nothing_is_ignored(tmp_path: Path, base: str) -> None:  # noqa: F811
    """Dumped configs spell out every default: Trinity-RFT's empty group, data_processor and service,
    veRL's critic LoRA rank 0, ROLL's default seed."""
    text = base + ("group: ''\nservice: {data_juicer: null}\nseed: 42\n"
                   "data_processor: {task_pipeline: null, experience_pipeline: {operators: [], save_input: true}}\n"
                   + _verl("critic: {cliprange_value: 0.5, model: {lora_rank: 0}}"))
    loaded = load_config(write(tmp_path, text))
    [harmless] = [n for n in loaded.notes if "left empty, off or at its default" in n]
    for key in ("group", "service", "data_processor", "trainer.trainer_config.critic.model.lora_rank",
                "trainer.trainer_config.critic.cliprange_value"):
        assert key in harmless, key
    assert any(n.startswith("seed: ignored: ROLL's global seed") for n in loaded.notes), loaded.notes


def test_mapped_keys_are_listed_by_config_show_with_where_they_came_from(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = base + "pg_variant: topr\n" + _verl("""
actor_rollout_ref:
  actor: {optim: {betas: [0.9, 0.95]}}
trainer: {max_actor_ckpt_to_keep: 3}
""")
    text = text.replace("  repeat_times: 4\n", "  repeat_times: 4\n  optimizer:\n    warmup_style: cosine\n")
    loaded = load_config(write(tmp_path, text))
    cfg = loaded.config
    assert cfg.trainer.max_checkpoints_to_keep == 3 and cfg.algorithm.optimizer.betas == [0.9, 0.95]
    assert cfg.algorithm.policy_loss_fn == "topr" and cfg.algorithm.optimizer.lr_scheduler_type == "cosine"
    out = subprocess.run([sys.executable, "-m", "rfthpc", "config", "show", "--config", str(tmp_path / "cfg.yaml")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    head = out.stdout.split("\nproject:", 1)[0].splitlines()
    assert head[0].startswith("# Read from other frameworks' keys")
    assert ("#   trainer.max_checkpoints_to_keep: 3  <- veRL trainer.trainer_config.trainer.max_actor_ckpt_to_keep"
            in head)
    assert "#   algorithm.optimizer.betas: [0.9, 0.95]  <- veRL trainer.trainer_config.actor_rollout_ref.actor.optim.betas" \
        in head
    assert "#   algorithm.policy_loss_fn: topr  <- ROLL pg_variant" in head
    assert "#   algorithm.optimizer.lr_scheduler_type: cosine  <- Trinity-RFT algorithm.optimizer.warmup_style" in head


def test_an_explicit_rfthpc_key_wins_over_a_mapped_one_with_a_note(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = base + "trainer:\n  max_checkpoints_to_keep: 2\n  trainer_config:\n    trainer:\n      remove_previous_ckpt_in_save: true\n"
    loaded = load_config(write(tmp_path, text))
    assert loaded.config.trainer.max_checkpoints_to_keep == 2
    assert ("trainer.trainer_config.trainer.remove_previous_ckpt_in_save: 1 is not used: the config sets "
            "trainer.max_checkpoints_to_keep: 2") in loaded.notes
    assert loaded.mapped == []


ROLL = """
exp_name: roll-run
seed: 42
hydra: {{run: {{dir: .}}, output_subdir: null}}
logging_dir: ./output/logs
num_gpus_per_node: 2
max_steps: 50
save_steps: 10
rollout_batch_size: 4
prompt_length: 64
response_length: 32
num_return_sequences_in_group: 4
ppo_epochs: 1
adv_estimator: grpo
pretrain: {model}
actor_train:
  model_args: {{dtype: bf16, model_name_or_path: {model}}}
  training_args: {{learning_rate: 2.0e-6, weight_decay: 0, per_device_train_batch_size: 2, warmup_steps: 3}}
  strategy_args: {{strategy_name: fsdp2_train, strategy_config: {{fsdp_size: 1}}}}
  device_mapping: list(range(0,1))
actor_infer:
  generating_args: {{temperature: 0.9, top_p: 0.99, top_k: 100, num_beams: 1, num_return_sequences: 4}}
  strategy_args: {{strategy_name: vllm, strategy_config: {{gpu_memory_utilization: 0.7, block_size: 16}}}}
  device_mapping: list(range(1,2))
reference:
  strategy_args: {{strategy_name: megatron_infer}}
"""


def _roll(tmp_path: Path, base: str, extra: str = "") -> Path:  # noqa: F811
    model = base.split("model_path: ", 1)[1].split("\n", 1)[0]
    taskset = base[base.index("buffer:"):].replace("  batch_size: 4\n", "")
    return write(tmp_path, ROLL.format(model=model) + taskset + extra)


def test_a_roll_config_maps_its_keys(tmp_path: Path, base: str) -> None:  # noqa: F811
    loaded = load_config(_roll(tmp_path, base))
    cfg = loaded.config
    assert cfg.name == "roll-run" and cfg.cluster.gpu_per_node == 2 and cfg.buffer.total_steps == 50
    assert (cfg.buffer.batch_size, cfg.algorithm.repeat_times, cfg.algorithm.advantage_fn) == (4, 4, "grpo")
    assert (cfg.model.max_prompt_tokens, cfg.model.max_response_tokens) == (64, 32)
    assert cfg.model.dtype == "bfloat16" and cfg.algorithm.optimizer.lr == pytest.approx(2e-6)
    assert cfg.trainer.ppo_micro_batch_size_per_gpu == 2 and cfg.trainer.save_interval == 10
    assert cfg.explorer.rollout_model.gpu_memory_utilization == pytest.approx(0.7)
    assert cfg.buffer.explorer_input.tasksets[0].rollout_args.temperature == pytest.approx(0.9)
    notes = "\n".join(loaded.notes)
    for key in ("hydra", "logging_dir", "actor_train.device_mapping", "actor_infer.strategy_args.strategy_config.block_size",
                "reference.strategy_args.strategy_name", "actor_train.strategy_args.strategy_name"):
        assert key in notes, key


def test_roll_keys_rfthpc_cannot_follow_are_refused_without_misleading_hints(tmp_path: Path, base: str) -> None:  # noqa: F811
    extra = ("reward_pretrain: /models/rm\nwhiten_advantages: true\nrewards: {math: {worker_cls: x}}\n"
             "actor_train_extra: 1\n")
    path = _roll(tmp_path, base, extra)
    text = path.read_text().replace(
        "per_device_train_batch_size: 2,", "per_device_train_batch_size: 2, gradient_accumulation_steps: 8,")
    msg = _error(write(tmp_path, text))
    for keys in ("reward_pretrain, rewards: ROLL keys", "whiten_advantages: ROLL key",
                 "actor_train.training_args.gradient_accumulation_steps: ROLL key"):
        assert f"  - {keys} not supported by rfthpc" in msg, keys
    assert "lite_ppo" in msg and "trainer.ppo_mini_batch_size" in msg
    assert "actor_train_extra: unknown key (valid keys here" in msg  # no "did you mean 'trainer'?"
    assert "did you mean" not in msg


def test_roll_and_verl_keys_that_are_not_known_at_all_stay_errors_with_a_close_hint(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = base + _verl("actor_rollout_ref:\n  actor:\n    ppo_epoch: 2\n  hybrid_engin: true")
    msg = _error(write(tmp_path, text))
    assert ("trainer.trainer_config.actor_rollout_ref.actor.ppo_epoch: unknown veRL key (did you mean "
            "actor_rollout_ref.actor.ppo_epochs?)") in msg
    assert ("trainer.trainer_config.actor_rollout_ref.hybrid_engin: unknown veRL key (did you mean "
            "actor_rollout_ref.hybrid_engine?)") in msg


def test_a_config_trinity_rft_wrote_back_loads_with_notes(local_paths: Path) -> None:
    """Every key Trinity-RFT adds when it saves a checked config (Ray, derived paths, serve mode, its
    veRL defaults) is ignored with a note, or refused only where its value would change results."""
    loaded = load_config(SEEDS / "trinity_dumped.yaml")
    assert loaded.config.trainer.max_checkpoints_to_keep == 5  # veRL's max_actor_ckpt_to_keep
    notes = "\n".join(loaded.notes)
    for key in ("checkpoint_job_dir", "ray_namespace", "cluster.ray_address", "buffer.pad_token_id",
                "explorer.runner_num", "explorer.api_port", "explorer.rollout_model.enable_openai_api",
                "trainer.enable_preview", "synchronizer.explorer_world_size", "log", "data_processor", "service",
                "trainer.trainer_config.actor_rollout_ref.hybrid_engine", "trainer.trainer_config.trainer.balance_batch",
                "trainer.trainer_config.trainer.max_critic_ckpt_to_keep"):
        assert key in notes, key


def test_trinity_rft_s_older_replay_keys_name_the_current_ones(tmp_path: Path, base: str) -> None:  # noqa: F811
    eb = "  trainer_input:\n    experience_buffer:\n      use_priority_queue: {on}\n      reuse_cooldown_time: {t}\n"
    text = base.replace("  batch_size: 4\n", "  batch_size: 4\n" + eb.format(on="true", t=30))
    msg = _error(write(tmp_path, text))
    assert ("buffer.trainer_input.experience_buffer.use_priority_queue, "
            "buffer.trainer_input.experience_buffer.reuse_cooldown_time: Trinity-RFT keys not supported") in msg
    assert "experience_buffer.replay_buffer (enable, reuse_cooldown_time, priority_fn, priority_fn_args)" in msg
    off = base.replace("  batch_size: 4\n", "  batch_size: 4\n" + eb.format(on="false", t="null"))
    assert "use_priority_queue" in "\n".join(load_config(write(tmp_path, off)).notes)


def test_trinity_features_rfthpc_lacks_are_answered_not_unknown(tmp_path: Path, base: str) -> None:  # noqa: F811
    """vLLM's request logging is ignored; Trinity's Tinker backend, benchmark mode and external model are
    refused with the reason and the alternative, once each (the benchmark config's missing training
    taskset and its mode are not reported again)."""
    text = base + "explorer:\n  rollout_model: {enable_log_requests: true}\n"
    notes = load_config(write(tmp_path, text)).notes
    assert any(n.startswith("explorer.rollout_model.enable_log_requests: ignored: vLLM's log line for every request")
               for n in notes), notes
    off = load_config(write(tmp_path, base.replace("  max_response_tokens: 32\n",
                                                   "  max_response_tokens: 32\n  tinker: {enable: false}\n")))
    assert any("model.tinker" in n and "left empty, off or at its default" in n for n in off.notes), off.notes
    msg = _error(write(tmp_path, base.replace("  max_response_tokens: 32\n",
                                              "  max_response_tokens: 32\n  tinker: {enable: true, rank: 32}\n")))
    assert "  - model.tinker: Trinity-RFT key not supported by rfthpc: Trinity-RFT's Tinker backend" in msg
    bench = "mode: bench\n" + base.replace("    taskset:\n      name: t\n", "    eval_tasksets:\n    - name: t\n").replace(
        "  max_response_tokens: 32\n", "  max_response_tokens: 32\n  external_model: {enable: true, model_name: m}\n")
    msg = _error(write(tmp_path, bench))
    assert msg.splitlines()[1:] == [
        "refused features:",
        "  - mode: 'bench' is not an rfthpc mode (both, explore, train): " + foreign.TRINITY_MODES["bench"].why,
        "  - model.external_model: Trinity-RFT key not supported by rfthpc: " + foreign.NO_EXTERNAL_MODEL], msg


@pytest.mark.parametrize(("algorithm", "value", "answer"), [
    ("algorithm_type: grpo", "true", "mapped"),  # ppo against the behaviour policy: veRL's bypass mode
    ("algorithm_type: grpo\n  policy_loss_fn: m2po", "true", "ignored"),  # m2po reads the behaviour policy anyway
    ("algorithm_type: grpo", "false", "ignored"),  # ppo recomputes at the step's start anyway
    ("algorithm_type: grpo\n  policy_loss_fn: gspo", "true", "refused"),
    ("algorithm_type: grpo\n  policy_loss_fn: m2po", "false", "refused"),
    ("algorithm_type: m2po", "true", "ignored"),  # Trinity's m2po example: the preset's loss reads them anyway
    ("algorithm_type: m2po", "false", "refused"),  # a proximal old policy, which Trinity's m2po refuses too
])
def test_trinity_bypass_old_logprobs(tmp_path: Path, base: str, algorithm: str, value: str, answer: str) -> None:  # noqa: F811
    text = base.replace("algorithm_type: grpo", f"{algorithm}\n  bypass_old_logprobs: {value}")
    if answer == "refused":
        assert "  - algorithm.bypass_old_logprobs: Trinity-RFT key not supported by rfthpc: Trinity-RFT's choice, " \
               "for any policy loss, of the behaviour policy's log-probabilities" in _error(write(tmp_path, text))
        return
    loaded = load_config(write(tmp_path, text))
    mapped = [(m.target, m.value, m.source) for m in loaded.mapped]
    if answer == "mapped":
        assert loaded.config.algorithm.rollout_correction.bypass_mode is True
        assert loaded.config.algorithm.policy_loss_fn == "ppo"
        assert mapped == [("algorithm.rollout_correction.bypass_mode", True, "algorithm.bypass_old_logprobs")]
    else:
        assert mapped == [] and not loaded.config.algorithm.rollout_correction.bypass_mode
        assert any(n.startswith("algorithm.bypass_old_logprobs: ignored: the policy loss already reads")
                   for n in loaded.notes), loaded.notes

"""`rfthpc config import --from verl`: a whole veRL run (its Hydra config with the overrides of its
launch script) becomes an rfthpc config that validates, with every veRL key accounted for; what
cannot be honoured is one error."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from rfthpc.cli import main
from rfthpc.config import load_config
from rfthpc.dialects.hydra import compose
from rfthpc.dialects.translation import flatten
from rfthpc.dialects.verl_import import import_verl
from rfthpc.errors import ConfigError

EXAMPLES = Path(__file__).parent / "verl_examples"
CONFIG = EXAMPLES / "config" / "ppo_trainer.yaml"
SCRIPT = EXAMPLES / "run_qwen2_5-0_5b_grpo.sh"
ENV = {"HOME": "/home/u"}


def gsm8k_rows(sources: list[str]) -> list[dict]:
    """Rows in veRL's layout (its examples/data_preprocess/gsm8k.py)."""
    return [{"data_source": source, "prompt": [{"role": "user", "content": f"What is {i} + {i}?"}],
             "ability": "math", "reward_model": {"style": "rule", "ground_truth": str(2 * i)},
             "extra_info": {"split": "train", "index": i}} for i, source in enumerate(sources)]


def parquet(path: Path, sources: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(gsm8k_rows(sources)), path)
    return path


def accounted(text: str, composed_leaves: list[str]) -> list[str]:
    """The veRL keys that the imported config's text mentions neither by the key nor a section above it."""
    missing = []
    for leaf in composed_leaves:
        parts = leaf.split(".")
        prefixes = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
        if parts[-1] == "_target_" or any(re.search(rf"(?<![\w.]){re.escape(p)}(?![\w])", text) for p in prefixes):
            continue
        missing.append(leaf)
    return missing


def test_the_example_run_imports_into_a_config_that_validates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    monkeypatch.setenv("HOME", "/home/u")
    out = tmp_path / "grpo.yaml"
    assert main(["config", "import", "--from", "verl", str(CONFIG), "--script", str(SCRIPT), "trainer.total_epochs=2",
                 "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# Imported from veRL by `rfthpc config import --from verl")
    assert "# From your environment (the script reads them without setting them): HOME=/home/u" in text
    cfg = load_config(out, check_paths=False).config
    composed = compose(CONFIG, _script_overrides())
    assert accounted(text, list(flatten(composed.data))) == []
    # What the run is: GRPO with a KL loss, 64 prompts x 5 responses per step, on-policy.
    alg = cfg.algorithm
    assert (alg.algorithm_type, alg.advantage_fn, alg.policy_loss_fn, alg.kl_loss_fn) == ("grpo", "grpo", "ppo",
                                                                                          "low_var_kl")
    assert (alg.repeat_times, cfg.buffer.batch_size, cfg.buffer.total_epochs) == (5, 64, 2)
    assert alg.kl_loss_fn_args == {"kl_coef": 0.001} and alg.optimizer.lr == 1e-6
    assert (cfg.synchronizer.sync_interval, cfg.synchronizer.sync_offset) == (1, 0)
    assert (cfg.model.max_prompt_tokens, cfg.model.max_response_tokens) == (512, 1024)
    assert cfg.model.model_path == "/home/u/models/Qwen2.5-0.5B-Instruct" and not cfg.model.enable_prompt_truncation
    assert (cfg.trainer.ppo_mini_batch_size, cfg.trainer.max_token_len_per_gpu, cfg.trainer.use_dynamic_bsz) == (
        32, 3072, True)
    # The 8 GPUs veRL time-shares, split: 2 engines of 2 GPUs, 4 for the trainer.
    assert (cfg.cluster.node_num, cfg.cluster.gpu_per_node) == (1, 8)
    rollout = cfg.explorer.rollout_model
    assert (rollout.engine_num, rollout.tensor_parallel_size, rollout.gpu_memory_utilization) == (2, 2, 0.6)
    assert (cfg.project, cfg.name, cfg.checkpoint_root_dir) == ("verl_grpo_example_gsm8k",
                                                                 "qwen2_5_0_5b_function_rm", "checkpoints")
    assert (cfg.trainer.save_interval, cfg.explorer.eval_interval, cfg.explorer.eval_on_startup) == (20, 5, True)
    assert cfg.monitor.monitor_type == ["console", "wandb"] and cfg.continue_from_checkpoint
    inp = cfg.buffer.explorer_input
    train, test = inp.tasksets[0], inp.eval_tasksets[0]
    assert (train.path, test.path) == ("/home/u/data/gsm8k/train.parquet", "/home/u/data/gsm8k/test.parquet")
    assert (train.format.prompt_type, train.format.messages_key, train.format.response_key) == (
        "messages", "prompt", "reward_model.ground_truth")
    assert train.task_selector.selector_type == "shuffle" and train.default_reward_fn_type == "verl_reward"
    assert (test.rollout_args.temperature, test.repeat_times) == (0.0, 1)
    # Where each value came from, beside it.
    assert "repeat_times: 5  # actor_rollout_ref.rollout.n" in text
    assert "lr: 1e-06  # actor_rollout_ref.actor.optim.lr" in text
    assert "- critic: no effect: veRL trains no critic with adv_estimator grpo" in text
    assert "- actor_rollout_ref.hybrid_engine: veRL colocates rollout and training" in text


def _script_overrides() -> list[str]:
    from rfthpc.dialects.verl_script import read_script

    return read_script(SCRIPT, ["trainer.total_epochs=2"], environ=ENV).overrides


def test_the_imported_tasksets_read_veRLs_rows_and_score_them(tmp_path: Path) -> None:
    """veRL's parquet rows through the imported config: the chat is the prompt, the nested ground truth
    the answer, and verl_reward scores by the row's data source."""
    from rfthpc.explorer.setup import load
    from rfthpc.rewards.registry import REWARDS
    from rfthpc.rewards.scoring import score_group

    home = tmp_path / "home"
    parquet(home / "data" / "gsm8k" / "train.parquet", ["openai/gsm8k"] * 3)
    parquet(home / "data" / "gsm8k" / "test.parquet", ["openai/gsm8k"] * 2)
    result = import_verl(CONFIG, script=SCRIPT, environ={"HOME": str(home)})
    assert not any("not readable here" in n for n in result.notes)  # the data sources were checked
    out = tmp_path / "grpo.yaml"
    out.write_text(result.text)
    cfg = load_config(out, check_paths=False).config
    tasks = load(cfg.buffer.explorer_input.tasksets[0], is_eval=False).tasks
    assert (tasks[2].prompt, tasks[2].truth) == ("What is 2 + 2?", "4")
    outcome = score_group(REWARDS.get("verl_reward"), "verl_reward", ["2 + 2 = 4\n#### 4", "4"], tasks[2].truth,
                          cfg.buffer.explorer_input.tasksets[0].reward_fn_args, {"task": tasks[2]})
    assert outcome.rewards == [1.0, 0.0]  # veRL's strict GSM8K score wants `#### 4`


def test_refused_settings_are_one_error_that_lists_them_all(tmp_path: Path) -> None:
    home = tmp_path / "home"
    parquet(home / "data" / "gsm8k" / "train.parquet", ["openai/gsm8k", "codecontests"])
    with pytest.raises(ConfigError) as e:
        import_verl(CONFIG, ["data.filter_overlong_prompts=false", "data.truncation=right",
                             "trainer.logger=[console,mlflow]", "actor_rollout_ref.rollout.multi_turn.enable=true",
                             "+actor_rollout_ref.actor.use_magic=true", "trainer.resume_mode=resume_path"],
                    script=SCRIPT, environ={"HOME": str(home)})
    message = str(e.value)
    assert "6 veRL setting(s) cannot be imported" in message
    for expected in (
            "data.truncation: \"right\": rfthpc cuts the start of an over-long prompt (left) or skips it",
            "trainer.logger: mlflow: rfthpc writes metrics to console, wandb, tensorboard",
            "actor_rollout_ref.rollout.multi_turn.enable: true: veRL's multi-turn tool calling",
            "actor_rollout_ref.actor.use_magic: unknown veRL key",
            "trainer.resume_mode: 'resume_path': rfthpc resumes only from its own run directory",
            "custom_reward_function.path: null: veRL's default reward scores each row by its data source",
            "'codecontests': veRL runs the code against test cases"):
        assert expected in message, expected
    assert "--ignore KEY" in message


def test_ignore_accepts_a_refusal_as_a_note() -> None:
    result = import_verl(CONFIG, ["trainer.logger=[console,mlflow]"], ignore=["trainer.logger"],
                         script=SCRIPT, environ=ENV)
    assert any(n.startswith("trainer.logger: ignored at your request") for n in result.notes)
    assert result.config["monitor"]["monitor_type"] == ["console"]


def test_the_users_reward_function_and_a_critic(tmp_path: Path) -> None:
    """custom_reward_function becomes verl_reward's compute_score; with gae veRL trains a critic, whose
    settings are then read."""
    reward = tmp_path / "my_reward.py"
    reward.write_text("def score(data_source, solution_str, ground_truth, extra_info=None, scale=1.0):\n"
                      "    return scale * float(solution_str == ground_truth)\n")
    result = import_verl(CONFIG, ["actor_rollout_ref.rollout.name=vllm", f"custom_reward_function.path={reward}",
                                  "custom_reward_function.name=score", "+custom_reward_function.reward_kwargs.scale=2",
                                  "data.reward_fn_key=source", "critic.optim.lr=3e-6"])
    ts = result.config["buffer"]["explorer_input"]["tasksets"][0]
    assert ts["reward_fn_args"] == {"data_source_key": "source", "compute_score": f"{reward}:score",
                                    "reward_kwargs": {"scale": 2}}
    out = tmp_path / "ppo.yaml"
    out.write_text(result.text)
    cfg = load_config(out, check_paths=False).config
    assert (cfg.algorithm.algorithm_type, cfg.algorithm.advantage_fn) == ("ppo", "gae")
    assert (cfg.model.critic_model_path, cfg.trainer.critic_lr) == ("~/models/deepseek-llm-7b-chat", 3e-6)
    with pytest.raises(ConfigError, match=r"my_reward.py defines no function 'compute_score'"):
        import_verl(CONFIG, ["actor_rollout_ref.rollout.name=vllm", f"custom_reward_function.path={reward}"])


def test_one_or_two_gpus_are_colocated_and_a_launch_script_as_the_file(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """On one node of one or two GPUs, veRL's time-shared GPUs become rfthpc's colocated layout: the trainer
    and an engine of all the GPUs (tensor parallel 2 of 2) in one job; the result validates. Two GPUs with LoRA
    and the engine at 0.6 of each GPU: the settings of veRL's
    examples/grpo_trainer/run_qwen2_5-3b_gsm8k_grpo_lora.sh."""
    lora = ["actor_rollout_ref.model.lora_rank=64", "actor_rollout_ref.model.lora_alpha=32",
            "actor_rollout_ref.rollout.gpu_memory_utilization=0.6"]
    for gpus, tp, extra in ((1, 1, []), (2, 2, lora)):
        result = import_verl(CONFIG, [f"trainer.n_gpus_per_node={gpus}",
                                      f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}", *extra],
                             script=SCRIPT, environ=ENV)
        rollout = result.config["explorer"]["rollout_model"]
        assert (result.config["slurm"]["layout"], rollout["tensor_parallel_size"], rollout["engine_num"]) == \
            ("colocated", tp, 1)
        assert any("rfthpc runs the trainer and the explorers colocated" in n for n in result.notes)
        out = tmp_path / f"colocated{gpus}.yaml"
        out.write_text(result.text)
        cfg = load_config(out, check_paths=False).config
        assert (cfg.slurm.layout, cfg.slurm.trainer.gpus_per_node, cfg.slurm.explorer.gpus_per_node) == \
            ("colocated", gpus, tp)
        if extra:
            assert cfg.model.lora is not None and cfg.model.lora.lora_rank == 64
            assert cfg.explorer.rollout_model.gpu_memory_utilization == 0.6
    with pytest.raises(ConfigError, match=r"veRL, which is not installed in this Python; give it: rfthpc config "
                                          r"import --from verl PATH/TO/verl/trainer/config/ppo_trainer.yaml --script"):
        import_verl(SCRIPT, environ=ENV)
    # With veRL installed, its own config is read (found without importing veRL).
    package = tmp_path / "site" / "verl"
    shutil.copytree(EXAMPLES / "config", package / "trainer" / "config")
    (package / "__init__.py").write_text("raise ImportError('veRL must not be imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    result = import_verl(SCRIPT, ["trainer.nnodes=2"], environ=ENV)
    assert result.config["cluster"]["node_num"] == 2 and result.config["explorer"]["rollout_model"]["engine_num"] == 4
    assert f"Read: {package / 'trainer' / 'config' / 'ppo_trainer.yaml'}" in result.text
    (tmp_path / "mega.sh").write_text("python3 -m verl.trainer.main_ppo --config-name=ppo_megatron_trainer.yaml\n")
    with pytest.raises(ConfigError, match="--config-name ppo_megatron_trainer.yaml, but the config given is"):
        import_verl(CONFIG, script=tmp_path / "mega.sh", environ=ENV)


def test_mandatory_values_take_overrides_and_deletions() -> None:
    """veRL leaves some values to the command line (`name: ???`): an override sets it, `~` deletes it."""
    assert compose(CONFIG, ["actor_rollout_ref.rollout.name=vllm"]).data["actor_rollout_ref"]["rollout"]["name"] == \
        "vllm"
    assert "name" not in compose(CONFIG, ["~actor_rollout_ref.rollout.name"]).data["actor_rollout_ref"]["rollout"]


def test_cli_exit_codes_and_messages(tmp_path: Path) -> None:
    """Exit 2 with a message naming the problem: a key the config lacks, a missing file, a variable
    neither the script nor the environment sets; a good import end to end in a fresh process."""
    root = Path(__file__).resolve().parents[2]
    bad_script = tmp_path / "run.sh"
    bad_script.write_text("python3 -m verl.trainer.main_ppo data.train_files=$DATA_DIR/train.parquet "
                          "trainer.default_local_dir=$CKPT_DIR\n")
    for args, expected in (
            ([str(CONFIG), "--script", str(SCRIPT), "data.no_such_key=1"],
             ("override 'data.no_such_key=1': data.no_such_key is not in the config; to add it, write "
             "+data.no_such_key=1")),
            ([str(tmp_path / "none.yaml")], "config file " + str(tmp_path / "none.yaml") + " does not exist"),
            ([str(CONFIG), "--script", str(tmp_path / "none.sh")], "cannot be read"),
            ([str(CONFIG), "--script", str(bad_script)], ("$DATA_DIR: DATA_DIR is neither set by the script nor in "
                                                         "the environment")),
    ):
        done = subprocess.run([sys.executable, "-m", "rfthpc", "config", "import", "--from", "verl", *args],
                              capture_output=True, text=True, timeout=120, check=False, cwd=root,
                              env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "HOME": "/home/u"})
        assert done.returncode == 2, done.stderr
        assert expected in done.stderr and "Traceback" not in done.stderr
    assert "CKPT_DIR is neither set" in done.stderr  # every unset variable, in the same error
    done = subprocess.run([sys.executable, "-m", "rfthpc", "config", "import", "--from", "verl", str(CONFIG),
                           "--script", str(SCRIPT), "trainer.total_epochs=3"],
                          capture_output=True, text=True, timeout=120, check=False, cwd=root,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "HOME": "/home/u"})
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["buffer"]["total_epochs"] == 3
    assert "rfthpc: note: " in done.stderr and "Traceback" not in done.stderr
    assert main(["config", "import", "--from", "roll", str(CONFIG), "--script", str(SCRIPT)]) == 2


def test_a_resume_path_is_read_only_with_resume_mode_resume_path() -> None:
    """veRL reads trainer.resume_from_path only with resume_mode resume_path, which the import refuses."""
    result = import_verl(CONFIG, ["trainer.resume_from_path=checkpoints/"], script=SCRIPT, environ=ENV)
    assert "# - trainer.resume_from_path: read only with trainer.resume_mode: resume_path" in result.text
    with pytest.raises(ConfigError, match="trainer.resume_mode: 'resume_path'"):
        import_verl(CONFIG, ["trainer.resume_from_path=checkpoints/", "trainer.resume_mode=resume_path"],
                    script=SCRIPT, environ=ENV)

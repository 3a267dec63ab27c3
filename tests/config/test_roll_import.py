"""`rfthpc config import --from roll`: ROLL's own example configs become rfthpc configs that validate,
with every ROLL key accounted for; Hydra includes are followed; what cannot be honoured is one error."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rfthpc.cli import main
from rfthpc.config import load_config
from rfthpc.dialects.hydra import compose
from rfthpc.dialects.roll_import import import_roll
from rfthpc.dialects.translation import flatten
from rfthpc.errors import ConfigError

EXAMPLES = Path(__file__).parent / "roll_examples"
RLVR_ASYNC = EXAMPLES / "qwen2.5-7B-rlvr_megatron" / "rlvr_config_async.yaml"
RLVR_TOPR = EXAMPLES / "qwen2.5-7B-rlvr-offpolicy" / "rlvr_config.yaml"
AGENTIC = EXAMPLES / "qwen2.5-0.5B-agentic" / "agent_val_frozen_lake_async.yaml"
SOKOBAN_NATIVE = EXAMPLES / "qwen2.5-0.5B-agentic" / "agentic_val_sokoban_native.yaml"
PG_VARIANT = EXAMPLES / "qwen2.5-0.5B-agentic" / "agent_val_frozen_lake-pg_var.yaml"
MULTIMODAL = EXAMPLES / "qwen2.5-vl-7B-rlvr" / "rlvr_async.yaml"


def imported(tmp_path: Path, example: Path, *extra: str) -> tuple[dict, str]:
    """Run the CLI's import into tmp_path; the written config (as data) and its text."""
    out = tmp_path / "imported.yaml"
    assert main(["config", "import", "--from", "roll", str(example), "--out", str(out), *extra]) == 0
    text = out.read_text()
    return yaml.safe_load(text), text


def accounted(text: str, example: Path) -> list[str]:
    """The example's ROLL keys that the imported config's text does not mention (by the key itself, a
    section above it, or a helper key it belongs to)."""
    composed = compose(example)
    helpers = re.search(r"# Not ROLL settings.*?: (.*)", text)
    helper_keys = set(helpers.group(1).split(", ")) if helpers else set()
    missing = []
    for leaf in flatten(composed.data):
        parts = leaf.split(".")
        prefixes = [".".join(parts[:i]) for i in range(len(parts), 1, -1)] + ([parts[0]] if len(parts) == 1 else [])
        if parts[0] in helper_keys or any(re.search(rf"(?<![\w.]){re.escape(p)}(?![\w])", text) for p in prefixes):
            continue
        missing.append(leaf)
    return missing


@pytest.mark.parametrize("example", [RLVR_ASYNC, RLVR_TOPR, AGENTIC], ids=lambda p: p.parent.name)
def test_each_roll_example_imports_into_a_config_that_validates(tmp_path: Path, example: Path) -> None:
    _, text = imported(tmp_path, example)
    loaded = load_config(tmp_path / "imported.yaml", check_paths=False)
    assert loaded.config.synchronizer.sync_interval == 1
    assert text.startswith("# Imported from ROLL")
    assert accounted(text, example) == []


def test_async_rlvr_keeps_rolls_algorithm_and_resources(tmp_path: Path) -> None:
    cfg, text = imported(tmp_path, RLVR_ASYNC)
    config = load_config(tmp_path / "imported.yaml", check_paths=False).config
    assert (config.synchronizer.sync_offset, config.synchronizer.max_staleness) == (1, 1)
    assert (config.algorithm.repeat_times, config.buffer.batch_size, config.buffer.total_steps) == (8, 64, 1000)
    assert config.model.max_prompt_tokens == 2048 and config.model.max_response_tokens == 8192
    assert (config.model.temperature, config.model.top_p, config.model.top_k) == (0.99, 0.99, 100)
    alg = cfg["algorithm"]
    assert alg["advantage_fn"] == "lite_ppo"
    assert alg["advantage_fn_args"] == {"norm_mean_type": None, "norm_std_type": None, "reward_clip": 10,
                                        "whiten_advantages": True, "advantage_clip": 2.0, "max_len_mask": True,
                                        "difficulty_mask": True, "difficulty_low_threshold": 0.1,
                                        "difficulty_high_threshold": 0.95}  # ROLL's RLVR loss masks
    assert alg["policy_loss_fn"] == "ppo" and alg["policy_loss_fn_args"] == {"clip_range": 0.2, "clip_ratio_c": 1.4}
    assert alg["loss_agg_mode"] == "seq-mean-token-mean"  # ROLL's default, not rfthpc's
    assert alg["optimizer"]["lr_scheduler_type"] == "linear" and alg["optimizer"]["weight_decay"] == 0
    assert "lr_scheduler_type: \"linear\"  # ROLL default" in text
    # 16 trainer GPUs (Megatron TP 2: data parallel 8, 1 x 64 samples each: one update of all 64 groups)
    assert config.trainer.ppo_mini_batch_size == 64
    assert (config.cluster.node_num, config.cluster.gpu_per_node, config.explorer.rollout_model.engine_num) == (3, 8, 8)
    assert (config.slurm.trainer.nodes, config.slurm.trainer.gpus_per_node) == (2, 8)
    assert config.explorer.rollout_model.dtype == "float16" and config.model.dtype == "bfloat16"
    assert config.buffer.explorer_input.tasksets[0].path == "data/math_deepmath_deal.jsonl"
    assert "megatron_train: rfthpc trains with FSDP2" in text and "sglang: rfthpc's rollout engine is vLLM" in text


def test_off_policy_rlvr_keeps_the_topr_loss_and_its_validation(tmp_path: Path) -> None:
    cfg, text = imported(tmp_path, RLVR_TOPR)
    assert cfg["algorithm"]["policy_loss_fn"] == "topr"
    assert cfg["algorithm"]["advantage_fn_args"]["norm_mean_type"] == "batch"
    (val,) = cfg["buffer"]["explorer_input"]["eval_tasksets"]
    assert val["path"] == "data/math_benchmarks.jsonl" and val["rollout_args"]["temperature"] == 0.6
    assert cfg["explorer"]["eval_interval"] == 10
    # Colocated in ROLL (both on GPUs 0-15): separate jobs here, 16 + 16 GPUs.
    assert cfg["cluster"]["node_num"] == 4 and "share GPUs" in text
    assert "validation.eval_steps: ROLL ignores it" in text  # a key ROLL's dataclasses drop
    assert "actor_train.model_args.flash_attn: ROLL ignores it" in text


def test_agentic_frozen_lake_writes_tasksets_of_seeds(tmp_path: Path) -> None:
    cfg, text = imported(tmp_path, AGENTIC)
    inp = cfg["buffer"]["explorer_input"]
    (train,) = inp["tasksets"]
    args = train["workflow_args"]
    assert args["env"] == "frozen_lake" and args["env_args"] == {"size": 4, "p": 0.8, "is_slippery": False,
                                                                  "max_steps": 10}
    assert (args["max_turns"], args["max_tokens_per_turn"], args["max_context_tokens"]) == (10, 64, 8192)
    assert args["format_penalty"] == 0.01 and args["reward_type"] == "sum"
    assert cfg["algorithm"]["repeat_times"] == 8 and cfg["buffer"]["batch_size"] == 128
    assert cfg["algorithm"]["advantage_fn_args"] == {"norm_mean_type": "group", "norm_std_type": "group",
                                                     "whiten_advantages": True, "advantage_clip": 0.2}
    rows = Path(train["path"]).read_text().splitlines()
    assert len(rows) == 1024 * 128 and json.loads(rows[5]) == {"prompt": "FrozenLake seed 5", "env_args": {"seed": 5}}
    evals = {ts["name"]: ts for ts in inp["eval_tasksets"]}
    assert list(evals) == ["SimpleSokoban", "LargerSokoban", "SokobanDifferentGridVocab", "FrozenLake"]
    assert evals["LargerSokoban"]["workflow_args"]["env_args"] == {"dim_room": [10, 10], "num_boxes": 2,
                                                                   "search_depth": 10, "max_steps": 10}
    assert all(len(Path(ts["path"]).read_text().splitlines()) == 256 for ts in evals.values())
    assert "custom_envs.FrozenLakeThink: defined, but no env manager uses it" in text
    assert "max_actions_per_traj" in text.split("# Not ROLL settings")[1].splitlines()[0]  # a helper key


def test_refused_keys_are_one_error_that_lists_them_all(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        import_roll(RLVR_ASYNC, overrides=["add_token_level_kl=true", "+max_stepz=3",
                                           "+actor_train.training_args.lr_scheduler_type=polynomial"])
    message = str(e.value)
    assert "3 ROLL setting(s) cannot be imported" in message
    for key in ("add_token_level_kl: true",
                "actor_train.training_args.lr_scheduler_type: 'polynomial'",
                ("max_stepz: not a field of ROLL's RLVRConfig, so ROLL ignores it too: fix its name (did you mean"
                 " max_steps?)")):
        assert key in message
    assert "--ignore KEY" in message


def test_ignore_accepts_a_refusal_as_a_note(tmp_path: Path) -> None:
    result = import_roll(RLVR_ASYNC, ignore=["add_token_level_kl"], overrides=["add_token_level_kl=true"])
    assert any(n.startswith("add_token_level_kl: ignored at your request") for n in result.notes)
    assert "add_token_level_kl: ignored at your request" in result.text


def _include_chain(tmp_path: Path, self_first: bool) -> Path:
    (tmp_path / "envs" / "common").mkdir(parents=True)
    (tmp_path / "envs" / "common" / "base.yaml").write_text("max_steps: 7\nsave_steps: 3\nppo_epochs: 2\n")
    (tmp_path / "envs" / "mid.yaml").write_text("defaults:\n  - common/base@_here_\n  - _self_\nsave_steps: 4\n")
    main_file = tmp_path / "exp" / "main.yaml"
    main_file.parent.mkdir()
    order = "  - _self_\n  - ../envs/mid@_here_\n" if self_first else "  - ../envs/mid@_here_\n"
    main_file.write_text("defaults:\n" + order + "max_steps: 9\nsteps_alias: ${max_steps}\n")
    return main_file


@pytest.mark.parametrize("self_first", [False, True])
def test_hydra_includes_are_followed_in_order(tmp_path: Path, self_first: bool) -> None:
    composed = compose(_include_chain(tmp_path, self_first))
    # mid overrides base (its _self_ last); main overrides both unless its _self_ comes first.
    assert composed.data == {"max_steps": 7 if self_first else 9, "save_steps": 4, "ppo_epochs": 2,
                             "steps_alias": 7 if self_first else 9}
    assert [p.name for p in composed.files] == ["main.yaml", "mid.yaml", "base.yaml"]
    assert "max_steps" in composed.referenced


def test_an_agentic_config_through_an_include_chain(tmp_path: Path) -> None:
    """ROLL's agentic example with its environments one include further away, and one override."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "traj_envs.yaml").write_text((EXAMPLES / "config" / "traj_envs.yaml").read_text())
    (tmp_path / "lib" / "all_envs.yaml").write_text("defaults:\n  - traj_envs@_here_\n")
    (tmp_path / "exp").mkdir()
    text = AGENTIC.read_text().replace("../config/traj_envs@_here_", "/lib/all_envs@_here_")
    (tmp_path / "exp" / "agentic.yaml").write_text(text)
    (tmp_path / "root.yaml").write_text("defaults:\n  - exp/agentic@_here_\n")
    result = import_roll(tmp_path / "root.yaml", tmp_path / "tasks", overrides=["max_steps=2"])
    train = result.config["buffer"]["explorer_input"]["tasksets"][0]
    assert train["workflow_args"]["max_turns"] == 10  # from the included file's max_actions_per_traj
    assert len(result.tasksets[tmp_path / "tasks" / "train.jsonl"]) == 2 * 128


@pytest.mark.parametrize(("defaults", "message"), [
    ("  - missing@_here_\n", "missing.yaml does not exist"),
    ("  - ../loop@_here_\n", "include each other in a cycle"),
    ("  - ../up/file\n", "give the place: @_here_"),
    ("  - override hydra/launcher: submitit\n", "`override` selects another option"),
])
def test_bad_includes_are_config_errors(tmp_path: Path, defaults: str, message: str) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "loop.yaml").write_text("defaults:\n  - d/cfg@_here_\n")
    cfg = tmp_path / "d" / "cfg.yaml"
    cfg.write_text("defaults:\n" + defaults + "max_steps: 1\n")
    with pytest.raises(ConfigError, match=re.escape(message)):
        compose(tmp_path / "loop.yaml" if "loop" in defaults else cfg)


def test_anchor_holders_and_group_options(tmp_path: Path) -> None:
    (tmp_path / "algo").mkdir()
    (tmp_path / "algo" / "fast.yaml").write_text("lr: 2.0e-6\n")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("defaults:\n  - algo: fast\n  - _self_\n_common: &common {dtype: bf16}\n"
                   "actor_train:\n  model_args: *common\n")
    composed = compose(cfg, ["+extra=[1,2]", "~_common"])
    assert composed.data == {"algo": {"lr": 2e-6}, "actor_train": {"model_args": {"dtype": "bf16"}}, "extra": [1, 2]}
    assert composed.anchored == {"_common"}


def test_cli_exit_codes(tmp_path: Path) -> None:
    out = tmp_path / "x.yaml"
    assert main(["config", "import", "--from", "roll", str(MULTIMODAL), "--out", str(out)]) == 2
    assert not out.exists()  # nothing written for a refused import
    assert main(["config", "import", "--from", "roll", str(AGENTIC)]) == 2  # tasksets need --out
    assert main(["config", "import", "--from", "roll", str(tmp_path / "none.yaml")]) == 2
    with pytest.raises(SystemExit) as e:
        main(["config", "import", "--from", "verl2", str(RLVR_ASYNC)])
    assert e.value.code == 2
    done = subprocess.run([sys.executable, "-m", "rfthpc", "config", "import", "--from", "roll", str(RLVR_TOPR)],
                          capture_output=True, text=True, timeout=120, check=False,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["algorithm"]["policy_loss_fn"] == "topr"
    assert "rfthpc: note: " in done.stderr and "Traceback" not in done.stderr


def test_keys_the_pipelines_config_lacks_are_noted_as_rolls_drops(tmp_path: Path) -> None:
    # difficulty_mask is a field of ROLL's RLVRConfig only: its agentic pipeline drops it, so the import does too.
    result = import_roll(AGENTIC, tmp_path / "tasks", overrides=["+difficulty_mask=true", "max_steps=1"])
    assert any(n.startswith("difficulty_mask: ROLL ignores it (not a field of ROLL's AgenticConfig")
               for n in result.notes)


def test_a_lora_adapter_of_actor_train_is_model_lora(tmp_path: Path) -> None:
    """ROLL trains an adapter when lora_target is set (rank 8 and alpha twice the rank by default)."""
    result = import_roll(RLVR_TOPR, overrides=[
        "+actor_train.model_args.lora_target='q_proj,v_proj'", "+actor_infer.model_args.lora_target='q_proj,v_proj'"])
    cfg, text = result.config, result.text
    assert cfg["model"]["lora"] == {"target_modules": ["q_proj", "v_proj"], "lora_rank": 8, "lora_alpha": 16}
    assert "ROLL default (2 x rank)" in text
    assert "actor_infer.model_args.lora_target: the adapter is actor_train's" in text


def _merged(tmp_path: Path, example: Path) -> Path:
    """`example` with its `defaults:` merged in as Hydra merges them (the included file first, then the
    file's own keys), interpolations kept: one file that needs no other."""
    from omegaconf import OmegaConf

    own = yaml.safe_load(example.read_text())
    (include,) = own.pop("defaults")
    included = yaml.safe_load((example.parent / (include.split("@")[0] + ".yaml")).read_text())
    merged = OmegaConf.to_container(OmegaConf.merge(included, own), resolve=False)
    path = tmp_path / example.name
    path.write_text(yaml.safe_dump(merged, sort_keys=False))
    return path


@pytest.mark.parametrize("layout", ["original", "merged"])
def test_keys_roll_drops_are_noted_in_either_layout(tmp_path: Path, layout: str) -> None:
    """traj_envs.yaml's keys that no config reads: ROLL's dataclasses drop them, so the import notes them,
    whether they come through `defaults:` or sit in the file itself."""
    example = AGENTIC if layout == "original" else _merged(tmp_path, AGENTIC)
    result = import_roll(example, tmp_path / "tasks")
    for key in ("all_response_pattern", "single_prompt_agent_template", "single_prompt_agent_system_template"):
        assert f"{key}: not a field of ROLL's AgenticConfig: ROLL ignores it, and so does the import" in result.notes


def test_the_agentic_policy_gradient_worker_maps_its_pg_variant(tmp_path: Path) -> None:
    result = import_roll(PG_VARIANT, tmp_path / "tasks")
    alg = result.config["algorithm"]
    assert alg["policy_loss_fn"] == "topr"
    assert alg["policy_loss_fn_args"] == {"positive_weight": 1.0, "negative_weight": 1.0, "advantage_threshold": None}
    assert "agentic_actor_pg_worker.ActorWorker, actor_train.pg_variant: topr" in result.text


def test_features_outside_rfthpc_are_refused_once_each_without_knocking_other_keys_over(tmp_path: Path) -> None:
    """ROLL's sokoban_native example: its native Sokoban is refused, naming it; its other settings (which
    import in the FrozenLake example; step_reinforce with StepEnvManager) are read in the same round."""
    with pytest.raises(ConfigError) as e:
        import_roll(SOKOBAN_NATIVE, tmp_path / "tasks")
    refused = {line.split(":")[0].strip(" -"): line for line in str(e.value).splitlines() if line.startswith("  - ")}
    assert set(refused) == {"custom_envs.SokobanNativeEnv.env_type",
                            "actor_train.training_args.gradient_accumulation_steps"}
    assert "native-mode Sokoban" in refused["custom_envs.SokobanNativeEnv.env_type"]
    assert "2048 samples" in refused["actor_train.training_args.gradient_accumulation_steps"]  # ROLL's 1 x 128 x 16


STEP_MANAGER = "roll.pipeline.agentic.env_manager.step_env_manager.StepEnvManager"


@pytest.mark.parametrize("estimator", ["gigpo", "step_reinforce"])
def test_rolls_step_wise_estimators_train_each_step(tmp_path: Path, estimator: str) -> None:
    """ROLL's FrozenLake example as its GiGPO page sets it up (env_manager_cls StepEnvManager, which its
    environments read, and gigpo or step_reinforce): the
    trained taskset plays step-wise, the advantage computed as ROLL does (ROLL's gigpo is rfthpc's roll_gigpo) gets
    ROLL's settings, and the result validates."""
    cfg, text = imported(tmp_path, AGENTIC, f"adv_estimator={estimator}", f"env_manager_cls={STEP_MANAGER}",
                         "+step_reward_gamma=0.9", "+step_reward_weight=0.5")
    config = load_config(tmp_path / "imported.yaml", check_paths=False).config
    alg = cfg["algorithm"]
    assert alg["advantage_fn"] == {"gigpo": "roll_gigpo"}.get(estimator, estimator)
    expected = {"step_reward_gamma": 0.9} | ({"episode_reward_weight": 1.0, "step_reward_weight": 0.5}
                                            if estimator == "gigpo" else {})
    assert {k: alg["advantage_fn_args"][k] for k in alg["advantage_fn_args"] if k in
            ("step_reward_gamma", "episode_reward_weight", "step_reward_weight")} == expected
    (train,) = config.buffer.explorer_input.tasksets
    # ROLL's step prompt without history_length is the current observation alone.
    assert train.workflow_args["step_wise"] is True and train.workflow_args["history_turns"] == 0
    assert all("step_wise" not in ts.workflow_args for ts in config.buffer.explorer_input.eval_tasksets)
    assert "StepEnvManager" in text and accounted(text, AGENTIC) == []


def test_rolls_history_length_is_the_steps_history(tmp_path: Path) -> None:
    """ROLL's StepEnvManager prompt holds history[-history_length:-1]: the history_length - 1 steps before."""
    cfg, text = imported(tmp_path, AGENTIC, "adv_estimator=gigpo", f"env_manager_cls={STEP_MANAGER}",
                         "+custom_envs.FrozenLake.history_length=3")
    (train,) = load_config(tmp_path / "imported.yaml", check_paths=False).config.buffer.explorer_input.tasksets
    assert train.workflow_args["history_turns"] == 2
    assert "custom_envs.FrozenLake.history_length: 3" in text and accounted(text, AGENTIC) == []


@pytest.mark.parametrize(("overrides", "key", "message"), [
    (["adv_estimator=gigpo"], "adv_estimator", "ROLL needs env_manager_cls"),
    ([f"env_manager_cls={STEP_MANAGER}"], "custom_envs.FrozenLake.env_manager_cls",
     "StepEnvManager with adv_estimator 'grpo'"),
])
def test_step_samples_and_step_estimators_come_together(tmp_path: Path, overrides, key, message) -> None:
    with pytest.raises(ConfigError) as e:
        import_roll(AGENTIC, tmp_path / "tasks", overrides=overrides)
    (line,) = [line for line in str(e.value).splitlines() if line.startswith("  - ")]
    assert line.startswith(f"  - {key}: ") and message in line


def test_a_multimodal_config_is_refused_once_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        import_roll(MULTIMODAL)
    (line,) = [line for line in str(e.value).splitlines() if line.startswith("  - ")]
    assert line.startswith("  - actor_train.data_args.image_max_pixels: multimodal training (images, video or audio")


def test_rolls_rlvr_masks_are_lite_ppos(tmp_path: Path) -> None:
    """difficulty_mask and max_len_mask (ROLL's RLVR examples set both) become lite_ppo's masks; ROLL's agentic
    pipeline does not apply them."""
    args = import_roll(RLVR_TOPR, overrides=["difficulty_low_threshold=0.2"]).config["algorithm"]["advantage_fn_args"]
    masks = ("max_len_mask", "difficulty_mask", "difficulty_low_threshold", "difficulty_high_threshold")
    assert [args[k] for k in masks] == [True, True, 0.2, 0.95]
    args = import_roll(AGENTIC, tmp_path / "tasks").config["algorithm"]["advantage_fn_args"]
    assert "max_len_mask" not in args and "difficulty_mask" not in args


def test_an_unknown_policy_loss_does_not_knock_the_loss_settings_over(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        import_roll(PG_VARIANT, tmp_path / "tasks", overrides=["actor_train.pg_variant=ppo_clip",
                                                               "+loss_agg_mode=token-mean", "+pg_clip=0.1"])
    refused = [line for line in str(e.value).splitlines() if line.startswith("  - ")]
    assert len(refused) == 1 and refused[0].startswith("  - actor_train.pg_variant: 'ppo_clip'")

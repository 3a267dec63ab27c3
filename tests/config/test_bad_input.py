"""Each class of bad config input gets a clear error naming the key and the fix."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from rfthpc.config import dump_yaml, load_config
from rfthpc.config.load import load_resolved
from rfthpc.errors import ConfigError
from tests.config.conftest import write

BASE = """
project: p
name: n
algorithm:
  algorithm_type: grpo
  repeat_times: 4
model:
  model_path: {model}
  max_prompt_tokens: 64
  max_response_tokens: 32
cluster:
  node_num: 1
  gpu_per_node: 2
buffer:
  batch_size: 4
  explorer_input:
    taskset:
      name: t
      path: {data}
      format:
        prompt_key: question
        response_key: answer
    default_workflow_type: math_workflow
"""


@pytest.fixture
def base(tmp_path: Path) -> str:
    (tmp_path / "model").mkdir()
    (tmp_path / "data.jsonl").write_text('{"question": "1+1", "answer": "#### 2"}\n')
    return textwrap.dedent(BASE).format(model=tmp_path / "model", data=tmp_path / "data.jsonl")


def _error(path: Path, overrides: list[str] | None = None) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(path, overrides)
    return str(e.value)


def test_the_base_config_is_valid(tmp_path: Path, base: str) -> None:
    assert load_config(write(tmp_path, base)).config.buffer.train_batch_size == 16


def test_unknown_key_names_full_path_file_and_suggestion(tmp_path: Path, base: str) -> None:
    cfg = write(tmp_path, base.replace("prompt_key: question", "promt_key: question"))
    msg = _error(cfg)
    assert "buffer.explorer_input.taskset.format.promt_key: unknown key" in msg
    assert "did you mean 'buffer.explorer_input.taskset.format.prompt_key'" in msg
    assert str(cfg) in msg


def test_several_unknown_keys_are_reported_together(tmp_path: Path, base: str) -> None:
    msg = _error(write(tmp_path, base + "trainr:\n  save_interval: 3\nmonitr: {}\n"))
    assert "trainr: unknown key; did you mean 'trainer'" in msg
    assert "monitr: unknown key; did you mean 'monitor'" in msg


def test_wrong_type(tmp_path: Path, base: str) -> None:
    msg = _error(write(tmp_path, base.replace("batch_size: 4", "batch_size: four")))
    assert "buffer.batch_size: expected an integer, got 'four'" in msg


def test_bad_choice_lists_choices(tmp_path: Path, base: str) -> None:
    msg = _error(write(tmp_path, base + "mode: explorer\n"))
    assert "mode: 'explorer' is not one of 'both', 'explore', 'train'; did you mean 'explore'?" in msg


def test_missing_required_model_path(tmp_path: Path, base: str) -> None:
    lines = [ln for ln in base.splitlines() if "model_path" not in ln]
    msg = _error(write(tmp_path, "\n".join(lines)))
    assert "model.model_path: missing" in msg


def test_gpus_over_the_cluster(tmp_path: Path, base: str) -> None:
    text = base + "explorer:\n  rollout_model:\n    engine_num: 2\n    tensor_parallel_size: 2\n"
    msg = _error(write(tmp_path, text))
    assert "need 4 GPUs, more than the cluster's 1 x 2 = 2" in msg


def _judge(base: str, **fields: int | str) -> str:
    """`base` with an auxiliary model (the policy's own directory serves as its weights)."""
    model = base.split("model_path: ", 1)[1].split("\n", 1)[0]
    extra = "".join(f"      {k}: {v}\n" for k, v in fields.items())
    return base + f"explorer:\n  auxiliary_models:\n    - name: judge\n      model_path: {model}\n{extra}"


def test_auxiliary_engines_placed_per_explorer_count_per_explorer(tmp_path: Path, base: str) -> None:
    """With placement per_explorer, each explorer runs its rollout engine and one engine of the auxiliary
    model on one node; there are as many as explorers."""
    per_explorer = {"placement": "per_explorer"}
    config = _judge(base.replace("gpu_per_node: 2", "gpu_per_node: 4"), tensor_parallel_size=4, **per_explorer)
    msg = _error(write(tmp_path, config))
    assert ("an explorer runs its engines on one node: 5 GPUs (the rollout model's tensor_parallel_size and that of "
            "every auxiliary model placed per_explorer), more than cluster.gpu_per_node 4") in msg
    msg = _error(write(tmp_path, _judge(base, engine_num=3, **per_explorer)))
    assert "explorer.auxiliary_models[0].engine_num: 3 with placement per_explorer; every explorer starts one" in msg
    assert "(explorer.rollout_model.engine_num = 1); set 1, or placement: shared for 3 engines" in msg


def test_shared_auxiliary_engines_count_once_for_the_run(tmp_path: Path, base: str) -> None:
    """Trinity-RFT's counting (placement shared, the default): a judge's engine_num engines of
    tensor_parallel_size GPUs serve the whole run. Trinity's example: one node of 8 GPUs, 2 rollout engines of
    1 GPU, one judge on 2 GPUs: the explorer side takes 4 GPUs (not 2 x (1 + 2) = 6), the trainer the other 4."""
    eight = base.replace("gpu_per_node: 2", "gpu_per_node: 8")
    trinity = eight + "explorer:\n  rollout_model:\n    engine_num: 2\n"
    model = base.split("model_path: ", 1)[1].split("\n", 1)[0]
    judge = f"  auxiliary_models:\n    - name: judge\n      model_path: {model}\n      tensor_parallel_size: 2\n"
    cfg = load_config(write(tmp_path, trinity + judge)).config
    assert cfg.explorer.auxiliary_models[0].placement == "shared"
    assert (cfg.slurm.explorer.array_size, cfg.slurm.explorer.gpus_per_node, cfg.slurm.trainer.gpus_per_node) == (2, 1, 4)
    per_explorer = load_config(write(tmp_path, trinity + judge + "      placement: per_explorer\n")).config
    assert (per_explorer.slurm.explorer.gpus_per_node, per_explorer.slurm.trainer.gpus_per_node) == (3, 2)
    # Three judges on 2 GPUs each with two explorers of 1 leave the trainer nothing of 8.
    msg = _error(write(tmp_path, trinity + judge + "      engine_num: 3\n"))
    assert "the explorers and auxiliary model servers take 8 of 8 GPUs and leave none for the trainer" in msg
    msg = _error(write(tmp_path, trinity + judge + "      engine_num: 4\n"))
    assert "plus 8 GPUs of the shared auxiliary models' servers (engine_num x tensor_parallel_size of each) " \
           "need 10 GPUs, more than the cluster's 1 x 8 = 8" in msg


def test_shared_auxiliary_models_need_a_server_they_can_run(tmp_path: Path, base: str) -> None:
    four = base.replace("gpu_per_node: 2", "gpu_per_node: 4")
    msg = _error(write(tmp_path, _judge(four, engine_type="transformers")))
    assert "explorer.auxiliary_models[0].engine_type: transformers runs inside the explorer process only" in msg
    assert "set placement: per_explorer, or engine_type: vllm" in msg
    load_config(write(tmp_path, _judge(four, engine_type="transformers", placement="per_explorer")))
    msg = _error(write(tmp_path, _judge(four, tensor_parallel_size=8)))
    assert "explorer.auxiliary_models[0].tensor_parallel_size: 8; each engine of its server runs on one node" in msg
    msg = _error(write(tmp_path, _judge(base, tensor_parallel_size=1) + "slurm:\n  server:\n    array_size: 2\n"))
    assert "slurm.server.array_size: 2; a server job has one task per engine" in msg
    msg = _error(write(tmp_path, _judge(base, server_timeout=0)))
    assert "explorer.auxiliary_models[0].server_timeout: 0.0 must be > 0" in msg


def test_auxiliary_model_names_are_checked_before_the_queue(tmp_path: Path, base: str) -> None:
    """Workflows address auxiliary models by name: a duplicate or `policy` one is refused when the
    config is loaded (it used to be found by the explorer, after the queue); an unnamed one (Trinity-RFT
    addresses them by position) is named by its position."""
    model = base.split("model_path: ", 1)[1].split("\n", 1)[0]
    cases = ((["judge", "judge"], "'judge'"), (["policy"], "'policy'"), (["", "auxiliary_0"], "'auxiliary_0'"))
    for names, bad in cases:
        models = "".join(f"    - name: '{n}'\n      model_path: {model}\n" for n in names)
        config = base.replace("gpu_per_node: 2", "gpu_per_node: 4") + f"explorer:\n  auxiliary_models:\n{models}"
        msg = _error(write(tmp_path, config))
        assert f"explorer.auxiliary_models[{len(names) - 1}].name={bad}: give each auxiliary model a unique name" in msg


def test_explorers_leaving_no_gpu_for_the_trainer(tmp_path: Path, base: str) -> None:
    msg = _error(write(tmp_path, base + "explorer:\n  rollout_model:\n    engine_num: 2\n"))
    assert "leave none for the trainer" in msg


def test_prompt_plus_response_over_max_model_len(tmp_path: Path, base: str) -> None:
    msg = _error(write(tmp_path, base.replace("max_prompt_tokens: 64", "max_prompt_tokens: 64\n  max_model_len: 80")))
    assert "max_prompt_tokens (64) + max_response_tokens (32) exceed max_model_len (80)" in msg


def test_train_batch_size_not_a_multiple_of_repeat_times(tmp_path: Path, base: str) -> None:
    msg = _error(write(tmp_path, base.replace("batch_size: 4", "batch_size: 4\n  train_batch_size: 18")))
    assert "buffer.train_batch_size: 18 is not a multiple of algorithm.repeat_times (4)" in msg


def test_a_trainer_step_of_more_groups_than_the_explorers_step_is_refused(tmp_path: Path, base: str) -> None:
    """The explorers count batch_size tasks to a trainer step and stay within max_staleness of it: a trainer
    step of more groups would wait for groups they hold back (a hang until sync_timeout)."""
    msg = _error(write(tmp_path, base.replace("batch_size: 4", "batch_size: 4\n  train_batch_size: 32")))
    assert ("buffer.train_batch_size: 32 responses are 8 groups of 4 per trainer step, more than buffer.batch_size "
            "(4 tasks)") in msg and "Set train_batch_size to 16 (batch_size x repeat_times)" in msg, msg
    assert load_config(write(tmp_path, base.replace("batch_size: 4", "batch_size: 4\n  train_batch_size: 8")))


def test_repeat_times_below_one(tmp_path: Path, base: str) -> None:
    assert "algorithm.repeat_times: 0 must be >= 1" in _error(write(tmp_path, base.replace("repeat_times: 4",
                                                                                           "repeat_times: 0")))


def test_keep_published_below_two(tmp_path: Path, base: str) -> None:
    msg = _error(write(tmp_path, base + "synchronizer:\n  keep_published: 1\n"))
    assert "synchronizer.keep_published: 1 must be >= 2" in msg


def test_sync_interval_below_one(tmp_path: Path, base: str) -> None:
    msg = _error(write(tmp_path, base + "synchronizer:\n  sync_interval: 0\n"))
    assert "synchronizer.sync_interval: 0 must be >= 1" in msg


def test_unknown_algorithm_lists_known_ones(tmp_path: Path, base: str) -> None:
    msg = _error(write(tmp_path, base.replace("algorithm_type: grpo", "algorithm_type: grpoo")))
    assert "unknown algorithm 'grpoo'" in msg and "grpo" in msg and "ppo" in msg


def test_unknown_advantage_fn_lists_known_ones(tmp_path: Path, base: str) -> None:
    msg = _error(write(tmp_path, base.replace("repeat_times: 4", "repeat_times: 4\n  advantage_fn: gae2")))
    assert "algorithm.advantage_fn" in msg and "'gae2'" in msg and "grpo" in msg


def test_an_advantage_on_a_dataset_stage_is_refused(tmp_path: Path, base: str) -> None:
    """A run's advantage_fn inherited by its SFT warm-up would make it an RL stage waiting for experience."""
    staged = base.replace("repeat_times: 4", "repeat_times: 4\n  advantage_fn: gigpo") + textwrap.dedent("""
        stages:
          - stage_name: warmup
            mode: train
            algorithm: {algorithm_type: sft}
            buffer:
              train_batch_size: 4
              trainer_input:
                experience_buffer: {name: sft, storage_type: file, path: DATA, format: {prompt_key: question,
                                                                                      response_key: answer}}
          - stage_name: rl
        """)
    data = base.split("\n      path: ", 1)[1].split("\n", 1)[0]  # the taskset's file
    msg = _error(write(tmp_path, staged.replace("DATA", data)))
    assert msg.count("\n  - ") == 1, msg  # the one problem
    assert ("stage 'warmup': algorithm.advantage_fn: 'gigpo' scores the explorers' experience, but algorithm_type "
            "'sft' trains on a dataset; remove it (in a run of stages, set it in the RL stage's algorithm") in msg, msg


def test_unknown_workflow_and_reward_list_known_ones(tmp_path: Path, base: str) -> None:
    text = base.replace("default_workflow_type: math_workflow",
                        "default_workflow_type: maths_workflow\n    default_reward_fn_type: acc")
    msg = _error(write(tmp_path, text))
    assert "default_workflow_type" in msg and "'maths_workflow'" in msg and "math_workflow" in msg
    assert "default_reward_fn_type" in msg and "'acc'" in msg


def test_missing_paths_hint_that_compute_nodes_have_no_internet(tmp_path: Path, base: str) -> None:
    text = base.replace(str(tmp_path / "model"), "Qwen/Qwen2.5-1.5B-Instruct").replace(
        str(tmp_path / "data.jsonl"), str(tmp_path / "nope.jsonl"))
    msg = _error(write(tmp_path, text))
    assert "model.model_path: 'Qwen/Qwen2.5-1.5B-Instruct' is not a local path" in msg
    assert "huggingface-cli download Qwen/Qwen2.5-1.5B-Instruct --local-dir DIR" in msg
    assert "buffer.explorer_input.tasksets[0].path" in msg and "does not exist" in msg
    assert "compute nodes have no internet" in msg


def test_unsupported_trinity_key_is_named_with_its_reason(tmp_path: Path, base: str) -> None:
    msg = _error(write(tmp_path, base + "trainer:\n  fix_actor_microbatch_loss_scale: true\n"))
    assert "trainer.fix_actor_microbatch_loss_scale: Trinity-RFT key not supported by rfthpc" in msg
    assert "algorithm.loss_agg_mode" in msg


def test_trinity_keys_without_meaning_here_are_ignored_with_a_note(tmp_path: Path, base: str) -> None:
    """Ray's namespace, the deprecated runner_num, the log section: one note per reason, no error."""
    text = base + "ray_namespace: x\nlog: {level: INFO}\nexplorer:\n  runner_num: 4\n"
    notes = load_config(write(tmp_path, text)).notes
    assert any(n.startswith("ray_namespace: ignored: rfthpc runs on Slurm") for n in notes), notes
    assert any(n.startswith("explorer.runner_num: ignored: deprecated") and "runner_per_model" in n for n in notes)
    assert any(n.startswith("log: ignored: rfthpc writes each role's log to <run dir>/log/") for n in notes)


def test_unknown_verl_key_in_trainer_config(tmp_path: Path, base: str) -> None:
    text = base + ("trainer:\n  trainer_config:\n    actor_rollout_ref:\n      actor:\n"
                   "        ppo_micro_batch_size_per_gpus: 2\n")
    msg = _error(write(tmp_path, text))
    assert "trainer.trainer_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpus" in msg
    assert "did you mean actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" in msg


def test_env_interpolation_with_and_without_default(tmp_path: Path, base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RFTHPC_TEST_BS", "8")
    cfg = load_config(write(tmp_path, base.replace("batch_size: 4", "batch_size: ${oc.env:RFTHPC_TEST_BS,2}"))).config
    assert cfg.buffer.batch_size == 8
    monkeypatch.delenv("RFTHPC_TEST_BS")
    cfg = load_config(write(tmp_path, base.replace("batch_size: 4", "batch_size: ${oc.env:RFTHPC_TEST_BS,2}"))).config
    assert cfg.buffer.batch_size == 2
    msg = _error(write(tmp_path, base.replace("batch_size: 4", "batch_size: ${oc.env:RFTHPC_TEST_BS}")))
    assert ("buffer.batch_size: '${oc.env:RFTHPC_TEST_BS}' reads the environment variable RFTHPC_TEST_BS, which is "
            "not set; export it (export RFTHPC_TEST_BS=...) or give the config a default: "
            "${oc.env:RFTHPC_TEST_BS,DEFAULT}") in msg


def test_shell_variables_in_setup_lines_are_named_and_escapable(tmp_path: Path, base: str) -> None:
    """`${SLURM_JOB_ID}` in a setup line is an interpolation to OmegaConf: the error names the line and
    the two spellings that reach the job script; the escaped one does."""
    msg = _error(write(tmp_path, base + 'slurm:\n  setup: ["export TMPDIR=/scratch/${SLURM_JOB_ID}"]\n'))
    assert "slurm.setup[0]: cannot resolve an interpolation" in msg and "$VAR or \\${VAR}" in msg
    cfg = load_config(write(tmp_path, base + "slurm:\n  setup:\n    - export TMPDIR=/scratch/\\${SLURM_JOB_ID}\n"))
    assert cfg.config.slurm.setup == ["export TMPDIR=/scratch/${SLURM_JOB_ID}"]
    stored = write(tmp_path, dump_yaml(cfg.base), "run-config.yaml")  # the run's copy reads back the same
    assert load_resolved(stored).config.slurm.setup == ["export TMPDIR=/scratch/${SLURM_JOB_ID}"]


def test_not_yaml_and_not_a_mapping(tmp_path: Path) -> None:
    assert "not valid YAML" in _error(write(tmp_path, "a: [1, 2\n"))
    assert "top level must be a mapping" in _error(write(tmp_path, "- 1\n- 2\n"))
    assert "does not exist" in _error(tmp_path / "missing.yaml")
    assert "is a directory; give the YAML file in it" in _error(tmp_path)
    binary = tmp_path / "model.safetensors"
    binary.write_bytes(b"\x80\x81\xfe")
    assert "not UTF-8 text (byte 0); is it a YAML config?" in _error(binary)


def test_both_taskset_and_tasksets(tmp_path: Path, base: str) -> None:
    text = base.replace("    default_workflow_type",
                        "    tasksets:\n      - name: u\n        path: x\n    default_workflow_type")
    assert "both `taskset` and `tasksets`" in _error(write(tmp_path, text))


@pytest.mark.parametrize("advantage_fn", ["grpo", "rloo", "opmd"])
def test_one_response_per_task_for_a_group_advantage(tmp_path: Path, base: str, advantage_fn: str) -> None:
    path = write(tmp_path, base.replace("repeat_times: 4", "repeat_times: 1"))
    msg = _error(path, ["--algorithm.advantage_fn", advantage_fn])
    assert f"buffer.explorer_input.tasksets[0].repeat_times: 1 response per task, but algorithm.advantage_fn " \
           f"{advantage_fn!r} compares the responses to one task" in msg
    assert "algorithm.repeat_times: 1 response" in _error(path, ["--mode", "train"])
    load_config(path, ["--algorithm.advantage_fn", "reinforce"])  # no groups: fine


@pytest.mark.parametrize(("section", "message"), [
    ("algorithm:\n  kl_loss_fn: k3\n  kl_loss_fn_args: {beta: 0.001}\n",
     "algorithm.kl_loss_fn_args: 'beta' not accepted; accepted: kl_coef"),
    ("algorithm:\n  kl_penalty_fn: k1\n  kl_penalty_fn_args: {kl_coeff: 0.1}\n",
     "algorithm.kl_penalty_fn_args: 'kl_coeff' not accepted; accepted: adaptive, horizon, kl_coef, target_kl"),
    ("algorithm:\n  kl_penalty_fn: k1\n  kl_penalty_fn_args: {adaptive: true}\n",
     "adaptive KL needs target_kl > 0 and horizon > 0"),
    ("algorithm:\n  entropy_loss_fn: default\n  entropy_loss_fn_args: {entropy_coeff: 0.01}\n",
     "entropy_loss_fn_args: 'entropy_coeff' not accepted by entropy"),
    ("algorithm:\n  policy_loss_fn_args: {clip_ratio: 0.2}\n", "policy_loss_fn_args: 'clip_ratio' not accepted"),
])
def test_arguments_of_the_algorithm_functions_are_checked_before_the_queue(
        tmp_path: Path, base: str, section: str, message: str) -> None:
    """Each reaches the trainer only after the queue wait; validation reports it first, naming the key."""
    text = base.replace("algorithm:\n  algorithm_type: grpo\n", section + "  algorithm_type: grpo\n")
    assert message in _error(write(tmp_path, text))


@pytest.mark.parametrize(("edit", "message"), [
    (("response_key: answer", "response_key: answer\n      workflow_args: {temperature: 1}"),
     "tasksets[0].workflow_args: 'temperature' not used by workflow 'math_workflow'; it takes: system_prompt"),
    (("response_key: answer", "response_key: answer\n      reward_fn_args: {lenient: true}"),
     "tasksets[0].reward_fn_args ['lenient'] are not parameters of reward function 'math_reward'"),
    (("default_workflow_type: math_workflow", "default_workflow_type: simple_workflow"),
     "tasksets[0].default_reward_fn_type: workflow 'simple_workflow' needs a reward function"),
    (("prompt_key: question", "prompt_key: problem"),
     ("tasksets[0] ({data}, split 'train'): format.prompt_key='problem' is not a column; the columns are: "
      "question, answer")),
])
def test_workflow_reward_and_columns_are_checked_before_the_queue(
        tmp_path: Path, base: str, edit: tuple[str, str], message: str) -> None:
    msg = _error(write(tmp_path, base.replace(*edit)))
    assert message.format(data=tmp_path / "data.jsonl") in msg


def test_columns_come_from_the_header_of_a_large_parquet(tmp_path: Path, base: str) -> None:
    """A 200k-row parquet: the schema says prompt_key names no column, without reading the rows."""
    import time

    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "big"
    data.mkdir()
    pq.write_table(pa.table({"q": [f"{i}+1" for i in range(200_000)], "answer": ["#### 1"] * 200_000}),
                   data / "train.parquet")
    path = write(tmp_path, base.replace(str(tmp_path / "data.jsonl"), str(data)))
    began = time.perf_counter()
    msg = _error(path)
    assert "format.prompt_key='question' is not a column; the columns are: q, answer" in msg
    assert not list(data.glob("*.arrow")) and time.perf_counter() - began < 60


def test_one_chat_template_for_every_role(tmp_path: Path, base: str) -> None:
    """The explorer's template is the trainer's too (an SFT warm-up trains on what explorers roll out);
    two different templates are refused, naming both keys."""
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages[0]['content'] }}")
    text = base + "explorer:\n  rollout_model:\n    chat_template: 'A{{ messages }}'\n"
    cfg = load_config(write(tmp_path, text)).config
    assert cfg.model.custom_chat_template == cfg.explorer.rollout_model.chat_template == "A{{ messages }}"
    both = text.replace("model:\n", f"model:\n  chat_template_path: {template}\n", 1)
    assert ("model.chat_template_path and explorer.rollout_model.chat_template give different chat templates"
            in _error(write(tmp_path, both)))
    same = base.replace("model:\n", f"model:\n  chat_template_path: {template}\n", 1)
    assert load_config(write(tmp_path, same)).config.explorer.rollout_model.chat_template == template.read_text()


def test_derivation_leaves_nothing_for_the_roles_to_fill(tmp_path: Path, base: str) -> None:
    """Every value a role reads is set once, here (the roles have no defaults of their own)."""
    from rfthpc.algorithms.presets import ALGORITHM_PRESETS, DATASET_ALGORITHMS
    from rfthpc.algorithms.registry import ADVANTAGE_FNS, POLICY_LOSS_FNS

    model = base.split("model_path: ", 1)[1].split("\n", 1)[0]
    for name in sorted(set(ALGORITHM_PRESETS) - {*DATASET_ALGORITHMS, "ppo"}):
        text = base.replace("algorithm_type: grpo", f"algorithm_type: {name}").replace(
            "  max_response_tokens: 32\n", "  max_response_tokens: 32\n  dtype: float32\n")
        if POLICY_LOSS_FNS.needs(ALGORITHM_PRESETS[name]["policy_loss_fn"]).expert_data:
            # the mixing presets: the taskset's rows as the expert data
            data = base.split("      path: ", 1)[1].split("\n", 1)[0]
            text = text.replace("buffer:\n", f"buffer:\n  trainer_input:\n    auxiliary_buffers:\n      sft_dataset: "
                                f"{{path: {data}, format: {{prompt_key: question, response_key: answer}}}}\n", 1)
        if ADVANTAGE_FNS.needs(ALGORITHM_PRESETS[name]["advantage_fn"]).teacher:
            # the distillation presets: the policy's own directory as the teacher (its tokenizer)
            (Path(model) / "config.json").write_text("{}")
            text = text.replace("  dtype: float32\n", f"  dtype: float32\n  teacher_model_path: {model}\n", 1)
        cfg = load_config(write(tmp_path, text)).config
        alg, ts = cfg.algorithm, cfg.buffer.explorer_input.tasksets[0]
        assert None not in (alg.loss_agg_mode, alg.kl_loss_fn, alg.kl_penalty_fn, alg.entropy_loss_fn), name
        assert (ts.total_epochs, ts.repeat_times, ts.default_workflow_type) == (1, 4, "math_workflow"), name
        assert cfg.slurm.explorer.array_size == cfg.explorer.rollout_model.engine_num == 1
        assert cfg.explorer.rollout_model.dtype == "float32"

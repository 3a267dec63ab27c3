"""Reading a veRL launch script: its main_ppo command's overrides, with the variables the script sets
expanded, the environment's listed, and what the import cannot follow refused in one error."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.dialects.verl_script import read_script
from rfthpc.errors import ConfigError

EXAMPLE = Path(__file__).parent / "verl_examples" / "run_qwen2_5-0_5b_grpo.sh"


def script(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.sh"
    path.write_text(text)
    return path


def test_the_example_scripts_overrides_with_its_variables_expanded() -> None:
    launch = read_script(EXAMPLE, ["trainer.total_epochs=2", "+data.seed=7"], environ={"HOME": "/home/u"})
    assert launch.entry == "verl.trainer.main_ppo"
    assert launch.overrides[:4] == ["algorithm.adv_estimator=grpo", "data.train_files=/home/u/data/gsm8k/train.parquet",
                                    "data.val_files=['/home/u/data/gsm8k/test.parquet']", "data.train_batch_size=64"]
    given = dict(o.split("=", 1) for o in launch.overrides)
    assert given["data.truncation"] == "error"  # quotes removed, as the shell removes them
    assert given["actor_rollout_ref.model.path"] == "/home/u/models/Qwen2.5-0.5B-Instruct"  # ${MODEL_PATH:-...}
    assert given["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == "3072"  # $(( (512 + 1024) * 2 ))
    assert given["actor_rollout_ref.rollout.n"] == "5"
    assert given["trainer.logger"] == '["console","wandb"]'
    assert launch.overrides[-3:] == ["trainer.total_epochs=15", "trainer.total_epochs=2", "+data.seed=7"]  # "$@"
    assert launch.from_environment == {"HOME": "/home/u"}
    assert launch.notes == ["the script's other commands are not part of the config: `tee verl_grpo.log`"]


def test_a_variable_from_the_environment_wins_over_the_scripts_default() -> None:
    launch = read_script(EXAMPLE, environ={"HOME": "/h", "MODEL_PATH": "/models/mine"})
    assert "actor_rollout_ref.model.path=/models/mine" in launch.overrides
    assert launch.from_environment == {"HOME": "/h", "MODEL_PATH": "/models/mine"}


def test_every_variable_the_script_and_environment_lack_is_named_in_one_error() -> None:
    with pytest.raises(ConfigError) as error:
        read_script(EXAMPLE, environ={})
    message = str(error.value)
    assert "$HOME: HOME is neither set by the script nor in the environment; export it" in message
    assert message.count("HOME is neither set") == 1


def test_shell_forms_of_veRLs_scripts(tmp_path: Path) -> None:
    """Arrays, `export`, defaults and alternatives, unquoted words split, comments, `;` and redirections."""
    path = script(tmp_path, """
export VLLM_USE_V1=1; set -euxo pipefail
NNODES=${NNODES:-2}
SUFFIX=${TAG:+-$TAG}
DATA=(
    data.train_files="$HOME/a b.parquet"  # a path with a space
    data.train_batch_size=$(( NNODES * 16 / 3 ))
)
EXTRA="trainer.val_before_train=False trainer.test_freq=-1"
ulimit -n 65535
python3 -u -m verl.trainer.main_ppo "${DATA[@]}" $EXTRA \\
    trainer.experiment_name=run$SUFFIX trainer.nnodes=$NNODES > log.txt 2>&1
""")
    launch = read_script(path, ["trainer.total_epochs=1"], environ={"HOME": "/h", "TAG": "x"})
    assert launch.overrides == ["data.train_files=/h/a b.parquet", "data.train_batch_size=10",
                                "trainer.val_before_train=False", "trainer.test_freq=-1",
                                "trainer.experiment_name=run-x", "trainer.nnodes=2",
                                "trainer.total_epochs=1"]  # the script has no $@: the import's follow its own
    assert launch.notes == ["the script's other commands are not part of the config: `ulimit -n 65535`"]


def test_hydra_flags_and_control_flow(tmp_path: Path) -> None:
    path = script(tmp_path, """
ENGINE=vllm
if nvidia-smi -L; then
    export VLLM_ATTENTION_BACKEND=XFORMERS
fi
python3 -m verl.trainer.main_ppo --config-path=config --config-name='ppo_megatron_trainer.yaml' \\
    actor_rollout_ref.rollout.name=$ENGINE hydra.run.dir=/tmp/out $@
""")
    launch = read_script(path, ["trainer.nnodes=2"], environ={})
    assert (launch.config_path, launch.config_name) == ("config", "ppo_megatron_trainer.yaml")
    assert launch.overrides == ["actor_rollout_ref.rollout.name=vllm", "trainer.nnodes=2"]
    assert any("hydra.run.dir=/tmp/out: Hydra's own settings" in n for n in launch.notes)
    assert any("control flow (if blocks) is not followed: it sets VLLM_ATTENTION_BACKEND" in n for n in launch.notes)


def test_what_the_import_cannot_follow_is_one_error(tmp_path: Path) -> None:
    path = script(tmp_path, """
if [ -n "$FAST" ]; then
    BATCH=64
fi
CKPT=$(pwd)/ckpt
python3 -m verl.trainer.main_ppo data.train_batch_size=$BATCH trainer.default_local_dir=$CKPT \\
    trainer.project_name=$PROJECT actor_rollout_ref.rollout.name=${1} -m
""")
    with pytest.raises(ConfigError) as error:
        read_script(path, environ={})
    message = str(error.value)
    for expected in ("$BATCH: set only inside the script's `if` block",
                     "$(pwd): a command substitution, which the import does not run",
                     "$PROJECT: PROJECT is neither set by the script nor in the environment",
                     "${1}: the script's argument 1, which the import does not pass",
                     "runs a Hydra sweep of several configs"):
        assert expected in message


@pytest.mark.parametrize(("text", "expected"), [
    ("echo hello\n", "runs no veRL trainer"),
    ("python3 -m verl.trainer.main_ppo a=1\npython3 -m verl.trainer.main_ppo a=2\n", "runs 2 veRL trainers"),
    ("python3 -m verl.trainer.main_ppo data.train_files='x\n", "the quote ' is never closed"),
])
def test_scripts_without_one_readable_veRL_command(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        read_script(script(tmp_path, text), environ={})


def test_a_missing_script_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        read_script(tmp_path / "nope.sh")


def test_if_blocks_whose_test_the_import_can_evaluate_are_followed(tmp_path: Path) -> None:
    """veRL's trtllm scripts: `TP=${1:-4}`, a branch chosen by `[ $TP -eq 4 ]`, and `"${@:2}"`."""
    path = script(tmp_path, """
TP=${1:-4}
ENGINE=vllm
if [ $TP -eq 4 ]; then
    MAX_BATCH_SIZE=1024
elif [ $TP -eq 2 ]; then
    MAX_BATCH_SIZE=512
else
    MAX_BATCH_SIZE=384
fi
if [[ "$ENGINE" != "vllm" ]]; then MODE=sync; else MODE=async; fi
if [ -z "$UNSET_HERE" ]; then
    if [ "$ENGINE" = vllm ]; then NESTED=yes; fi
fi
for v in $(env | awk -F= '{print $1}'); do
    unset "$v"
done
python3 -m verl.trainer.main_ppo data.train_batch_size=$MAX_BATCH_SIZE actor_rollout_ref.rollout.mode=$MODE \\
    actor_rollout_ref.rollout.tensor_model_parallel_size=$TP "${@:2}"
""")
    launch = read_script(path, ["trainer.nnodes=2"], environ={})
    assert launch.overrides == ["data.train_batch_size=1024", "actor_rollout_ref.rollout.mode=async",
                                "actor_rollout_ref.rollout.tensor_model_parallel_size=4", "trainer.nnodes=2"]
    assert launch.from_environment == {}  # a test on an unset variable is not followed, and reads nothing
    assert any("control flow (if blocks) is not followed: it sets NESTED" in n for n in launch.notes)


def test_the_scripts_own_directory(tmp_path: Path) -> None:
    path = script(tmp_path, """
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python3 -m verl.trainer.main_ppo custom_reward_function.path=$SCRIPT_DIR/reward.py
""")
    assert read_script(path, environ={}).overrides == [f"custom_reward_function.path={tmp_path.resolve()}/reward.py"]


def test_a_plus_for_a_key_the_config_has_is_read_as_an_override() -> None:
    """A script written before veRL's config gained the key (its Megatron recompute_method)."""
    from rfthpc.dialects.verl_import import import_verl
    from tests.config.test_verl_import import CONFIG, ENV, SCRIPT

    imported = import_verl(CONFIG, ["+data.shuffle=false"], script=SCRIPT, environ=ENV)
    assert "task_selector" not in imported.config["buffer"]["explorer_input"]["tasksets"][0]
    assert ("+data.shuffle=false: data.shuffle is in the config already, so Hydra would refuse the +; read as "
            "data.shuffle=false") in imported.notes

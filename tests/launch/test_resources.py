"""The `slurm` section as sbatch options: time and memory parsing, credentials, rejected values."""

from __future__ import annotations

import pytest

from rfthpc.config.schema import Config
from rfthpc.errors import ConfigError, SlurmError
from rfthpc.launch.resources import check_no_secrets, executor_parameters, parse_mem_mb, parse_time_minutes
from rfthpc.launch.slurmcli import sbatch_rejection
from rfthpc.launch.torchrun import Rendezvous, rdzv_port, torchrun_argv


@pytest.mark.parametrize(("value", "minutes"), [
    ("30", 30), ("30:30", 31), ("04:00:00", 240), ("1-00", 1440), ("2-03:04", 2 * 1440 + 184),
    ("1-00:00:01", 1441), ("00:30:00", 30),
])
def test_time_limits(value: str, minutes: int) -> None:
    assert parse_time_minutes(value, "slurm.trainer.time") == minutes


@pytest.mark.parametrize("value", ["soon", "1:2:3:4", "00:00:00", "-5"])
def test_bad_time_names_the_key(value: str) -> None:
    with pytest.raises(ConfigError, match="slurm.explorer.time"):
        parse_time_minutes(value, "slurm.explorer.time")


@pytest.mark.parametrize(("value", "mb"), [("4000", 4000), ("4000M", 4000), ("4G", 4096), ("1T", 1048576),
                                           ("2.5G", 2560), ("64GB", 65536), ("512K", 1)])
def test_memory_sizes(value: str, mb: int) -> None:
    assert parse_mem_mb(value, "slurm.trainer.mem") == mb


def test_bad_memory_names_the_key() -> None:
    cfg = Config()
    cfg.slurm.trainer.mem = "lots"
    with pytest.raises(ConfigError, match=r"slurm.trainer.mem: 'lots'"):
        executor_parameters(cfg, "trainer", None)


def test_explorer_tasks_are_single_node() -> None:
    cfg = Config()
    cfg.slurm.explorer.nodes = 2
    with pytest.raises(ConfigError, match="slurm.explorer.nodes"):
        executor_parameters(cfg, "explorer", None)


def test_signal_delay_must_leave_time_to_checkpoint() -> None:
    cfg = Config()
    cfg.slurm.signal_delay_s = 5
    with pytest.raises(ConfigError, match="slurm.signal_delay_s"):
        executor_parameters(cfg, "trainer", None)


def test_time_limit_must_outlast_the_warning() -> None:
    """The warning comes signal_delay_s before the limit, and Slurm may send it up to 60 s early."""
    cfg = Config()
    cfg.slurm.signal_delay_s = 120
    cfg.slurm.trainer.time = "00:02:00"
    with pytest.raises(ConfigError, match=r"slurm.trainer.time: 00:02:00 leaves under a minute before "
                                          r"slurm.signal_delay_s \(120 s\)"):
        executor_parameters(cfg, "trainer", None)
    cfg.slurm.signal_delay_s = 60  # the shortest limit the e2e time-limit test uses: accepted
    assert executor_parameters(cfg, "trainer", None)["time"] == 2


@pytest.mark.parametrize("line", ["export WANDB_API_KEY=abc", "HF_TOKEN=hf_x", "export MY_SECRET=1"])
def test_credentials_in_setup_lines_are_refused(line: str) -> None:
    cfg = Config()
    cfg.slurm.explorer.setup = ["module load cuda", line]
    with pytest.raises(ConfigError, match=r"slurm.explorer.setup\[1\].*export it in your shell"):
        check_no_secrets(cfg)


def test_harmless_setup_lines_pass() -> None:
    cfg = Config()
    cfg.slurm.setup = ["source /opt/venv/bin/activate", "export OMP_NUM_THREADS=4",
                       "export TOKENIZERS_PARALLELISM=false"]
    check_no_secrets(cfg)


def test_sbatch_rejection_names_the_config_key() -> None:
    keys = {"partition": "slurm.trainer.partition = gpu", "account": "slurm.trainer.account = nobody"}
    err = sbatch_rejection("sbatch: error: Batch job submission failed: Invalid partition name specified", keys)
    assert isinstance(err, SlurmError)
    assert "Invalid partition name specified" in str(err) and "slurm.trainer.partition = gpu" in str(err)
    err = sbatch_rejection("sbatch: error: Batch job submission failed: Invalid account or account/partition "
                           "combination specified", keys)
    assert "slurm.trainer.account = nobody" in str(err)
    err = sbatch_rejection("sbatch: error: Batch job submission failed: Unable to contact slurm controller "
                           "(connect failure)", keys)
    assert "unreachable" in str(err) and "rfthpc run" in str(err)


def test_rendezvous_ports_differ_by_job_and_restart() -> None:
    ports = {rdzv_port(str(j), r) for j in range(100, 110) for r in range(3)}
    assert len(ports) == 30 and all(15000 <= p < 25000 for p in ports)
    argv = torchrun_argv("/py", Rendezvous(2, 1, "10.0.0.1", 15001, "rfthpc-7-0"), 4, ["rfthpc", "train"])
    assert argv[:3] == ["/py", "-m", "torch.distributed.run"]
    assert "is_host=0" in argv and "10.0.0.1:15001" in argv and argv[-2:] == ["rfthpc", "train"]

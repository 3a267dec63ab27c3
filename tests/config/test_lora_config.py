"""`model.lora`: Trinity-RFT's `model.lora_configs`, veRL's and ROLL's LoRA keys read into one section,
and `config validate` naming the key and the fix for a bad adapter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rfthpc.config import load_config
from rfthpc.config.settings import trainer_settings
from rfthpc.errors import ConfigError
from tests.config.conftest import write
from tests.config.test_bad_input import base  # noqa: F401  (fixture)
from tests.config.test_foreign_keys import _verl

ROOT = Path(__file__).resolve().parents[2]


def _qwen2(model_dir: Path, layers: int = 2) -> None:
    """A config.json as a Qwen2 checkpoint has it (no weights: validation reads only the config)."""
    (model_dir / "config.json").write_text(json.dumps({"model_type": "qwen2", "num_hidden_layers": layers}))


def _lora(base: str, text: str) -> str:  # noqa: F811
    """`base` with `text` (YAML indented as under model:) added to its model section."""
    lines = "".join(f"  {line}\n" for line in text.strip("\n").splitlines())
    return base.replace("model:\n", "model:\n" + lines, 1)


def _error(path: Path) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(path)
    return str(e.value)


def test_trinity_lora_configs_is_model_lora(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = _lora(base, """
lora_configs:
  - name: mine
    lora_rank: 16
    lora_alpha: 8
    target_modules: [q_proj, v_proj]
    base_model_name: qwen
    is_dummy: false
""")
    loaded = load_config(write(tmp_path, text))
    lora = loaded.config.model.lora
    assert (lora.name, lora.lora_rank, lora.lora_alpha, lora.target_modules) == ("mine", 16, 8, ["q_proj", "v_proj"])
    assert any("model.lora_configs[0].base_model_name" in n and "ignored" in n for n in loaded.notes), loaded.notes
    assert {(m.target, m.source) for m in loaded.mapped} >= {
        ("model.lora.lora_rank", "model.lora_configs[0].lora_rank"),
        ("model.lora.target_modules", "model.lora_configs[0].target_modules")}
    settings = trainer_settings(loaded.stages).lora
    assert settings is not None and settings.rank == 16 and settings.max_lora_rank == 16
    assert settings.peft_kwargs()["target_modules"] == ["q_proj", "v_proj"]


def test_trinity_defaults_and_no_adapter(tmp_path: Path, base: str) -> None:  # noqa: F811
    lora = load_config(write(tmp_path, _lora(base, "lora_configs: [{}]"))).config.model.lora
    assert (lora.lora_rank, lora.lora_alpha, lora.target_modules, lora.lora_dtype) == (32, 32, "all-linear", "auto")
    assert load_config(write(tmp_path, _lora(base, "lora_configs: null"))).config.model.lora is None


def test_more_than_one_adapter_is_refused(tmp_path: Path, base: str) -> None:  # noqa: F811
    msg = _error(write(tmp_path, _lora(base, "lora_configs: [{lora_rank: 8}, {lora_rank: 16}]")))
    assert "model.lora_configs: 2 adapters; a run trains one adapter" in msg


def test_verl_lora_keys_are_mapped_with_verls_default_alpha(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = base + _verl("""
actor_rollout_ref:
  model: {lora_rank: 64, target_modules: all-linear, exclude_modules: null}
""")
    loaded = load_config(write(tmp_path, text))
    lora = loaded.config.model.lora
    assert (lora.lora_rank, lora.lora_alpha, lora.target_modules) == (64, 16, "all-linear")
    sources = {m.target: m.source for m in loaded.mapped}
    assert sources["model.lora.lora_rank"] == "trainer.trainer_config.actor_rollout_ref.model.lora_rank"
    assert "veRL's default" in sources["model.lora.lora_alpha"]


def test_verl_rank_zero_is_no_adapter(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = base + _verl("actor_rollout_ref:\n  model: {lora_rank: 0, lora_alpha: 16, target_modules: all-linear}")
    assert load_config(write(tmp_path, text)).config.model.lora is None


def test_roll_lora_keys_are_mapped_with_rolls_defaults(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = base + "actor_train:\n  model_args: {lora_target: 'q_proj,v_proj', lora_dropout: 0.05}\n"
    lora = load_config(write(tmp_path, text)).config.model.lora
    assert (lora.lora_rank, lora.lora_alpha, lora.lora_dropout, lora.target_modules) == (8, 16, 0.05,
                                                                                          ["q_proj", "v_proj"])


@pytest.mark.parametrize(("lora", "expected"), [
    ("{lora_rank: 0}", "model.lora.lora_rank: 0; the adapter's rank must be >= 1"),
    ("{lora_rank: -4}", "model.lora.lora_rank: -4"),
    ("{lora_rank: 1024}", "vLLM serves adapters of rank <= 512"),
    ("{lora_alpha: 0}", "model.lora.lora_alpha: 0.0; the scale must be > 0"),
    ("{lora_dropout: 1.5}", "model.lora.lora_dropout: 1.5"),
    ("{target_modules: [q_proj, qproj]}", "model.lora.target_modules: 'qproj' matches no linear layer"),
    ("{target_modules: '.*attn\\.qkv'}", "matches no linear layer of the model's decoder blocks (e.g. model.layers"),
    ("{target_modules: '(unclosed'}", "is not a regular expression"),
    ("{target_modules: [q_proj], exclude_modules: [q_proj]}", "excludes every layer target_modules selects"),
    ("{path: /nonexistent/adapter}", "model.lora.path: /nonexistent/adapter holds no adapter_config.json"),
])
def test_config_validate_names_the_key_and_the_fix(tmp_path: Path, base: str, lora: str,  # noqa: F811
                                                    expected: str) -> None:
    _qwen2(tmp_path / "model")
    cfg = write(tmp_path, _lora(base, f"lora: {lora}"))
    out = subprocess.run([sys.executable, "-m", "rfthpc", "config", "validate", "--config", str(cfg)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2, out.stdout + out.stderr
    assert expected in out.stderr, out.stderr


def test_good_targets_and_an_existing_adapter_validate(tmp_path: Path, base: str) -> None:  # noqa: F811
    _qwen2(tmp_path / "model")
    for lora in ("{target_modules: [self_attn.q_proj, down_proj]}", "{target_modules: '.*layers\\.1\\..*_proj'}",
                 "{target_modules: all-linear, exclude_modules: [o_proj]}"):
        load_config(write(tmp_path, _lora(base, f"lora: {lora}")))
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "lora_dropout": 0.0}))
    loaded = load_config(write(tmp_path, _lora(base, f"lora: {{path: {adapter}, lora_rank: 64}}")))
    settings = trainer_settings(loaded.stages).lora
    # An adapter to start from brings its own shape.
    assert settings is not None and (settings.rank, settings.alpha, settings.target_modules) == (4, 8.0, ("q_proj",))
    assert settings.max_lora_rank == 8


def test_without_path_checks_an_adapter_elsewhere_is_not_read(tmp_path: Path, base: str) -> None:  # noqa: F811
    """`config validate --no-path-checks` (a config for another machine): the adapter is not opened there."""
    config = write(tmp_path, _lora(base, f"lora: {{path: {tmp_path / 'elsewhere'}, lora_rank: 16}}"))
    with pytest.raises(ConfigError, match="model.lora.path: .*elsewhere"):
        load_config(config)
    loaded = load_config(config, check_paths=False)
    assert loaded.config.model.lora is not None and loaded.config.model.lora.path == str(tmp_path / "elsewhere")

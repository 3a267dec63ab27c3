"""veRL settings of its example scripts that rfthpc follows its own way: remote code and the FSDP reduce
dtype are noted, not refused."""

from __future__ import annotations

import pytest

from rfthpc.dialects.verl_import import import_verl
from rfthpc.errors import ConfigError
from tests.config.test_verl_import import CONFIG, ENV, SCRIPT

MP = "actor_rollout_ref.actor.fsdp_config.mixed_precision"


def test_trust_remote_code_is_noted_for_the_model_and_the_tokenizer() -> None:
    imported = import_verl(CONFIG, ["actor_rollout_ref.model.trust_remote_code=true", "data.trust_remote_code=true"],
                           script=SCRIPT, environ=ENV)
    notes = " ".join(imported.notes)
    assert "actor_rollout_ref.model.trust_remote_code: rfthpc loads models and tokenizers with transformers' own" \
        in notes
    assert "data.trust_remote_code: rfthpc loads models and tokenizers" in notes


def test_a_bfloat16_gradient_reduction_is_noted_and_float16_refused() -> None:
    imported = import_verl(CONFIG, [f"+{MP}.reduce_dtype=bf16"], script=SCRIPT, environ=ENV)
    assert any(n.startswith(f"{MP}.") and "rfthpc reduces gradients across GPUs in float32" in n for n in
               imported.notes)
    with pytest.raises(ConfigError, match=rf"{MP}.reduce_dtype: .*rfthpc reduces gradients in float32"):
        import_verl(CONFIG, [f"+{MP}.reduce_dtype=fp16"], script=SCRIPT, environ=ENV)

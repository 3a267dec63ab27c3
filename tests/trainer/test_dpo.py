"""DPO as a trainer-only stage: preference rows read in Trinity-RFT's two forms, and a short run on the
tiny model whose chosen-vs-rejected margin rises."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rfthpc.config.buffer import ExperienceBufferConfig
from rfthpc.config.schema import StageConfig
from rfthpc.errors import UserError
from rfthpc.rundir.metrics import read_metrics
from rfthpc.trainer.checkpoint_meta import read_checkpoint_meta
from tests.trainer.conftest import make_run, rl_config, run_trainer_inprocess

ROWS = [("1 + 1?", "2", "5"), ("2 + 2?", "4", "7"), ("3 + 3?", "6", "1"), ("4 + 4?", "8", "3")]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _plaintext(tmp_path: Path) -> Path:
    return _write(tmp_path / "pairs.jsonl", [{"q": q, "good": c, "bad": r} for q, c, r in ROWS])


def test_plaintext_rows_become_a_chosen_and_a_rejected_sample(tmp_path: Path, tiny_model: Path) -> None:
    from rfthpc.trainer.sft_data import PreferenceData, load_tokenizer

    buf = ExperienceBufferConfig(path=str(_plaintext(tmp_path)))
    buf.format.prompt_key, buf.format.chosen_key, buf.format.rejected_key = "q", "good", "bad"
    buf.format.system_prompt = "Be brief."
    tok = load_tokenizer(tiny_model)
    data = PreferenceData(buf, tok, max_length=None)
    chosen, rejected, *rest = data.take(2)
    assert len(rest) == 2 and data.state_dict() == {"consumed": 2}
    assert [s.group for s in (chosen, rejected, *rest)] == [0, 0, 1, 1]
    assert [s.preference for s in (chosen, rejected, *rest)] == [1, -1, 1, -1]
    # Both replies follow the same prompt; only the reply and its end-of-turn token are trained.
    assert chosen.prompt_ids.tolist() == rejected.prompt_ids.tolist()
    prompt = tok.decode(chosen.prompt_ids)
    assert "Be brief." in prompt and prompt.endswith("1 + 1?<|im_end|>\n<|im_start|>assistant\n")
    assert tok.decode(chosen.response_ids[chosen.loss_mask]) == "2<|im_end|>"
    assert tok.decode(rejected.response_ids[rejected.loss_mask]) == "5<|im_end|>"


def test_messages_rows_train_only_the_replies(tmp_path: Path, tiny_model: Path) -> None:
    from rfthpc.trainer.sft_data import PreferenceData, load_tokenizer

    chat = [{"role": "user", "content": "1 + 1?"}, {"role": "assistant", "content": "2"},
            {"role": "user", "content": "and 2 + 2?"}]
    path = _write(tmp_path / "chat.jsonl", [{"messages": chat, "chosen": [{"role": "assistant", "content": "4"}],
                                             "rejected": [{"role": "assistant", "content": "22"}]}])
    buf = ExperienceBufferConfig(path=str(path))
    buf.format.prompt_type = "messages"
    tok = load_tokenizer(tiny_model)
    chosen, rejected = PreferenceData(buf, tok, max_length=None).take(1)
    # The chat's own assistant turn ("2") is prompt, not trained.
    assert tok.decode(chosen.prompt_ids).endswith("and 2 + 2?<|im_end|>\n<|im_start|>assistant\n")
    assert tok.decode(chosen.response_ids[chosen.loss_mask]) == "4<|im_end|>"
    assert tok.decode(rejected.response_ids[rejected.loss_mask]) == "22<|im_end|>"


def test_a_missing_rejected_column_is_named(tmp_path: Path, tiny_model: Path) -> None:
    from rfthpc.trainer.sft_data import PreferenceData, load_tokenizer

    path = _write(tmp_path / "pairs.jsonl", [{"prompt": "q", "chosen": "a", "worse": "b"}])
    with pytest.raises(UserError, match="format.rejected_key='rejected' is not a column"):
        PreferenceData(ExperienceBufferConfig(path=str(path)), load_tokenizer(tiny_model), None)


def test_a_dpo_stage_raises_the_margin_of_the_chosen_replies(tmp_path: Path, tiny_model: Path) -> None:
    data = _plaintext(tmp_path)
    cfg = rl_config(tiny_model)
    cfg.stages = [StageConfig(
        stage_name="dpo", mode="train",
        algorithm={"algorithm_type": "dpo", "optimizer": {"lr": 1e-3}, "policy_loss_fn_args": {"beta": 0.5}},
        buffer={"train_batch_size": 2, "total_steps": 6,
                "trainer_input": {"experience_buffer": {"path": str(data), "format": {
                    "prompt_key": "q", "chosen_key": "good", "rejected_key": "bad"}}}},
    )]
    run = make_run(tmp_path / "run", cfg)
    assert run_trainer_inprocess(run) == 0
    records = {r["step"]: r for r in read_metrics(run.monitor / "trainer.jsonl")}
    assert sorted(records) == [1, 2, 3, 4, 5, 6]
    first, last = records[1], records[6]
    # Step 1 starts at the reference: every log-ratio is 0, so the loss is log 2 and the margin 0.
    assert first["actor/dpo_loss"] == pytest.approx(math.log(2), abs=1e-2)
    assert first["actor/reward_margin"] == pytest.approx(0.0, abs=1e-2)
    assert last["actor/reward_margin"] > first["actor/reward_margin"] + 0.1 and last["actor/accuracy_mean"] == 1.0
    assert last["actor/dpo_loss"] < math.log(2)
    assert last["actor/chosen_reward"] > last["actor/rejected_reward"]
    assert read_checkpoint_meta(run.root, 6).sft_data == {"consumed": 12}

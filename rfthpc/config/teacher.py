"""The distillation teacher (`model.teacher_model_path`, or `explorer.teacher_model`) checked before a run:
set exactly when the advantage reads a teacher, a model directory, and tokenizing as the policy does (the
teacher scores the student's token ids as they are, so one vocabulary is required; the sizes may differ)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_VOCAB_FILES = ("vocab.json", "merges.txt", "tokenizer.model")
"""A tokenizer's vocabulary where it has no tokenizer.json (BPE and SentencePiece files)."""


def teacher_problems(teacher: str | None, model: str, needs_teacher: bool, advantage_fn: str | None,
                     check_paths: bool, served: tuple[str, str | None] | None = None) -> list[str]:
    """What is wrong with the teacher of one stage: missing where `advantage_fn` reads one, or (with
    `check_paths`) a directory whose tokenizer is not the policy's. The teacher is `teacher`
    (`model.teacher_model_path`, loaded in the trainer) or `served`: (`explorer.teacher_model`, that
    auxiliary model's `model_path`, None where no auxiliary model has that name). (A teacher no stage reads,
    or both, are refused for the whole run: `trainer_settings`, `explorer_settings`.)"""
    if needs_teacher and not teacher and served is None:
        return [f"model.teacher_model_path: missing; algorithm.advantage_fn {advantage_fn!r} scores the samples with "
                "a teacher model: give its local directory (the policy's tokenizer, any size) to load it in the "
                "trainer, or serve it beside the explorers as an auxiliary model named by explorer.teacher_model"]
    if not needs_teacher or not check_paths:
        return []
    key, path = ("model.teacher_model_path", teacher) if teacher else \
        (f"explorer.auxiliary_models[{served[0]!r}].model_path" if served else "", served[1] if served else None)
    if not path:
        return []
    where, policy = Path(path).expanduser(), Path(model).expanduser()
    if not (where / "config.json").is_file():
        return [f"{key}: {path!r} holds no config.json; give the local directory of a Hugging Face model"]
    if policy.is_dir() and _vocabulary(where) != _vocabulary(policy):
        return [f"{key}: the teacher's tokenizer differs from the policy's ({model}); on-policy distillation scores "
                "the student's token ids with the teacher, so both need one tokenizer: choose a teacher of the same "
                "model family"]
    return []


def _vocabulary(model: Path) -> Any:
    """What decides a directory's token ids: tokenizer.json's model and added tokens, else its vocabulary
    files' bytes (None: neither, so nothing to compare)."""
    spec = model / "tokenizer.json"
    if spec.is_file():
        data = json.loads(spec.read_text())
        return {"model": data.get("model"), "added_tokens": data.get("added_tokens")}
    files = {name: (model / name).read_bytes() for name in _VOCAB_FILES if (model / name).is_file()}
    return files or None

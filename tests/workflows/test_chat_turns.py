"""`ChatTurns.next_turn` gives the ids of tokenising the whole chat, also when it tokenises only the
text after the fixed chat's last end-of-turn token: on the tiny model's byte-level tokenizer, on a
sentencepiece-like one that marks only the first word of its input, and (tokenising the whole)
on one whose end-of-turn token is normalized."""

from __future__ import annotations

from typing import Any

import pytest

from rfthpc.demos.tinymodel import CHAT_TEMPLATE, IM_END, IM_START
from rfthpc.tasks.tasksets import PromptBuilder
from rfthpc.workflows.chat_turns import ChatTurns

OBSERVATIONS = ["You are at 3, the goal is at 5. Answer left or right.", " a leading space", "trailing space ",
                "two\nlines\n\n", "", " ", "ünïcødé ✓", f"{IM_END} {IM_START}user fake turns", "left"]
SYSTEM = "You walk on a line. Answer with one word: left or right."


def whole_chat_framing(tokenizer: Any, system: str | None, reply: list[int], observation: str) -> list[int]:
    """The framing after `reply`, from tokenising the whole fixed chat with and without the next turn."""
    fixed = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": "."}, {"role": "assistant", "content": "."}]
    before = list(tokenizer.apply_chat_template(fixed, tokenize=True, return_dict=False))
    after = list(tokenizer.apply_chat_template([*fixed, {"role": "user", "content": observation}], tokenize=True,
                                               add_generation_prompt=True, return_dict=False))
    assert after[:len(before)] == before
    eos = tokenizer.eos_token_id
    last = max(i for i, t in enumerate(before) if t == eos)
    return ([] if reply and reply[-1] == eos else [eos]) + before[last + 1:] + after[len(before):]


def sentencepiece_like(normalized_end_of_turn: bool) -> Any:
    """A small BPE tokenizer that marks word starts with ▁ only at the start of its input (Metaspace,
    prepend_scheme first); with `normalized_end_of_turn`, its end-of-turn token is normalized (an
    NFC normalizer, which does not change it)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    if normalized_end_of_turn:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    special = [AddedToken(t, special=True, normalized=normalized_end_of_turn and t == IM_END)
               for t in ("<unk>", IM_START, IM_END)]
    corpus = [*OBSERVATIONS, SYSTEM, "user assistant system\n."] * 10
    tok.train_from_iterator(corpus, trainer=trainers.BpeTrainer(vocab_size=300, special_tokens=special,
                                                                show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=IM_END, unk_token="<unk>",
                                   additional_special_tokens=[IM_START], chat_template=CHAT_TEMPLATE)


@pytest.fixture(scope="module", params=["tiny", "sentencepiece_like", "normalized_end_of_turn"])
def case(request: pytest.FixtureRequest, tokenizer: Any) -> tuple[Any, bool]:
    """(a tokenizer, whether ChatTurns may tokenise only the text after the fixed chat)."""
    if request.param == "tiny":
        return tokenizer, True
    return sentencepiece_like(request.param == "normalized_end_of_turn"), request.param == "sentencepiece_like"


@pytest.mark.parametrize("system", [None, SYSTEM])
def test_the_framing_is_that_of_tokenising_the_whole_chat(case: tuple[Any, bool], system: str | None) -> None:
    tokenizer, tail_only = case
    turns = ChatTurns(PromptBuilder(tokenizer), system)
    assert (turns._cut is not None) == tail_only
    words = tokenizer.encode("left", add_special_tokens=False)
    for reply in (words + [tokenizer.eos_token_id], words, []):
        for observation in OBSERVATIONS:
            assert turns.next_turn(reply, observation) == whole_chat_framing(tokenizer, system, reply, observation)

"""Workflows end to end with a real engine: transformers' `generate` on the tiny model.

`HFEngine` below is a small real engine (the production engines are the explorer's). To get
known answers out of a random-weight model it can constrain decoding to given texts with
`prefix_allowed_tokens_fn`: the tokens are still sampled from the model and their logprobs are
the model's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rfthpc.engines.sampling import Completion, SamplingArgs
from rfthpc.errors import ConfigError
from rfthpc.tasks.tasksets import PromptBuilder, Task
from rfthpc.workflows.base import AuxiliaryModel, Experience, WorkflowContext, WorkflowResult
from rfthpc.workflows.math import MATH_SYSTEM_PROMPT
from rfthpc.workflows.registry import WORKFLOWS, run_workflow

TRUTH = "30 + 12 = 42\n#### 42"


class HFEngine:
    """RolloutEngine on transformers' sampling; `forced[i]` constrains the i-th sample's text."""

    def __init__(self, model_dir: Path, forced: Sequence[str] | None = None) -> None:
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
        self.eos = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.forced = [self.tokenizer.encode(t, add_special_tokens=False) + [self.eos] for t in forced or []]
        self.calls = 0

    def generate(
        self, prompts_token_ids: Sequence[Sequence[int]], n: int, params: SamplingArgs
    ) -> list[list[Completion]]:
        self.calls += 1
        return [self._one(list(prompt), n, params) for prompt in prompts_token_ids]

    def _one(self, prompt: list[int], n: int, params: SamplingArgs) -> list[Completion]:
        def allowed(row: int, ids: torch.Tensor) -> list[int]:
            target, pos = self.forced[row % len(self.forced)], ids.shape[-1] - len(prompt)
            return [target[pos]] if pos < len(target) else [self.eos]

        with torch.no_grad():
            out = self.model.generate(
                torch.tensor([prompt]), do_sample=True, temperature=params.temperature, top_p=params.top_p,
                top_k=params.top_k if params.top_k > 0 else None, max_new_tokens=params.max_tokens,
                num_return_sequences=n, return_dict_in_generate=True, output_logits=True,
                prefix_allowed_tokens_fn=allowed if self.forced else None,
                eos_token_id=self.eos, pad_token_id=self.tokenizer.pad_token_id,
            )
        logp = torch.log_softmax(torch.stack(out.logits, dim=1).float(), dim=-1)
        completions = []
        for i in range(n):
            tokens = out.sequences[i, len(prompt):].tolist()
            stop = self.eos in tokens
            tokens = tokens[: tokens.index(self.eos) + 1] if stop else tokens
            completions.append(Completion(
                token_ids=tokens,
                logprobs=[logp[i, t, tok].item() for t, tok in enumerate(tokens)],
                text=self.tokenizer.decode(tokens, skip_special_tokens=True),
                finish_reason="stop" if stop else "length",
            ))
        return completions


def _task(workflow: str = "math_workflow", reward_fn: str | None = None, truth: str | None = TRUTH, **kw) -> Task:
    prompt = "Tom has 30 apples. Tom buys 12 more apples. How many apples does Tom have now?"
    kw.setdefault("rollout_args", SamplingArgs(max_tokens=24))
    return Task("gsm/0", "gsm", 0, {}, prompt, truth, workflow, reward_fn, **kw)


def _ctx(engine, tokenizer, **kw) -> WorkflowContext:
    return WorkflowContext(engine=engine, prompts=PromptBuilder(tokenizer, **kw))


def exploding_reward(response: str, truth: str | None) -> float:
    """A user reward that fails, as user code sometimes does."""
    raise RuntimeError("judge unavailable")


def two_turn_workflow(task: Task, ctx: WorkflowContext) -> WorkflowResult:
    """A user multi-turn workflow: answer, get feedback from the environment, answer again."""
    tok = ctx.prompts.tokenizer
    prompt = ctx.prompts.encode(ctx.prompts.messages(task)).token_ids
    first = ctx.engine.generate([prompt], 1, task.rollout_args)[0][0]
    feedback = tok.encode("\n<|im_start|>user\nCheck it.<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    second = ctx.engine.generate([prompt + first.token_ids + feedback], 1, task.rollout_args)[0][0]
    experience = Experience(
        prompt_token_ids=prompt,
        response_token_ids=first.token_ids + feedback + second.token_ids,
        logprobs=first.logprobs + [0.0] * len(feedback) + second.logprobs,
        loss_mask=[1] * len(first.token_ids) + [0] * len(feedback) + [1] * len(second.token_ids),
        reward=1.0,
        response_text=second.text,
    )
    return WorkflowResult([experience])


def judge_reward(response: str, truth: str | None, *, prompt: str, auxiliary) -> float:
    """An LLM-as-judge reward: asks the auxiliary `judge` engine and scores 1 if it answered."""
    judge = auxiliary["judge"]
    question = [{"role": "user", "content": f"Is this a good answer to {prompt!r}? {response}"}]
    verdict = judge.generate([PromptBuilder(judge.tokenizer).encode(question).token_ids], 1, SamplingArgs(max_tokens=4))
    return float(len(verdict[0][0].token_ids) > 0)


@pytest.fixture(scope="module")
def tokenizer(tiny_model: Path):
    return AutoTokenizer.from_pretrained(tiny_model)


def test_math_workflow_scores_known_answers(tiny_model: Path, tokenizer) -> None:
    torch.manual_seed(0)
    engine = HFEngine(tiny_model, forced=[TRUTH, "30 + 12 = 41\n#### 41", "\\boxed{42.0}"])
    result = run_workflow(_task(repeat_times=3), _ctx(engine, tokenizer))
    assert [e.reward for e in result.experiences] == [1.0, 0.0, 1.0]
    assert [e.reward_components for e in result.experiences][1] == {"accuracy": 0.0}
    assert result.reward_error is None and result.info["prompt_truncated"] is False
    first = result.experiences[0]
    assert first.response_text == TRUTH and first.finish_reason == "stop"
    assert tokenizer.decode(first.response_token_ids) == TRUTH + "<|im_end|>"
    assert first.loss_mask == [1] * len(first.response_token_ids)
    assert len(first.logprobs) == len(first.response_token_ids) and all(lp <= 0 for lp in first.logprobs)
    assert tokenizer.decode(first.prompt_token_ids).startswith(f"<|im_start|>system\n{MATH_SYSTEM_PROMPT}<|im_end|>")


def test_simple_workflow_samples_a_group(tiny_model: Path, tokenizer) -> None:
    torch.manual_seed(1)
    engine = HFEngine(tiny_model)
    args = SamplingArgs(temperature=1.0, top_k=50, max_tokens=8)
    result = WORKFLOWS.get("simple_workflow")(
        _task("simple_workflow", "format_reward", repeat_times=4, rollout_args=args), _ctx(engine, tokenizer)
    )
    assert len(result.experiences) == 4 and engine.calls == 1
    for e in result.experiences:
        assert 1 <= len(e.response_token_ids) <= 8 and e.finish_reason in ("stop", "length")
        assert e.reward == 0.0 and e.reward_components == {"format": 0.0}


def test_failing_reward_marks_the_group_and_the_next_group_goes_on(tiny_model: Path, tokenizer) -> None:
    engine = HFEngine(tiny_model, forced=[TRUTH])
    ctx = _ctx(engine, tokenizer)
    bad = run_workflow(_task(reward_fn=f"{__name__}:exploding_reward", repeat_times=2), ctx)
    assert bad.reward_error == f"{__name__}:exploding_reward: RuntimeError: judge unavailable"
    assert [e.reward for e in bad.experiences] == [0.0, 0.0]
    assert all(e.info["reward_error"] == bad.reward_error for e in bad.experiences)
    good = run_workflow(_task(repeat_times=2), ctx)
    assert good.reward_error is None and [e.reward for e in good.experiences] == [1.0, 1.0]


def test_too_long_prompt_is_skipped_without_generating(tiny_model: Path, tokenizer) -> None:
    engine = HFEngine(tiny_model)
    ctx = _ctx(engine, tokenizer, max_prompt_tokens=10, enable_prompt_truncation=False)
    result = run_workflow(_task(), ctx)
    assert result.experiences == [] and "max_prompt_tokens" in result.info["skipped"]
    assert engine.calls == 0 and ctx.prompts.skipped == 1


def test_user_multi_turn_workflow_masks_environment_tokens(tiny_model: Path, tokenizer) -> None:
    torch.manual_seed(2)
    engine = HFEngine(tiny_model, forced=["#### 41"])
    result = run_workflow(_task(f"{__name__}:two_turn_workflow"), _ctx(engine, tokenizer))
    (e,) = result.experiences
    assert engine.calls == 2
    masked_out = [t for t, m in zip(e.response_token_ids, e.loss_mask) if not m]
    assert tokenizer.decode(masked_out) == "\n<|im_start|>user\nCheck it.<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.decode([t for t, m in zip(e.response_token_ids, e.loss_mask) if m]) == "#### 41<|im_end|>" * 2
    assert all(lp == 0.0 for lp, m in zip(e.logprobs, e.loss_mask) if not m)


def test_reward_can_use_an_auxiliary_judge_engine(tiny_model: Path, tokenizer) -> None:
    engine = HFEngine(tiny_model, forced=["#### 7"])
    ctx = WorkflowContext(engine, PromptBuilder(tokenizer), auxiliary={"judge": HFEngine(tiny_model)})
    result = run_workflow(_task("simple_workflow", f"{__name__}:judge_reward", repeat_times=2), ctx)
    assert [e.reward for e in result.experiences] == [1.0, 1.0]
    assert ctx.auxiliary["judge"].calls == 2


class Recording:
    """Wraps an engine and keeps every request it was given."""

    def __init__(self, engine: HFEngine) -> None:
        self.engine = engine
        self.requests: list[tuple[list[list[int]], int, SamplingArgs]] = []

    def generate(self, prompts_token_ids, n: int, params: SamplingArgs) -> list[list[Completion]]:
        self.requests.append(([list(p) for p in prompts_token_ids], n, params))
        return self.engine.generate(prompts_token_ids, n, params)


def test_auxiliary_model_chat_uses_its_template_thinking_switch_and_limits(tiny_model: Path) -> None:
    from tests.explorer.test_prompt_format import THINKING_TEMPLATE

    torch.manual_seed(3)
    tok = AutoTokenizer.from_pretrained(tiny_model)
    tok.chat_template = THINKING_TEMPLATE
    engine = Recording(HFEngine(tiny_model))
    judge = AuxiliaryModel("judge", engine, PromptBuilder(tok, max_prompt_tokens=40, enable_prompt_truncation=False,
                                                          enable_thinking=False), max_response_tokens=3)
    verdicts = judge.chat([{"role": "user", "content": "Is 2 + 2 = 4?"}], n=2)
    assert len(verdicts) == 2 and all(1 <= len(v.token_ids) <= 3 for v in verdicts)
    (prompt,), n, params = engine.requests[-1]
    assert n == 2 and params.max_tokens == 3
    assert tok.decode(prompt) == ("<|im_start|>user\nIs 2 + 2 = 4?<|im_end|>\n<|im_start|>assistant\n"
                                  "<think>\n\n</think>\n\n")
    judge.generate([prompt], 1, SamplingArgs(max_tokens=50, temperature=0.5))
    assert engine.requests[-1][2] == SamplingArgs(max_tokens=3, temperature=0.5)
    judge.generate([prompt], 1, SamplingArgs(max_tokens=2))
    assert engine.requests[-1][2].max_tokens == 2
    with pytest.raises(ValueError, match="auxiliary model 'judge'.*max_prompt_tokens \\(40\\)"):
        judge.chat([{"role": "user", "content": "Is this right? " * 20}])


def test_reply_prefix_is_part_of_the_prompt_not_of_the_response(tiny_model: Path, tokenizer) -> None:
    engine = HFEngine(tiny_model, forced=[TRUTH])
    result = run_workflow(_task(reply_prefix="Let me solve it.\n", repeat_times=2), _ctx(engine, tokenizer))
    first = result.experiences[0]
    assert tokenizer.decode(first.prompt_token_ids).endswith("<|im_start|>assistant\nLet me solve it.\n")
    assert first.response_text == TRUTH and [e.reward for e in result.experiences] == [1.0, 1.0]


def test_workflow_config_mistakes_are_config_errors(tiny_model: Path, tokenizer) -> None:
    ctx = _ctx(HFEngine(tiny_model), tokenizer)
    with pytest.raises(ConfigError, match="default_reward_fn_type: workflow 'simple_workflow' needs a reward function"):
        run_workflow(_task("simple_workflow"), ctx)
    with pytest.raises(ConfigError, match="format.response_key: workflow 'math_workflow' needs reference answers"):
        run_workflow(_task(truth=None), ctx)
    with pytest.raises(ConfigError, match="workflow_args: 'temperature' not used by workflow 'math_workflow'; "
                                          "it takes: system_prompt"):
        run_workflow(_task(workflow_args={"temperature": 1}), ctx)
    with pytest.raises(ConfigError, match="unknown workflow 'mathflow'"):
        run_workflow(_task("mathflow"), ctx)


def test_math_workflow_system_prompt_precedence(tiny_model: Path, tokenizer) -> None:
    engine = HFEngine(tiny_model, forced=["#### 42"])
    ctx = _ctx(engine, tokenizer)
    custom = run_workflow(_task(workflow_args={"system_prompt": "Be brief."}), ctx).experiences[0]
    assert "<|im_start|>system\nBe brief.<|im_end|>" in tokenizer.decode(custom.prompt_token_ids)
    own = run_workflow(_task(system_prompt="Taskset's.", workflow_args={"system_prompt": "x"}), ctx).experiences[0]
    assert "<|im_start|>system\nTaskset's.<|im_end|>" in tokenizer.decode(own.prompt_token_ids)


def test_experience_lengths_must_agree() -> None:
    with pytest.raises(ValueError, match="3 response tokens"):
        Experience([1], [1, 2, 3], [0.0, 0.0], [1, 1, 1], 0.0)

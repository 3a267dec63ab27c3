"""Workflows written as Trinity-RFT plugins (`from trinity...`, a `Workflow` subclass), named by module path in
a config: tests/workflows/test_trinity_plugins.py runs them through the explorer's endpoint. They import
`trinity`, which only the agent processes that run them have (rfthpc's `rfthpc/compat/trinity`)."""

from __future__ import annotations

from trinity.common.experience import Experience
from trinity.common.workflows import WORKFLOWS
from trinity.common.workflows.workflow import Workflow


@WORKFLOWS.register_module("plus_chat_workflow")
class PlusChatWorkflow(Workflow):
    """Two answers by `model.chat`, each rewarded 1 if it holds the raw task's answer."""

    def run(self) -> list[Experience]:
        exps = self.model.chat([{"role": "user", "content": self.task.raw_task["question"]}], n=2,
                               temperature=self.task.rollout_args.temperature)
        for exp in exps:
            exp.reward = float(str(self.task.raw_task["answer"]) in exp.response_text)
            exp.info["checked"] = True
        return exps


class TwoCallAsyncWorkflow(Workflow):
    """An asynchronous plugin through an OpenAI client: a first call (not returned: not trained on), then a
    second whose reply decides the reward of the episode's history but the first call."""

    is_async = True

    async def run_async(self) -> list[Experience]:
        client = self.model.get_openai_async_client()
        first = await client.chat.completions.create(
            model=self.model.model_path, messages=[{"role": "user", "content": "think"}],
            max_tokens=self.task.rollout_args.max_tokens)
        await client.chat.completions.create(
            model=self.model.model_path, max_tokens=self.task.rollout_args.max_tokens,
            messages=[{"role": "user", "content": "think"}, {"role": "assistant",
                                                            "content": first.choices[0].message.content},
                      {"role": "user", "content": "answer"}])
        exps = self.model.extract_experience_from_history()
        exps[-1].reward = float(self.task.workflow_args["bonus"])
        return exps[1:]


class StepWiseGiGPOWorkflow(Workflow):
    """Two moves, as Trinity's step-wise workflows write them for its GiGPO: every step given the episode's reward,
    and in its info what the step earned (`step_reward`) and the state it acted in (`env_state_hash`)."""

    def run(self) -> list[Experience]:
        exps = []
        for state, earned in (("a", 0.0), ("b", 1.0)):
            [exp] = self.model.chat([{"role": "user", "content": f"state {state}"}])
            exp.reward = 1.0
            exp.info.update(step_reward=earned, env_state_hash=f"hash-{state}")
            exps.append(exp)
        return exps


class ForgetfulWorkflow(Workflow):
    """Returns its call without setting the reward."""

    def run(self) -> list[Experience]:
        return self.model.chat([{"role": "user", "content": "hi"}])

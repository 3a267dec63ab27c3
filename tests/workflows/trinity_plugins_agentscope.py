"""A Trinity-RFT plugin workflow in the form of Trinity's AgentScope FrozenLake example: an AgentScope
`OpenAIChatModel` whose client is replaced by the model's `get_openai_async_client()`, asked once per turn;
run by tests/workflows/test_trinity_plugins.py in the AgentScope interpreter."""

from __future__ import annotations

from trinity.common.experience import Experience
from trinity.common.workflows.workflow import Workflow


class CountdownWorkflow(Workflow):
    """Asks the model to count down from the task's `start`; each turn one call; the episode is rewarded 1 if
    every reply named the right number."""

    is_async = True

    def __init__(self, *, task, model, auxiliary_models=None) -> None:
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        from agentscope.model import OpenAIChatModel

        self.chat_model = OpenAIChatModel(api_key="EMPTY", model_name=model.model_path, stream=False,
                                          generate_kwargs={"temperature": task.rollout_args.temperature,
                                                           "max_tokens": task.rollout_args.max_tokens})
        self.chat_model.client = self.model.get_openai_async_client()

    async def run_async(self) -> list[Experience]:
        start = int(self.task.raw_task["start"])
        right = 0
        for number in range(start, start - self.task.workflow_args["turns"], -1):
            reply = await self.chat_model([{"role": "user", "content": f"say {number}"}])
            text = "".join(block.get("text", "") for block in reply.content if block.get("type") == "text")
            right += str(number) in text
        exps = self.model.extract_experience_from_history()
        for exp in exps:
            exp.reward = float(right == len(exps))
            exp.info["right"] = right
        return exps

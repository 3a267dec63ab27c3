"""AgentScope 1.x ReAct agents for Trinity-RFT's AgentScope workflows, run by `rfthpc.workflows.agent_runner`
in an interpreter that has AgentScope (`workflow_args.python`; tools/setup_agentscope.sh makes one).

Each is an agent function of `agent_workflow`'s form, `agent(base_url, api_key, task, **agent_args)`: a
real `agentscope.agent.ReActAgent` whose model is the policy behind the episode's OpenAI-compatible URL,
asked the task's prompt with a structured answer (AgentScope's `generate_response` tool, a `result`
text). It returns that answer, `{"result": ..., "memory_length": ...}`; the explorer's workflow scores it
(`rfthpc.workflows.agentscope_react`). AgentScope is imported only here, in the agent's process.
"""

from __future__ import annotations

import asyncio
from typing import Any

import agentscope

if not agentscope.__version__.startswith("1."):
    raise ImportError(f"AgentScope {agentscope.__version__} is installed; these agents are written for AgentScope "
                      "1.x (tools/setup_agentscope.sh installs 1.0.21)")

RESULT_HELP = "The solution of the problem, with the final answer inside \\boxed{}, e.g. \\boxed{42}."
"""What the structured answer's `result` field asks the model for."""


def react(base_url: str, api_key: str, task: dict[str, Any], *, system_prompt: str, tools: list[str],
          max_iters: int = 10, meta_tool: bool = False, temperature: float = 1.0, max_tokens: int = 4096,
          name: str = "react_agent") -> dict[str, Any]:
    """One episode of a ReAct agent on the task's prompt: `tools` names AgentScope's built-in tool functions
    it may call (e.g. `execute_python_code`), `meta_tool` lets it manage its tool groups (AgentScope's
    `enable_meta_tool`); at most `max_iters` reasoning-acting rounds. Returns the structured answer's
    `result` (the reply's text when it gave none) and the length of the agent's memory."""
    return asyncio.run(_react(base_url, api_key, task, system_prompt, tools, max_iters, meta_tool, temperature,
                              max_tokens, name))


async def _react(base_url: str, api_key: str, task: dict[str, Any], system_prompt: str, tools: list[str],
                 max_iters: int, meta_tool: bool, temperature: float, max_tokens: int, name: str) -> dict[str, Any]:
    import agentscope.tool
    from agentscope.agent import ReActAgent
    from agentscope.formatter import OpenAIChatFormatter
    from agentscope.memory import InMemoryMemory
    from agentscope.message import Msg
    from agentscope.model import OpenAIChatModel
    from pydantic import BaseModel, Field

    class Answer(BaseModel):
        result: str = Field(description=RESULT_HELP)

    toolkit = agentscope.tool.Toolkit()
    for tool in tools:
        toolkit.register_tool_function(getattr(agentscope.tool, tool))
    model = OpenAIChatModel(model_name="policy", api_key=api_key, stream=False,
                            client_kwargs={"base_url": base_url, "max_retries": 0},
                            generate_kwargs={"temperature": temperature, "max_tokens": max_tokens})
    agent = ReActAgent(name=name, sys_prompt=system_prompt, model=model, formatter=OpenAIChatFormatter(),
                       toolkit=toolkit, memory=InMemoryMemory(), enable_meta_tool=meta_tool, max_iters=max_iters)
    agent.set_console_output_enabled(False)
    reply = await agent.reply(Msg("user", task["prompt"], role="user"), structured_model=Answer)
    metadata = reply.metadata if isinstance(reply.metadata, dict) else {}
    result = metadata.get("result")
    if not isinstance(result, str):
        result = reply.get_text_content() or ""
    return {"result": result, "memory_length": await agent.memory.size()}

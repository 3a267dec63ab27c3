"""Workflows turn a Task and a rollout engine into a scored group of experiences.

| module        | does                                                                          |
| ------------- | ----------------------------------------------------------------------------- |
| `base`        | what a workflow is (`Experience`, `WorkflowContext`, `WorkflowResult`, needs)  |
| `registry`    | `WORKFLOWS`: the built-ins by name, or user code as `module:function`          |
| `simple`      | single-turn workflows: one prompt, `repeat_times` responses, one reward        |
| `math`        | math workflows                                                                |
| `toolcall`    | Trinity-RFT's tool-call workflow                                              |
| `judge`       | rewards from another model (an auxiliary model as judge)                      |
| `ruler`       | RULER: a judge ranks a task's whole group                                      |
| `env`         | multi-turn episodes of a text environment (`env_workflow`)                    |
| `episode`, `chat_turns` | an episode as a growing token sequence; its chat turns              |
| `frozen_lake` | Trinity-RFT's FrozenLake workflow                                              |
| `endpoint`    | the policy behind an OpenAI-compatible HTTP API, recording every call          |
| `agent`, `agent_runner` | `agent_workflow`: episodes of an agent the user wrote, in threads or processes |
| `agentscope_react`, `agentscope_agents` | Trinity-RFT's AgentScope 1.x workflows; their ReAct agents    |
| `checks`      | what `rfthpc config validate` asks of workflows, rewards and their columns     |
"""

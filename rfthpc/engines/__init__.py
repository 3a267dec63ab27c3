"""Rollout engines: vLLM (GPU or CPU build) and a transformers fallback, behind one small protocol.

| module        | does                                                                            |
| ------------- | ------------------------------------------------------------------------------- |
| `sampling`    | what a generate call takes and returns (`SamplingArgs`, `Completion`)            |
| `base`        | what every engine provides (`PolicyEngine`), its settings, `make_engine`        |
| `vllm_engine` | vLLM in process, weights updated in place (`vllm_worker` runs in its workers)   |
| `hf_engine`   | the transformers fallback                                                       |
| `batching`    | the generate calls of concurrent workflows gathered into one engine call        |
| `gpus`        | which GPUs each engine of an explorer uses                                      |
| `server`      | `rfthpc serve`: one engine of a shared auxiliary model, behind vLLM's server    |
| `remote`      | a shared auxiliary model reached over HTTP (the server's client)                |
"""


from rfthpc.engines.base import EngineSettings, GenerateRequest, PolicyEngine, make_engine

__all__ = ["EngineSettings", "GenerateRequest", "PolicyEngine", "make_engine"]

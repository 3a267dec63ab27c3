"""Rollout engines: vLLM (GPU or CPU build) and a transformers fallback, behind one small protocol."""

from rfthpc.engines.base import EngineSettings, GenerateRequest, PolicyEngine, make_engine

__all__ = ["EngineSettings", "GenerateRequest", "PolicyEngine", "make_engine"]

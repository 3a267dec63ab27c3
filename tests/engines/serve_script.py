"""`rfthpc.engines.server.ModelServer` as a script, for the tests: `python serve_script.py RUN_DIR ENGINE [MODEL_DIR]`
serves auxiliary model `judge` (the run has a trainer) with tests/engines/fake_vllm.py as its server process,
or, given MODEL_DIR, with vLLM's real server on that model."""

from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path

from rfthpc.config.settings import InferenceModelSettings
from rfthpc.engines.server import ModelServer

FAKE = Path(__file__).with_name("fake_vllm.py")
JUDGE = InferenceModelSettings(
    name="judge", engine_type="vllm", model_path="/unused", dtype="auto", max_model_len=None, seed=0,
    tensor_parallel_size=1, gpu_memory_utilization=0.9, enforce_eager=False, enable_prefix_caching=False,
    enable_chunked_prefill=False, cpu_kvcache_space_gb=1, chat_template=None, enable_thinking=None,
    max_prompt_tokens=None, max_response_tokens=None, placement="shared", engine_num=2, server_timeout=60.0)


def fake_command(model: InferenceModelSettings, engine: int, port: int) -> list[str]:
    return [sys.executable, str(FAKE), "--port", str(port), "--engine", str(engine)]


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if len(sys.argv) > 3:
        model = dataclasses.replace(JUDGE, model_path=sys.argv[3], max_model_len=256, cpu_kvcache_space_gb=1,
                                    server_timeout=600.0)
        server = ModelServer(Path(sys.argv[1]), model, int(sys.argv[2]), has_trainer=True)
    else:
        server = ModelServer(Path(sys.argv[1]), JUDGE, int(sys.argv[2]), has_trainer=True, command=fake_command)
    sys.exit(server.run_forever())

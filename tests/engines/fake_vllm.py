"""A stand-in for vLLM's OpenAI-compatible server: `/health`, `/v1/models` and `/v1/completions` answered
the way vLLM answers them (token ids, processed logprobs, top alternatives as `token_id:<id>`), with
made-up tokens: each sample is [prompt length, engine, sample index]. Used in the client's tests, and
run as a script (`python fake_vllm.py --port P --engine K`, key from VLLM_API_KEY) as the server
process of `rfthpc.engines.server` in its tests."""

from __future__ import annotations

import argparse
import json
import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Handler(BaseHTTPRequestHandler):
    server: FakeVLLM

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/health":
            return self._send(200, {})
        if self.headers.get("Authorization") != f"Bearer {self.server.api_key}":
            return self._send(401, {"error": "Unauthorized"})
        self._send(200, {"object": "list", "data": [{"id": "judge", "max_model_len": 321}]})

    def do_POST(self) -> None:
        fake = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        fake.requests.append(body)
        if self.headers.get("Authorization") != f"Bearer {fake.api_key}":
            return self._send(401, {"error": "Unauthorized"})
        if fake.reject:
            return self._send(400, {"error": {"message": "This model's maximum context length is 512 tokens"}})
        time.sleep(fake.delay_s)
        choices = []
        for prompt in body["prompt"]:
            for j in range(body["n"]):
                tokens = [len(prompt), fake.engine, j]
                choices.append({
                    "index": len(choices), "text": f"engine {fake.engine}", "finish_reason": "length",
                    "token_ids": tokens,
                    "logprobs": {"token_logprobs": [-0.5, -0.25, -0.125],
                                 "tokens": [f"token_id:{t}" for t in tokens],
                                 "top_logprobs": [{f"token_id:{t}": -0.5, "token_id:99": -0.1, "token_id:98": -9999.0}
                                                  for t in tokens]},
                })
        self._send(200, {"object": "text_completion", "choices": choices})

    def _send(self, code: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class FakeVLLM(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, engine: int, api_key: str = "key", delay_s: float = 0.0, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        super().__init__((host, port), Handler)
        self.engine, self.api_key, self.delay_s = engine, api_key, delay_s
        self.reject = False
        self.requests: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--engine", type=int, default=0)
    args = parser.parse_args()
    FakeVLLM(args.engine, os.environ["VLLM_API_KEY"], host="0.0.0.0", port=args.port).serve_forever()

"""One episode of a user's agent in a process of its own: `python -m rfthpc.workflows.agent_runner`.

`agent_workflow` starts this module with `workflow_args.python` (an interpreter with the agent's own
packages, e.g. AgentScope 1.x, whose pins vLLM's environment cannot meet) or the explorer's interpreter,
and writes one JSON object to its stdin: `agent` ("module:function" or "file.py:function"), `base_url`,
`key`, `task` and `agent_args`. The runner calls `agent(base_url, key, task, **agent_args)` and writes one
JSON line to its stdout: {"status": "ok", "value": what the agent returned} or {"status": "error",
"error": why}. Whatever the agent prints goes to stderr (the explorer's log), so it cannot garble the
answer. `--check SPEC [ARG...]` only imports the agent (exit 0, or 2 with the reason on stdout), for validation,
and, given arguments, calls it with them (a check function of the agent's kind).

Nothing here imports more than the standard library and `rfthpc.registry`: the interpreter running it
need not have rfthpc's dependencies, only rfthpc's source on its PYTHONPATH (the explorer puts it there).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any


def _answer(out: Any, status: str, **fields: Any) -> None:
    out.write(json.dumps({"status": status, **fields}) + "\n")
    out.flush()


def main(argv: list[str]) -> int:
    """Run one episode (or, with `--check SPEC`, import the agent only)."""
    from rfthpc.errors import ConfigError
    from rfthpc.registry import load_user_function

    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the agent's prints go to stderr; stdout carries the answer only
    if argv[:1] == ["--check"]:
        try:
            checked = load_user_function(argv[1], "workflow_args.agent")
            if argv[2:]:
                checked(*argv[2:])
        except ConfigError as e:
            _answer(out, "error", error=str(e))
            return 2
        _answer(out, "ok", value=None)
        return 0
    try:
        job = json.loads(sys.stdin.read())
        agent = load_user_function(job["agent"], "workflow_args.agent")
        returned = agent(job["base_url"], job["key"], job["task"], **job["agent_args"])
    except BaseException as e:
        _answer(out, "error", error=f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=5)}")
        return 1
    try:
        _answer(out, "ok", value=returned)
    except (TypeError, ValueError):
        _answer(out, "error", error=f"the agent returned {returned!r}, which is not JSON; return numbers, "
                                    "lists or dicts")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

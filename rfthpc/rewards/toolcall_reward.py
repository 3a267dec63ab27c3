"""`toolcall_reward`: is the response's tool call the reference one? (Tool-N1's rule, arXiv:2505.00024)

This is the scoring of Trinity-RFT's `toolcall_workflow`, which Trinity does inside the workflow
and does not register as a reward function; rfthpc registers it, so `toolcall_workflow` uses it by
default and any workflow can name it.

The reference answer is JSON: a list of calls `[{"name": ..., "arguments": {...}}, ...]` (`[]`: no
call is right). The response scores 1 only if all of these hold, else 0:
  - its last `<tool_call>...</tool_call>` holds JSON: a list of calls, or one call;
  - it holds exactly one `<think>` and one `</think>`, and the `</think>` comes before the first
    `<tool_call>`;
  - every call is an object with `name` and `arguments`;
  - its calls are the reference calls, in any order (the same names with the same arguments).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def _json(value: Any) -> Any:
    """`value` parsed from JSON, twice if it was JSON text of JSON text (as some datasets store it)."""
    for _ in range(2):
        if not isinstance(value, str):
            break
        value = json.loads(value)
    return value


def response_calls(response: str) -> list[Any] | None:
    """The calls in the response's last `<tool_call>` block (one call becomes a list of one); None if
    there is no block or it is not JSON."""
    blocks = _TOOL_CALL.findall(response)
    if not blocks:
        return None
    try:
        calls = _json(blocks[-1].strip())
    except ValueError:
        return None
    return [calls] if isinstance(calls, dict) else calls if isinstance(calls, list) else None


def _thinks_first(response: str) -> bool:
    if response.count("<think>") != 1 or response.count("</think>") != 1:
        return False
    call = response.find("<tool_call>")
    return call == -1 or response.find("</think>") < call


def _signature(call: dict[str, Any]) -> tuple[str, str]:
    return call["name"], json.dumps(call["arguments"], sort_keys=True)


def calls_match(calls: list[Any], reference: list[Any]) -> bool:
    """True if both are empty, or they hold the same calls (name and arguments) as often, in any order."""
    if not calls or not reference:
        return not calls and not reference
    try:
        return Counter(map(_signature, calls)) == Counter(map(_signature, reference))
    except (TypeError, KeyError):
        return False


def toolcall_reward(response: str, truth: str | None) -> dict[str, float]:
    """{"accuracy": 1} if the response thinks, then makes exactly the reference calls; else 0 (module doc)."""
    if truth is None:
        raise ValueError("the task has no reference calls: set format.response_key to the column holding them")
    try:
        reference = _json(truth)
    except ValueError as e:
        raise ValueError(f"the reference calls {truth!r} are not JSON: {e}") from None
    reference = [reference] if isinstance(reference, dict) else reference
    calls = response_calls(response)
    ok = (calls is not None and _thinks_first(response)
          and all(isinstance(c, dict) and "name" in c and "arguments" in c for c in calls)
          and calls_match(calls, reference))
    return {"accuracy": 1.0 if ok else 0.0}

"""The order desk the tool-result clearing tests talk to: the main LLM's scripted replies (a
``lookup_order`` call per "Look up order X", ``recall_memory`` for :data:`ASKED`, the ``crm``
and ``slow_check`` calls), bulky lookup results, and the tool results the requests carried."""

from __future__ import annotations

import json

from pipecat_summarizer.tools import RECALL_MEMORY
from tests.support.openai_server import Reply, is_summary_request

#: Each order's tracking code: the one detail of its bulky lookup result.
ORDERS = {"A17": "ZEBRA417", "B23": "OTTER523", "C31": "HERON631", "D47": "LYNX747"}
ASKED = "What was the tracking code of order A17?"
#: Pipecat's placeholder for a tool call still running.
IN_PROGRESS = "IN_PROGRESS"


def order_result(order: str, repeat: int = 150) -> dict:
    """A bulky lookup result (``repeat`` history words: 150 is ~650 tokens), its one detail
    near the start."""
    return {"order": order, "tracking": ORDERS[order], "history": "scanned at depot " * repeat}


def tool_call(call_id: str, name: str, arguments: dict) -> Reply:
    """The main LLM's reply that calls ``name`` with ``arguments``."""
    function = {"name": name, "arguments": json.dumps(arguments)}
    return Reply(tool_calls=[{"id": call_id, "type": "function", "function": function}])


def order_desk(body: dict) -> Reply:
    """The server's handler: summaries are scripted; each turn asks for its tool."""
    if is_summary_request(body):
        return Reply("FACTS:\n- orders were looked up")
    last = body["messages"][-1]
    text = last.get("content") if last.get("role") == "user" else None
    if text == ASKED:
        return tool_call("call_recall", RECALL_MEMORY, {"query": "order A17 tracking code"})
    if isinstance(text, str) and text.startswith("Look up order "):
        order = text.rsplit(" ", 1)[1]
        return tool_call(f"call_{order}", "lookup_order", {"order": order})
    if text == "Open my customer record":
        return tool_call("call_crm", "crm", {})
    if text == "Start the background check":
        return tool_call("call_slow", "slow_check", {})
    return Reply("Here it is." if last.get("role") == "tool" else "Sure thing.")


def tool_results(server, call_id: str) -> list[str]:
    """The results of the tool call ``call_id`` as the requests carried them, oldest first
    (not Pipecat's placeholder of a call still running, which a turn asked meanwhile
    carries)."""
    return [
        m["content"]
        for b in server.chat_requests
        for m in b["messages"]
        if m["role"] == "tool" and m.get("tool_call_id") == call_id
        if m["content"] != IN_PROGRESS
    ]

"""Lossless tool-result clearing: which bulky tool results leave the context (pure).

A tool result (a CRM lookup, a search) is heard once and then resent with every request.
Clearing swaps its content for a short placeholder and keeps the message itself, so the
assistant's tool call and its result stay paired (no provider rejects the request); the
original is archived verbatim by the session and comes back through recall.

What is never cleared: the latest ``keep_latest`` tool results, results of
``min_result_tokens`` or less, results of excluded tools and of ``recall_memory`` itself,
results still in progress (Pipecat's ``IN_PROGRESS`` placeholder, an async tool's running
message), results whose call is not in view (the tool's name is unknown), and a placeholder
(clearing is idempotent). Nothing is cleared unless at least ``min_freed_tokens`` can be
freed at once, so the cached prefix is not broken for a few tokens.

Pure functions over plain message lists; no Pipecat imports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pipecat_summarizer._compaction.measure import is_placeholder
from pipecat_summarizer.params import ClearingParams

#: The recall tool's name (``tools.RECALL_MEMORY``): its results are never cleared, they are
#: what brings cleared results back.
RECALL_TOOL = "recall_memory"

#: How every placeholder starts; a message whose content starts so is never cleared again.
PLACEHOLDER_PREFIX = "[tool result cleared]"


def placeholder(tool: str, tokens: int, *, archived: bool = True) -> str:
    """The text a cleared result's content becomes: data, not an instruction.

    Args:
        tool: The tool's name.
        tokens: The original result's estimated tokens.
        archived: The original is in the store (``False``: the text is gone).
    """
    where = (
        "the original is kept in memory; recall_memory, or asking about it, brings it back."
        if archived
        else "the original is no longer available."
    )
    return (
        f"{PLACEHOLDER_PREFIX} The result of {tool} (about {tokens} tokens) was cleared "
        f"from the context to save space; {where}"
    )


def is_cleared(message: Any) -> bool:
    """True for a tool result that already holds a clearing placeholder."""
    if not isinstance(message, dict) or message.get("role") != "tool":
        return False
    content = message.get("content")
    return isinstance(content, str) and content.startswith(PLACEHOLDER_PREFIX)


def tool_names(messages: Sequence[Any]) -> dict[str, str]:
    """Each tool call id in ``messages`` mapped to its function's name."""
    names: dict[str, str] = {}
    for m in messages:
        if not isinstance(m, dict) or m.get("role") != "assistant":
            continue
        for call in m.get("tool_calls") or ():
            if not isinstance(call, dict):
                continue
            function = call.get("function")
            name = function.get("name") if isinstance(function, dict) else None
            if isinstance(call.get("id"), str) and isinstance(name, str):
                names[call["id"]] = name
    return names


def _is_result(message: Any) -> bool:
    return (
        isinstance(message, dict)
        and message.get("role") == "tool"
        and isinstance(message.get("tool_call_id"), str)
    )


@dataclass(frozen=True)
class Clearing:
    """The tool results chosen for clearing.

    Parameters:
        indices: Positions of the results to clear in the list planned on, in order.
        tools: Each cleared result's tool name (same order).
        tokens: Each cleared result's estimated tokens before clearing (same order).
        freed_tokens: Estimated tokens freed (originals minus placeholders).
    """

    indices: tuple[int, ...] = ()
    tools: tuple[str, ...] = ()
    tokens: tuple[int, ...] = ()
    freed_tokens: int = 0

    def __bool__(self) -> bool:
        """True when something is to be cleared."""
        return bool(self.indices)


def plan_clearing(
    messages: Sequence[Any],
    params: ClearingParams,
    count: Callable[[Any], int],
    *,
    archived: bool = True,
    protected: Callable[[Any], bool] | None = None,
) -> Clearing:
    """Which tool results of ``messages`` to clear (the empty ``Clearing``: none).

    Args:
        messages: The context's view, in order.
        params: The clearing options.
        count: A message's tokens.
        archived: The originals will be archived (the placeholder says how to get one back).
        protected: Messages never to clear besides the rules (a plan in flight's).
    """
    results = [i for i, m in enumerate(messages) if _is_result(m)]
    keep = params.keep_latest
    older = results[: len(results) - keep] if keep else results
    if not older:
        return Clearing()
    names = tool_names(messages)
    excluded = {RECALL_TOOL, *params.exclude_tools}
    indices, tools, sizes, freed = [], [], [], 0
    for i in older:
        m = messages[i]
        name = names.get(m["tool_call_id"])
        if name is None or name in excluded or is_placeholder(m) or is_cleared(m):
            continue
        if protected is not None and protected(m):
            continue
        tokens = count(m)
        if tokens <= params.min_result_tokens:
            continue
        saved = tokens - count(_cleared(m, placeholder(name, tokens, archived=archived)))
        if saved <= 0:
            continue
        indices.append(i)
        tools.append(name)
        sizes.append(tokens)
        freed += saved
    if not indices or freed < params.min_freed_tokens:
        return Clearing()
    return Clearing(tuple(indices), tuple(tools), tuple(sizes), freed)


def _cleared(message: dict, text: str) -> dict:
    # a new dict: the message keeps its role, tool_call_id and any other key
    return {**message, "content": text}


def apply_clearing(
    messages: Sequence[Any], clearing: Clearing, *, archived: bool = True
) -> tuple[list, list]:
    """``messages`` with the chosen results' content replaced by their placeholders.

    Returns:
        The new list (every other message the same object) and the originals cleared.
    """
    out = list(messages)
    originals = []
    for i, tool, tokens in zip(clearing.indices, clearing.tools, clearing.tokens, strict=True):
        original = out[i]
        out[i] = _cleared(original, placeholder(tool, tokens, archived=archived))
        originals.append(original)
    return out, originals

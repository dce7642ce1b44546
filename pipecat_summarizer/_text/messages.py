"""The one reader of a message's text, and the fields every archived message is read by.

A context message is an OpenAI-format dict (``content`` a string or a list of parts, maybe
``tool_calls``) or a provider-specific object. Its text is read by :func:`content_texts`
everywhere; what differs between readers is only which parts of the message they want:

- :func:`message_text`: everything searchable (content and tool calls); what the store
  archives and searches;
- :func:`spoken_text`: what was said (content only): recall's query, the names the
  instructions give and "is it already in view?", where a tool call's JSON would match
  everything;
- the token estimate reads each piece on its own (``_text.tokens.message_texts``) with
  ``typed=True``: only parts whose ``type`` is a text type count as text, as in Pipecat's
  estimate.

Pure; no Pipecat imports.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Content part types that hold text.
TEXT_PART_TYPES = ("text", "input_text", "output_text")


def json_text(value: Any) -> str:
    """A value as text: a string as it is, anything else as JSON (its ``str`` when it cannot
    be encoded: a deeply nested or circular value)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):  # deeply nested values too
        return str(value)


def content_texts(content: Any, *, typed: bool = False) -> list[str]:
    """The texts of a message's ``content``: a string whole, or each text part's text.

    Args:
        content: A message's ``content`` (a string, a list of parts, anything else).
        typed: Which parts are text. ``False``: any part with a string ``text``. ``True``:
            parts whose ``type`` is in :data:`TEXT_PART_TYPES`, their ``text`` as a string
            (``""`` when missing), Pipecat's rule for counting.

    Returns:
        The texts in order (none for other content).
    """
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    if typed:
        return [
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") in TEXT_PART_TYPES
        ]
    return [p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]


def spoken_text(message: Any) -> str:
    """What a message says: its string content or its text parts joined (``""`` for anything
    that is not a message dict; tool calls are not read)."""
    if not isinstance(message, Mapping):
        return ""
    return "\n".join(content_texts(message.get("content")))


def message_text(message: Any) -> str:
    """The searchable text of a message: its content, text parts joined, and the names and
    arguments of its tool calls (``name(arguments)``); a provider object as its ``str``."""
    if not isinstance(message, Mapping):
        return str(message)
    parts = content_texts(message.get("content"))
    for call in message.get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(fn, Mapping):
            parts.append(f"{fn.get('name', '')}({fn.get('arguments', '')})")
    return "\n".join(p for p in parts if p)


@dataclass(frozen=True)
class ArchivedText:
    """The fields an archived message is read by (a search hit, a hit ranked by meaning).

    Declared once here; :class:`~pipecat_summarizer.store.SearchHit` and recall's hits add
    their own fields after these, in this order (backends build hits from rows positionally).
    The stored record, ``ArchivedMessage``, carries the same six fields in its own
    (positional, public) order.

    Parameters:
        call_id: The call it was said in (the store's session key).
        position: Its place in that call's archive (0-based).
        turn: The user turn at which it left the context.
        at: When it left (seconds since the epoch).
        role: Who said it (``user``, ``assistant``, ``tool``...).
        content: Its text.
    """

    call_id: str
    position: int
    turn: int
    at: float
    role: str
    content: str

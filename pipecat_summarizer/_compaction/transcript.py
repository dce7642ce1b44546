"""The transcript the summarizer reads: one line per message, and its parser.

:func:`encode_message` writes each message on one line: its role (written by this module, a
bare word such as ``user`` or a JSON string), the message's other fields as one compact JSON
object when it has any (tool calls, ``tool_call_id``, ``provider``, ``shortened``), then
``": "`` and its text. Line breaks, backslashes and every character some reader takes for a
line break are escaped in the text (``\\n``, ``\\\\``, ``\\u2028``), so a message's text can
never start a line of its own and pass for another message, a role, a tool call or a tool
result; it costs about what Pipecat's ``USER: text`` does. Media parts become placeholders
(``[image]``, ``[audio, 31 KB]``) and provider-specific messages keep their text, so nothing
summarized vanishes (:mod:`pipecat_summarizer._compaction.message_text`).
:func:`parse_transcript` is the exact inverse of
:func:`format_transcript`; :mod:`pipecat_summarizer._compaction.prompt` wraps the transcript in the
request and parses the request back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from pipecat.processors.aggregators.llm_context import LLMSpecificMessage

from pipecat_summarizer._compaction.message_text import content_text, provider_message
from pipecat_summarizer._text.messages import json_text

SHORTENED_MARK = "[... shortened for the summary: {omitted} characters omitted ...]"
#: The detail a cut answer's line carries: what the caller heard of it.
INTERRUPTED_MARK = "the caller cut this answer off and heard only this part"
#: The detail a resume's notice carries: user-role, but the application's text.
NOTICE_MARK = "the application's note about the dropped connection, not the caller's words"


def shorten(text: str, max_chars: int) -> str:
    """Keep the head and tail of ``text`` within about ``max_chars``, marking the cut.

    Args:
        text: The text.
        max_chars: The length to aim for.

    Returns:
        ``text`` itself when it fits, otherwise its head, a marker, and its tail.
    """
    if len(text) <= max_chars:
        return text
    keep = max(2, max_chars - 80)
    head, tail = text[: keep * 2 // 3], text[len(text) - keep // 3 :]
    return f"{head}\n{SHORTENED_MARK.format(omitted=len(text) - len(head) - len(tail))}\n{tail}"


# Pipecat's placeholder for a tool result that has not arrived yet.
_PENDING_RESULT = "IN_PROGRESS"
# Characters some readers take for line breaks even though JSON leaves them unescaped.
_LINE_BREAKS = {"\u0085": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


_PLAIN_KEYS = ("role", "provider", "text", "tool_calls", "shortened")


def _json_safe(value: Any) -> Any:
    """``value`` if JSON can write it, else its text (or a placeholder if too deep)."""
    try:
        json.dumps(value, default=str)
        return value
    except (TypeError, ValueError, RecursionError):
        try:
            return json_text(value)
        except RecursionError:
            return "[too deeply nested to show]"


def _dumps(entry: dict[str, Any]) -> str:
    try:
        line = json.dumps(entry, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError, RecursionError):
        # Arguments too deep or odd for JSON: their text instead, or a placeholder when even
        # that recurses too deep (repr of a deeply nested list does).
        for call in entry.get("tool_calls", ()):
            try:
                call["arguments"] = json_text(call.get("arguments"))
            except RecursionError:
                call["arguments"] = "[arguments too deeply nested to show]"
        entry = {k: v if k in _PLAIN_KEYS else _json_safe(v) for k, v in entry.items()}
        line = json.dumps(entry, ensure_ascii=False, separators=(",", ":"), default=str)
    for raw, escaped in _LINE_BREAKS.items():
        line = line.replace(raw, escaped)
    return line


# A role written bare (``user``); any other role is written as a JSON string.
_BARE_ROLE = re.compile(r"[a-z][a-z_]*")
# In a text: the escape character itself, and every character some reader takes for a line
# break (or that is invisible control noise); a tab stays as it is.
_TEXT_UNSAFE = re.compile("[\\\\\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029]")
_TEXT_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r"}
_TEXT_ESCAPED = re.compile(r"\\(\\|n|r|u[0-9a-f]{4}|.?)")
_JSON = json.JSONDecoder()


def escape_text(text: str) -> str:
    """``text`` on one line: backslashes, line breaks and control characters escaped."""
    return _TEXT_UNSAFE.sub(
        lambda m: _TEXT_ESCAPES.get(m.group(), f"\\u{ord(m.group()):04x}"), text
    )


def _unescape(match: re.Match) -> str:
    code = match.group(1)
    if code == "\\":
        return "\\"
    if code in ("n", "r"):
        return "\n" if code == "n" else "\r"
    if len(code) == 5:
        return chr(int(code[1:], 16))
    raise ValueError(f"unknown escape '\\{code}'")


def unescape_text(text: str) -> str:
    """The inverse of :func:`escape_text`.

    Raises:
        ValueError: On a backslash that starts no escape :func:`escape_text` writes.
    """
    return _TEXT_ESCAPED.sub(_unescape, text)


def _role_token(role: str) -> str:
    if _BARE_ROLE.fullmatch(role):
        return role
    quoted = json.dumps(role, ensure_ascii=False)
    for raw, escaped in _LINE_BREAKS.items():
        quoted = quoted.replace(raw, escaped)
    return quoted


def encode_message(
    message: Any,
    *,
    max_chars: int | None = None,
    unresolved: Collection[str] = frozenset(),
    interrupted: bool = False,
    notice: bool = False,
) -> str:
    """Encode one message as one line of the transcript.

    The line is the role (a bare lowercase word, or a JSON string for any other role), then,
    when the message has any, a space and a compact JSON object of its details:
    ``tool_call_id``, ``provider`` (for a provider-specific message), ``tool_calls`` (each
    ``{"id", "name", "arguments"}``, plus ``"no_result": true`` for an id in
    ``unresolved``), ``"shortened": true`` when text was cut and ``"interrupted"``
    (:data:`INTERRUPTED_MARK`) for an answer a barge-in cut off, ``"notice"``
    (:data:`NOTICE_MARK`) for a resume's notice (user-role, the application's text); then
    ``": "`` and the text (:func:`escape_text`), or ``":"`` alone for an empty text, or
    nothing when the content is ``None``. Nothing in a text can end the line, and every other
    message is on a line of its own that starts with a role written here: no text can pass
    for another message, role or tool result.

    Args:
        message: An OpenAI-format message dict or an ``LLMSpecificMessage``.
        max_chars: Cut the text and each call's arguments to about this length.
        unresolved: Ids of tool calls whose result never arrived.
        interrupted: The message is an answer the caller cut off (heard only in part).
        notice: The message is a resume's notice (the application's, though user-role).

    Returns:
        The line.
    """
    details: dict[str, Any] = {}
    text: str | None = None
    cut = False

    def _cut(value: str) -> str:
        nonlocal cut
        if max_chars is None or len(value) <= max_chars:
            return value
        cut = True
        return shorten(value, max_chars)

    if isinstance(message, LLMSpecificMessage):
        role, text = provider_message(message)
        details["provider"] = str(message.llm)
        text = _cut(text)
    elif not isinstance(message, dict):
        role, text = "unknown", _cut(str(message))
    else:
        role = str(message.get("role", "unknown"))
        if "tool_call_id" in message:
            details["tool_call_id"] = message["tool_call_id"]
        content = message.get("content")
        if content is not None:
            text = _cut(content_text(content))
        calls = []
        for call in message.get("tool_calls") or []:
            if not isinstance(call, dict):
                continue
            func = call.get("function")
            func = func if isinstance(func, dict) else {}
            args = func.get("arguments", "")
            if max_chars is not None:
                args = _cut(json_text(args))
            encoded = {"id": call.get("id"), "name": func.get("name"), "arguments": args}
            if isinstance(call.get("id"), str) and call["id"] in unresolved:
                encoded["no_result"] = True
            calls.append(encoded)
        if calls:
            details["tool_calls"] = calls
    if cut:
        details["shortened"] = True
    if interrupted:
        details["interrupted"] = INTERRUPTED_MARK
    if notice:
        details["notice"] = NOTICE_MARK
    line = _role_token(role)
    if details:
        line += " " + _dumps(details)
    if text is not None:
        line += f": {escape_text(text)}" if text else ":"
    return line


def find_unresolved_calls(messages: Sequence[Any]) -> set[str]:
    """Ids of the tool calls in ``messages`` with no result among them.

    A call counts as unresolved when no tool message answers it, or only Pipecat's
    ``IN_PROGRESS`` placeholder does.

    Args:
        messages: The messages being summarized.

    Returns:
        The call ids.
    """
    calls: list[str] = []
    answered: set[str] = set()
    for m in messages:
        if not isinstance(m, dict):
            continue
        for call in m.get("tool_calls") or []:
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                calls.append(call["id"])
        if m.get("role") == "tool" and m.get("content") != _PENDING_RESULT:
            answered.add(str(m.get("tool_call_id")))
    return {c for c in calls if c not in answered}


def format_transcript(
    messages: Sequence[Any],
    *,
    shortened: Collection[int] = frozenset(),
    max_chars: int = 2000,
    unresolved: Collection[str] | None = None,
    interrupted: Collection[int] = frozenset(),
    notices: Collection[int] = frozenset(),
) -> str:
    """Format messages as the summarizer's transcript: one line per message.

    See :func:`encode_message` for the line format and :func:`parse_transcript` for the
    inverse.

    Args:
        messages: The messages to format (dicts and ``LLMSpecificMessage``\\ s).
        shortened: Ids (``id()``) of messages to send shortened (head and tail).
        max_chars: The length each shortened text is cut to.
        unresolved: Ids of tool calls whose result never arrived; ``None`` finds them
            (:func:`find_unresolved_calls`).
        interrupted: Ids (``id()``) of answers a barge-in cut off.
        notices: Ids (``id()``) of a resume's notices (known by identity, never by text).

    Returns:
        The transcript.
    """
    if unresolved is None:
        unresolved = find_unresolved_calls(messages)
    return "\n".join(
        encode_message(
            m,
            max_chars=max_chars if id(m) in shortened else None,
            unresolved=unresolved,
            interrupted=id(m) in interrupted,
            notice=id(m) in notices,
        )
        for m in messages
    )


@dataclass(frozen=True)
class ParsedTranscript:
    """A transcript decoded back into messages.

    Parameters:
        messages: OpenAI-format messages, oldest first; ``content`` is the line's text (or
            ``None``), tool calls are ``{"id", "type": "function", "function": {...}}``.
        shortened: Indices of the messages that were sent shortened.
        unresolved: Ids of the tool calls marked as having no result.
        provider_specific: Indices of the messages that were provider-specific.
        interrupted: Indices of the answers marked as cut off by a barge-in.
    """

    messages: list[dict[str, Any]]
    shortened: frozenset[int] = frozenset()
    unresolved: frozenset[str] = frozenset()
    provider_specific: frozenset[int] = frozenset()
    interrupted: frozenset[int] = frozenset()


def _parse_line(line: str, number: int) -> tuple[str, dict[str, Any], str | None]:
    """``(role, details, text)`` of one transcript line (see :func:`encode_message`)."""
    where = f"transcript line {number}"
    if line.startswith('"'):
        try:
            role, end = _JSON.raw_decode(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: 'role' is not a JSON string ({e.msg})") from None
    else:
        bare = _BARE_ROLE.match(line)
        role, end = (bare.group(), bare.end()) if bare else (None, 0)
    if not isinstance(role, str):
        raise ValueError(f"{where}: 'role' must be a lowercase word or a JSON string")
    details: Any = {}
    if line.startswith(" {", end):
        try:
            details, end = _JSON.raw_decode(line, end + 1)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: the details are not JSON ({e.msg})") from None
        if not isinstance(details, dict):
            raise ValueError(f"{where}: the details must be a JSON object")
    rest = line[end:]
    if not rest:
        return role, details, None
    if rest == ":":
        return role, details, ""
    if not rest.startswith(": "):
        raise ValueError(f"{where}: 'text' must follow the role after ': '")
    try:
        return role, details, unescape_text(rest[2:])
    except ValueError as e:
        raise ValueError(f"{where}: 'text' has an {e}") from None


def parse_transcript(text: str) -> ParsedTranscript:
    """Decode a transcript written by :func:`format_transcript`.

    Args:
        text: The transcript (the text between the delimiter tags).

    Returns:
        The messages and their marks.

    Raises:
        ValueError: If a line does not start with a role, its details are not a JSON
            object, or its text is malformed; the message names the line and the field.
    """
    messages: list[dict[str, Any]] = []
    shortened: set[int] = set()
    unresolved: set[str] = set()
    provider: set[int] = set()
    interrupted: set[int] = set()
    for number, line in enumerate(text.split("\n"), start=1):
        if not line:
            continue
        role, entry, content = _parse_line(line, number)
        index = len(messages)
        message: dict[str, Any] = {"role": role, "content": content}
        if "tool_call_id" in entry:
            message["tool_call_id"] = entry["tool_call_id"]
        calls = entry.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
                raise ValueError(
                    f"transcript line {number}: 'tool_calls' must be a list of objects"
                )
            message["tool_calls"] = [
                {
                    "id": c.get("id"),
                    "type": "function",
                    "function": {"name": c.get("name"), "arguments": c.get("arguments", "")},
                }
                for c in calls
            ]
            unresolved.update(
                c["id"]
                for c in calls
                if c.get("no_result") is True and isinstance(c.get("id"), str)
            )
        if entry.get("shortened") is True:
            shortened.add(index)
        if "provider" in entry:
            provider.add(index)
        if entry.get("interrupted"):
            interrupted.add(index)
        messages.append(message)
    return ParsedTranscript(
        messages,
        frozenset(shortened),
        frozenset(unresolved),
        frozenset(provider),
        frozenset(interrupted),
    )

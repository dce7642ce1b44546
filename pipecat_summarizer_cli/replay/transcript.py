"""Transcript loading and turn splitting for the replay harness (pure, no Pipecat).

A transcript is a JSONL file with one OpenAI-format chat message per line: ``system``,
``developer``, ``user``, ``assistant`` (with optional ``tool_calls``) and ``tool`` (with a
``tool_call_id`` answering an earlier call). Blank lines are skipped. Every problem is
reported as a :class:`TranscriptError` naming ``file:line``.

A *turn* is a user message and everything up to the next user message. The replay LLM
answers each request of a turn with the next :class:`Step`: the assistant text written
before a tool call is spoken with it, the call's recorded results are returned by the tool
handler, and the text after the last call is the final answer. A Pipecat assistant
aggregator stores consecutive assistant texts of one response as one message, so two
recorded assistant messages in a row become one.

A message may carry a ``"timestamp"``: seconds from the start of the call (a number) or an
ISO 8601 date and time. It is taken out of the message (never sent to an LLM); on user
messages it sets when the turn starts in the replay in simulated real time. Timestamps of
user messages must not go backwards.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from pipecat.processors.aggregators.llm_context import LLMContextMessage

ROLES = ("system", "developer", "user", "assistant", "tool")
INSTRUCTION_ROLES = ("system", "developer")


class TranscriptError(ValueError):
    """A transcript line is invalid; the message names the file and line."""

    def __init__(self, source: str, line: int | None, problem: str):
        """Build the error.

        Args:
            source: The file name (or ``"<transcript>"``).
            line: The 1-based line number, or ``None`` for the whole file.
            problem: What is wrong.
        """
        self.source = source
        self.line = line
        self.problem = problem
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class ToolCall:
    """One recorded tool call.

    Parameters:
        id: The ``tool_call_id``.
        name: The function name.
        arguments: The parsed arguments.
    """

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class Step:
    """What the replay LLM answers to one request.

    Parameters:
        text: Assistant text to stream (may be empty).
        tool_calls: Calls to run after the text; an empty list ends the turn.
        results: The recorded result content of each call, by ``tool_call_id``.
    """

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)


@dataclass
class Turn:
    """One user turn.

    Parameters:
        index: 1-based turn number.
        inputs: The messages appended to the context to start the turn: the user message,
            preceded or followed by any system/developer instruction injected at that point.
        responses: The recorded assistant and tool messages of the turn, in order.
        steps: The same responses as replay steps (see the module docstring).
        line: Line number of the user message.
        started_at: The user message's timestamp in seconds, if it had one.
    """

    index: int
    inputs: list[dict]
    responses: list[dict]
    steps: list[Step]
    line: int | None = None
    started_at: float | None = None

    @property
    def user_message(self) -> dict:
        """The turn's user message."""
        return next(m for m in self.inputs if m.get("role") == "user")


@dataclass
class Transcript:
    """A validated transcript split into a preamble and turns.

    Parameters:
        name: A display name (the file stem).
        messages: Every message, in order.
        preamble: Messages before the first user message (system prompt, greeting): the
            initial context.
        turns: The user turns.
        warnings: Things the replay cannot reproduce exactly (for example instructions
            after the last turn).
    """

    name: str
    messages: list[dict]
    preamble: list[dict]
    turns: list[Turn]
    warnings: list[str] = field(default_factory=list)


def _timestamp(value: Any, source: str, line: int) -> float:
    """A message's ``timestamp`` in seconds (numbers as given, ISO 8601 as POSIX time)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TranscriptError(source, line, "timestamp must be seconds or an ISO 8601 string")
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise TranscriptError(
                source, line, f"timestamp {value!r} is not an ISO 8601 date and time"
            ) from None
    if not math.isfinite(value) or value < 0:
        raise TranscriptError(source, line, "timestamp must be a non-negative number of seconds")
    return float(value)


def message_words(message: dict) -> int:
    """Words a message says (its text content), for speaking times."""
    return len(_text(message.get("content")).split())


def _content_ok(content: Any) -> bool:
    if isinstance(content, str):
        return True
    if isinstance(content, list):
        return all(isinstance(p, dict) and isinstance(p.get("type"), str) for p in content)
    return False


def _parse_arguments(raw: Any, source: str, line: int, call_id: str) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if raw is None or raw == "":
        return {}
    if not isinstance(raw, str):
        raise TranscriptError(source, line, f"tool call {call_id!r}: arguments must be a string")
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as e:
        raise TranscriptError(
            source, line, f"tool call {call_id!r}: arguments are not valid JSON ({e.msg})"
        ) from None
    if not isinstance(parsed, dict):
        raise TranscriptError(source, line, f"tool call {call_id!r}: arguments must be an object")
    return parsed


def validate_messages(
    items: Iterable[tuple[int, Any]], source: str = "<transcript>"
) -> tuple[list[dict], list[int], dict[str, ToolCall]]:
    """Validate messages given with their line numbers.

    Args:
        items: ``(line, message)`` pairs.
        source: The file name used in errors.

    Returns:
        The messages, their line numbers, and every tool call by id.

    Raises:
        TranscriptError: On the first invalid message.
    """
    messages: list[dict] = []
    lines: list[int] = []
    calls: dict[str, ToolCall] = {}
    call_line: dict[str, int] = {}
    unanswered: dict[str, int] = {}
    last_time: tuple[float, int] | None = None
    for line, msg in items:
        if not isinstance(msg, dict):
            raise TranscriptError(source, line, f"expected a JSON object, got {type(msg).__name__}")
        if "timestamp" in msg:
            seconds = _timestamp(msg["timestamp"], source, line)
            if msg.get("role") == "user":
                if last_time is not None and seconds < last_time[0]:
                    raise TranscriptError(
                        source,
                        line,
                        f"timestamp goes backwards (earlier than the user turn on line "
                        f"{last_time[1]})",
                    )
                last_time = (seconds, line)
            msg = {**msg, "timestamp": seconds}
        role = msg.get("role")
        if role not in ROLES:
            raise TranscriptError(
                source, line, f"invalid role {role!r} (expected one of {', '.join(ROLES)})"
            )
        content = msg.get("content")
        if role in ("system", "developer", "user") and not _content_ok(content):
            raise TranscriptError(source, line, f"{role} message needs a string or parts content")
        if role == "assistant":
            tool_calls = msg.get("tool_calls")
            if content is not None and not _content_ok(content):
                raise TranscriptError(source, line, "assistant content must be a string or null")
            if tool_calls is None:
                if content is None:
                    raise TranscriptError(
                        source, line, "assistant message has neither content nor tool_calls"
                    )
            else:
                if not isinstance(tool_calls, list) or not tool_calls:
                    raise TranscriptError(source, line, "tool_calls must be a non-empty list")
                for call in tool_calls:
                    func = call.get("function") if isinstance(call, dict) else None
                    call_id = call.get("id") if isinstance(call, dict) else None
                    if not isinstance(call_id, str) or not call_id:
                        raise TranscriptError(source, line, "every tool call needs a string id")
                    if call_id in calls:
                        raise TranscriptError(
                            source,
                            line,
                            f"duplicate tool call id {call_id!r} "
                            f"(first on line {call_line[call_id]})",
                        )
                    if not isinstance(func, dict) or not isinstance(func.get("name"), str):
                        raise TranscriptError(
                            source, line, f"tool call {call_id!r} needs function.name"
                        )
                    args = _parse_arguments(func.get("arguments"), source, line, call_id)
                    calls[call_id] = ToolCall(call_id, func["name"], args)
                    call_line[call_id] = line
                    unanswered[call_id] = line
        if role == "tool":
            call_id = msg.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise TranscriptError(source, line, "tool message needs a tool_call_id")
            if call_id not in calls:
                raise TranscriptError(
                    source, line, f"tool_call_id {call_id!r} does not match any earlier tool call"
                )
            if call_id not in unanswered:
                raise TranscriptError(source, line, f"tool call {call_id!r} already has a result")
            if content is not None and not _content_ok(content):
                raise TranscriptError(source, line, "tool content must be a string")
            del unanswered[call_id]
        elif unanswered and role == "user":
            call_id, at = next(iter(unanswered.items()))
            raise TranscriptError(
                source, at, f"tool call {call_id!r} has no result before the next user message"
            )
        messages.append(msg)
        lines.append(line)
    if unanswered:
        call_id, at = next(iter(unanswered.items()))
        raise TranscriptError(source, at, f"tool call {call_id!r} has no result")
    if not any(m["role"] == "user" for m in messages):
        raise TranscriptError(source, None, "the transcript has no user message")
    return messages, lines, calls


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _result_value(content: Any) -> Any:
    # The assistant aggregator stores json.dumps(result): hand it back the parsed value so
    # a JSON result is stored as JSON rather than as a quoted string.
    text = _text(content)
    if not text:
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def build_steps(responses: Sequence[dict], calls: dict[str, ToolCall] | None = None) -> list[Step]:
    """Turn a turn's recorded responses into replay steps.

    Args:
        responses: The assistant and tool messages of one turn.
        calls: Tool calls by id (parsed arguments); parsed from the messages when omitted.

    Returns:
        At least one step; the last one has no tool calls.
    """
    steps: list[Step] = []
    text_parts: list[str] = []
    by_id: dict[str, Step] = {}
    for msg in responses:
        role = msg.get("role")
        if role == "assistant":
            text = _text(msg.get("content"))
            if text:
                text_parts.append(text)
            if msg.get("tool_calls"):
                step = Step(text="\n".join(text_parts))
                text_parts = []
                for call in msg["tool_calls"]:
                    tc = (calls or {}).get(call["id"]) or ToolCall(
                        call["id"],
                        call["function"]["name"],
                        _parse_arguments(
                            call["function"].get("arguments"), "<turn>", 0, call["id"]
                        ),
                    )
                    step.tool_calls.append(tc)
                    by_id[tc.id] = step
                steps.append(step)
        elif role == "tool":
            owner = by_id.get(str(msg.get("tool_call_id")))
            if owner is not None:
                owner.results[msg["tool_call_id"]] = _result_value(msg.get("content"))
    steps.append(Step(text="\n".join(text_parts)))
    return steps


def split_turns(
    messages: Sequence[dict],
    lines: Sequence[int] | None = None,
    calls: dict[str, ToolCall] | None = None,
) -> tuple[list[dict], list[Turn], list[str]]:
    """Split validated messages into the preamble and the user turns.

    System/developer messages injected mid-call are appended with the nearest user
    message: with the current one if no answer has been recorded yet, otherwise with the
    next one.

    Args:
        messages: Validated messages.
        lines: Their line numbers (optional).
        calls: Tool calls by id (optional).

    Returns:
        ``(preamble, turns, warnings)``.
    """
    lines = list(lines) if lines is not None else list(range(1, len(messages) + 1))
    first_user = next(i for i, m in enumerate(messages) if m["role"] == "user")
    preamble = [_without_timestamp(m) for m in messages[:first_user]]
    turns: list[Turn] = []
    pending: list[dict] = []
    warnings: list[str] = []
    current: Turn | None = None
    for i in range(first_user, len(messages)):
        msg = messages[i]
        role = msg["role"]
        started_at = msg.get("timestamp")
        msg = _without_timestamp(msg)
        if role == "user":
            current = Turn(len(turns) + 1, [*pending, msg], [], [], lines[i], started_at)
            pending = []
            turns.append(current)
        elif role in INSTRUCTION_ROLES:
            if current is not None and not current.responses:
                current.inputs.append(msg)
            else:
                pending.append(msg)
        else:
            assert current is not None
            current.responses.append(msg)
    if pending:
        warnings.append(
            f"{len(pending)} system/developer message(s) after the last turn are not replayed"
        )
    for turn in turns:
        turn.steps = build_steps(turn.responses, calls)
    return preamble, turns, warnings


def _without_timestamp(message: dict) -> dict:
    if "timestamp" not in message:
        return message
    return {k: v for k, v in message.items() if k != "timestamp"}


def parse_lines(text_lines: Iterable[str], source: str) -> list[tuple[int, Any]]:
    """Parse JSONL lines into ``(line, value)`` pairs, skipping blank lines.

    Raises:
        TranscriptError: On a line that is not valid JSON.
    """
    items = []
    for n, raw in enumerate(text_lines, start=1):
        if not raw.strip():
            continue
        try:
            items.append((n, json.loads(raw)))
        except json.JSONDecodeError as e:
            raise TranscriptError(
                source, n, f"invalid JSON ({e.msg} at column {e.colno})"
            ) from None
    return items


def transcript_from_messages(
    messages: Sequence[dict], name: str = "transcript", source: str = "<transcript>"
) -> Transcript:
    """Validate and split messages that are already in memory.

    Args:
        messages: OpenAI-format messages.
        name: Display name.
        source: Name used in errors.

    Returns:
        The transcript.
    """
    valid, lines, calls = validate_messages(enumerate(messages, start=1), source)
    preamble, turns, warnings = split_turns(valid, lines, calls)
    return Transcript(name, [_without_timestamp(m) for m in valid], preamble, turns, warnings)


def load_transcript(path: str | Path) -> Transcript:
    """Load and validate a JSONL transcript.

    Args:
        path: The file.

    Returns:
        The transcript.

    Raises:
        TranscriptError: If the file cannot be read or a line is invalid.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise TranscriptError(str(p), None, f"cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise TranscriptError(str(p), None, f"not UTF-8 text ({e.reason})") from None
    items = parse_lines(text.splitlines(), str(p))
    valid, lines, calls = validate_messages(items, str(p))
    preamble, turns, warnings = split_turns(valid, lines, calls)
    return Transcript(p.stem, [_without_timestamp(m) for m in valid], preamble, turns, warnings)


def load_probes(path: str | Path) -> list[str]:
    """Read probes, one per line; blank lines and lines starting with ``#`` are skipped."""
    probes = []
    for raw in Path(path).read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            probes.append(line)
    return probes


def context_messages(messages: Iterable[dict]) -> list[LLMContextMessage]:
    """A deep copy of recorded messages, typed as Pipecat's context messages.

    Recorded messages are plain dicts in OpenAI's format, which is what Pipecat's typed
    ``LLMContextMessage`` describes; the copy keeps the recording unchanged.
    """
    return cast("list[LLMContextMessage]", copy.deepcopy(list(messages)))

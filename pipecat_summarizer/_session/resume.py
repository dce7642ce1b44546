"""Resuming a dropped call: the pure rules (what is restored, the notice, the pairing repairs).

A call *dropped* when it ended without a goodbye: a ``CancelFrame`` (a transport disconnect
the application answers with ``task.cancel()``), the pipeline's cleanup without an
``EndFrame``, or the application's ``mark_dropped()``. The caller's next call, if it starts
within ``MemoryParams.resume_dropped_within_s`` of the drop, resumes the context the dropped
call had in view: its conversation messages verbatim (archived at its end as
``in_context_at_end``, with ``message_json``), its summary and its pinned facts (rebuilt by the
session the way it builds them, from the call row), and one user-role notice, data and not an
instruction, about the dropped connection, naming the tool calls that were still pending.

Pairing repairs, so that what is sent is valid for every provider: OpenAI answers 400 to an
assistant ``tool_calls`` message not followed by a tool message for each id, and to a tool
message not preceded by its call; Anthropic (``tool_use`` / ``tool_result``) and Gemini
(function call / response) pair the same way. A call whose result never came gets a
synthetic tool result right after it saying the result was lost at the disconnect, rather
than the call message being dropped: dropping it would hide that the call was made (the one
thing that keeps it from being made twice) and any text the message carried. A placeholder
for a call still running (Pipecat's ``IN_PROGRESS``, an async tool's "started" message with
no final result) is settled the same way: nothing will ever update it in the new call. A
tool result whose call is not in view is dropped.

Each message is archived once, by the call it was said in: a resumed call archives nothing it
restored; a restored message still in view at its end gets a row without text pointing at the
row that archived it (``{"restored_from": [call_id, position]}``), which the next resume
follows. The notice is not archived.

Pure rules, plus :func:`read_dropped` (the one store read they need); the recorder calls it,
the session writes the context.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pipecat.processors.aggregators import async_tool_messages

from pipecat_summarizer._compaction.plan import head_length
from pipecat_summarizer._record.interrupted import provider_form
from pipecat_summarizer._record.notices import NOTICE_HEADER
from pipecat_summarizer._text.vocabulary import FACTS, OPEN_QUESTIONS
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord

if TYPE_CHECKING:
    from pipecat_summarizer.store.base import MemoryStore

#: How a dropped call's row says it ended (``ended_by``); ``end`` (an ``EndFrame``) is a goodbye.
DROPPED_ENDS = frozenset({"cancel", "cleanup", "dropped"})
#: ``ended_by`` of a call the application marked dropped (``ContextSummarizer.mark_dropped``).
MARKED_DROPPED = "dropped"
#: The content of a tool result that never came (or whose placeholder was still running).
LOST_RESULT = (
    "RESULT LOST: the connection dropped before this tool call returned a result; "
    "whether it took effect is unknown."
)
#: Pipecat's placeholder for a tool call still running (``LLMAssistantAggregator``).
IN_PROGRESS = "IN_PROGRESS"
#: Roles a restored message may have (a provider-specific object was archived as "unknown").
ROLES = frozenset({"user", "assistant", "tool", "system", "developer"})
#: Newest calls read to find the one before this call (this call's own row among them).
CALLS_READ = 4
#: The key of a reference row's ``message_json``: a restored message still in view at the end
#: of the call that resumed it points at the row that archived it (never archived twice).
RESTORED_FROM = "restored_from"
#: Where a restored message was archived: ``(call_id, position)`` of its row.
Origin = tuple[str, int]
_NAME_CHARS, _ARGS_CHARS = 64, 200


@dataclass(frozen=True)
class PendingCall:
    """A tool call still pending when the call dropped (named in the notice)."""

    tool_call_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Resumed:
    """What a new call resumes of a dropped one.

    Parameters:
        call_id: The dropped session's key in the store.
        messages: Its conversation messages in view at the drop, repaired, then the notice.
        summary: Its summary at the drop, if any.
        facts: Its pinned facts at the drop: ``[{key, text, kind, source}]``.
        pending: Tool calls still pending at the drop.
        gap_s: Seconds from the drop to this call's start.
        skipped: Archived messages that could not be restored (not a message, a
            provider-specific object).
        repairs: Tool results added, settled or dropped so that every call is paired.
        origins: Where each of ``messages`` is archived (``None``: written by this resume,
            a lost result or the notice), so the new call never archives it again.
    """

    call_id: str
    messages: list[dict]
    summary: str | None
    facts: list[dict] = field(default_factory=list)
    pending: tuple[PendingCall, ...] = ()
    gap_s: float = 0.0
    skipped: int = 0
    repairs: int = 0
    origins: tuple[Origin | None, ...] = ()


def previous_call(
    calls: Iterable[CallRecord], *, session_id: str, started_at: float
) -> CallRecord | None:
    """The caller's newest call before this one (``calls`` newest first; this session's own
    row and calls started after it are not "before")."""
    for call in calls:
        if call.call_id != session_id and call.started_at <= started_at:
            return call
    return None


def dropped_within(call: CallRecord | None, *, started_at: float, window_s: float) -> bool:
    """Whether ``call`` ended without a goodbye at most ``window_s`` seconds before
    ``started_at`` (a call still running, or ended by an ``EndFrame``, is not resumed)."""
    return (
        window_s > 0
        and call is not None
        and call.ended_at is not None
        and call.ended_by in DROPPED_ENDS
        and started_at - call.ended_at <= window_s
    )


def reference_json(origin: Origin) -> str:
    """The ``message_json`` of a reference row: a restored message still in view at the end
    of the call that resumed it, archived by the call it was said in (at ``origin``)."""
    return json.dumps({RESTORED_FROM: [origin[0], origin[1]]})


def _reference(text: str) -> Origin | None:
    """The origin a reference row points at, or ``None`` (not a reference)."""
    if not text.startswith('{"' + RESTORED_FROM):  # cheap: every other row is a message
        return None
    try:
        value = json.loads(text).get(RESTORED_FROM)
    except (TypeError, ValueError, AttributeError):
        return None
    if (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], int)
    ):
        return value[0], value[1]
    return None


def referenced_calls(archived: Iterable[ArchivedMessage]) -> set[str]:
    """The calls whose rows ``archived``'s reference rows point at (read them as
    :func:`restore`'s ``origins``)."""
    return {
        origin[0]
        for a in archived
        if a.removed_by == "in_context_at_end" and (origin := _reference(a.message_json))
    }


def restore(
    call: CallRecord,
    archived: Iterable[ArchivedMessage],
    *,
    started_at: float,
    origins: Mapping[Origin, ArchivedMessage] | None = None,
) -> Resumed:
    """What a call started at ``started_at`` resumes of the dropped ``call``, from its
    archived messages (``store.messages(call.call_id)``): those in view at its end, in
    order, repaired (see the module docstring), then the notice.

    Args:
        call: The dropped call's row.
        archived: Its archived messages.
        started_at: When the new call started.
        origins: The rows its reference rows point at (a message it had restored itself,
            archived by the call it was said in), by ``(call_id, position)``.
    """
    at_end = sorted(
        (
            a
            for a in archived  # the caller's own, as the call row says (never another's)
            if a.removed_by == "in_context_at_end" and a.user_id == call.user_id
        ),
        key=lambda a: a.position,
    )
    messages, where, skipped = [], {}, 0
    for a in at_end:
        origin: Origin | None = (a.call_id, a.position)
        row: ArchivedMessage | None = a
        pointed = _reference(a.message_json)
        if pointed is not None:  # restored by that call: read where it was archived
            origin, row = pointed, (origins or {}).get(pointed)
            if row is not None and row.user_id != call.user_id:
                row = None
        message = _message(row.message_json) if row is not None else None
        if message is None:
            skipped += 1
        else:
            messages.append(message)
            where[id(message)] = origin
    repaired, pending, repairs = repair_tool_pairs(messages)
    gap = max(0.0, started_at - (call.ended_at or started_at))
    facts = [dict(f) for f in call.facts if isinstance(f, Mapping)]
    return Resumed(
        call_id=call.call_id,
        messages=[*repaired, notice(gap, pending)],
        summary=call.summary or None,
        facts=facts,
        pending=tuple(pending),
        gap_s=gap,
        skipped=skipped,
        repairs=repairs,
        origins=(*(where.get(id(m)) for m in repaired), None),
    )


async def read_dropped(
    store: MemoryStore, user_id: str, *, session_id: str, started_at: float, window_s: float
) -> Resumed | None:
    """What the session ``session_id`` of ``user_id``, started at ``started_at``, resumes:
    their previous call if it dropped within ``window_s`` (the one read these rules need:
    its row, its messages and the rows its references point at), else ``None``.

    Raises:
        Exception: Whatever the store raises (the caller's memory still joins without it).
    """
    calls = await store.calls(user_id, limit=CALLS_READ)
    last = previous_call(calls, session_id=session_id, started_at=started_at)
    if last is None or not dropped_within(last, started_at=started_at, window_s=window_s):
        return None
    archived = await store.messages(last.call_id)
    origins = {}  # what it had restored itself is archived by the call it came from
    for origin_call in referenced_calls(archived):
        for row in await store.messages(origin_call):
            origins[(row.call_id, row.position)] = row
    return restore(last, archived, started_at=started_at, origins=origins)


def _message(text: str) -> dict | None:
    """An archived message's JSON as a message the provider can take, or ``None``: not a
    dict, an unknown role (a provider-specific object), no content nor tool calls. A notice
    is never archived (the recorder knows it by identity): a row that reads like one is the
    caller's."""
    try:
        message = json.loads(text)
    except (TypeError, ValueError):
        return None
    if not isinstance(message, dict) or message.get("role") not in ROLES:
        return None
    message = provider_form(message)  # the archive's interruption mark is ours, not theirs
    if "content" not in message and not message.get("tool_calls"):
        return None
    return message


def _calls(message: dict) -> list[tuple[str, str, str]]:
    """``(id, name, arguments)`` of an assistant message's tool calls that carry an id."""
    if message.get("role") != "assistant" or not isinstance(message.get("tool_calls"), list):
        return []
    out = []
    for call in message["tool_calls"]:
        if not isinstance(call, dict) or not isinstance(call.get("id"), str):
            continue
        function = call.get("function")
        if not isinstance(function, dict):
            function = {}
        name, arguments = function.get("name", "?"), function.get("arguments", "")
        out.append((call["id"], str(name), arguments if isinstance(arguments, str) else ""))
    return out


def _async_payload(message: dict) -> Any:
    """Pipecat's async-tool payload of ``message`` (a started, intermediate or final
    message), or ``None``."""
    parsed: Any = async_tool_messages.parse_message(message)  # type: ignore[arg-type]
    return parsed


def _finished_async(messages: Sequence[dict]) -> set[str]:
    """Ids of async tool calls settled by a final (or cancelled) developer message."""
    done = set()
    for m in messages:
        payload = _async_payload(m) if m.get("role") == "developer" else None
        if payload is not None and payload.kind == "final":
            done.add(payload.tool_call_id)
    return done


def _still_running(result: dict, call_id: str, finished: set[str]) -> bool:
    """A tool result that is only a placeholder of a call still running at the drop."""
    if result.get("content") == IN_PROGRESS:
        return True
    payload = _async_payload(result)
    return payload is not None and payload.kind == "started" and call_id not in finished


def repair_tool_pairs(messages: Sequence[dict]) -> tuple[list[dict], list[PendingCall], int]:
    """Every tool call followed by its one result, every result after its call.

    Returns:
        The messages (those unchanged are the same dicts), the calls that were pending at
        the drop (no result, or a placeholder still running: each given :data:`LOST_RESULT`),
        and how many results were added, settled, moved or dropped.
    """
    results: dict[str, list[int]] = {}
    for i, m in enumerate(messages):
        if m.get("role") == "tool" and isinstance(m.get("tool_call_id"), str):
            results.setdefault(m["tool_call_id"], []).append(i)
    finished = _finished_async(messages)
    out: list[dict] = []
    pending: list[PendingCall] = []
    used: set[int] = set()
    repairs = 0
    for i, m in enumerate(messages):
        if m.get("role") == "tool":
            if i not in used:  # its call is not in view (or it answers one twice)
                repairs += 1
            continue
        out.append(m)
        for call_id, name, arguments in _calls(m):
            after = [j for j in results.get(call_id, ()) if j > i and j not in used]
            result: dict | None = messages[after[0]] if after else None
            if after:
                j = after[0]
                used.add(j)
                if any(messages[k].get("role") != "tool" for k in range(i + 1, j)):
                    repairs += 1  # moved next to its call
            if result is None or _still_running(result, call_id, finished):
                pending.append(PendingCall(call_id, _short(name, _NAME_CHARS), arguments))
                result = {"role": "tool", "tool_call_id": call_id, "content": LOST_RESULT}
                repairs += 1
            out.append(result)
    return out, pending, repairs


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _duration(seconds: float) -> str:
    """``"1 second"``, ``"42 seconds"``, ``"5 minutes"`` (never "0 seconds")."""
    if seconds >= 120:
        return f"{round(seconds / 60)} minutes"
    n = max(1, round(seconds))
    return f"{n} second{'s' if n != 1 else ''}"


def notice(gap_s: float, pending: Sequence[PendingCall]) -> dict:
    """The user-role notice that closes the restored conversation: what happened to the
    connection, and the tool calls still pending then (so none is called twice unknowingly).

    It is the application's text, in a user-role message as the summary message is (never
    system/developer: it quotes the pending calls' arguments, which come from the
    conversation), and written as the summary is, a record under its headings: a summarizer
    reads it as the application's record, never as the caller's words. What a later summary
    keeps of it: the connection dropped, and each lost result as an open question.

    Args:
        gap_s: Seconds from the drop to the new call's start.
        pending: The tool calls pending at the drop.
    """
    lines = [
        NOTICE_HEADER,
        f"The caller's previous connection dropped about {_duration(gap_s)} before this "
        "one; the conversation above is restored from it. "
        + (
            "Some tool calls were pending."
            if pending
            else "No tool call was pending when it dropped."
        ),
        f"{FACTS}:",
        "- The call's connection dropped and the caller reconnected.",
        f"{OPEN_QUESTIONS}:",
    ]
    lines += [
        f"- Tool {p.name}({_short(p.arguments, _ARGS_CHARS)}) [call id {p.tool_call_id}] was "
        "pending when the connection dropped: its result was lost; whether it took effect "
        "is unknown."
        for p in pending
    ] or ["- none"]
    return {"role": "user", "content": "\n".join(lines)}


def place_restored(messages: Sequence[Any], restored: Sequence[dict], own: Iterable[Any]) -> list:
    """``messages`` with ``restored`` after the head and this session's own head messages
    (``own``: the noted facts, the summary) and before this call's conversation, which is
    newer."""
    mine = [m for m in own if m is not None]
    at = head_length(messages)
    while at < len(messages) and any(messages[at] is m for m in mine):
        at += 1
    return [*messages[:at], *restored, *messages[at:]]


__all__ = [
    "DROPPED_ENDS",
    "LOST_RESULT",
    "MARKED_DROPPED",
    "NOTICE_HEADER",
    "RESTORED_FROM",
    "Origin",
    "PendingCall",
    "Resumed",
    "dropped_within",
    "notice",
    "place_restored",
    "previous_call",
    "read_dropped",
    "reference_json",
    "referenced_calls",
    "repair_tool_pairs",
    "restore",
]

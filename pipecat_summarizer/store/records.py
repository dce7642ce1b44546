"""What the store keeps: one dataclass per record kind, and the pure rules that make them.

Records are plain values built on the event loop in O(1)-ish work (a message's text is
already in memory) and written later, in batches, by :class:`~pipecat_summarizer.store.
writer.StoreWriter`. Every record carries a natural key, so a batch written twice (a retry
after a connection dropped mid-commit) leaves one copy.
"""

from __future__ import annotations

import hashlib
import json
import reprlib
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pipecat_summarizer._text.messages import ArchivedText

# the one reader of a message's text; the recorder and the tests read it here
from pipecat_summarizer._text.messages import message_text as message_text

#: How a message left the context.
Removal = Literal["summarized", "evicted", "replaced", "in_context_at_end", "cleared"]
#: What happened to a pinned fact.
FactAction = Literal["pinned", "corrected", "unpinned", "restored"]
#: Who changed it: the application, the conversation (summaries, evicted messages, earlier
#: calls), or the main LLM's tool (``remember_fact``).
FactActor = Literal["app", "conversation", "tool"]

_ACTOR = {"app": "app", "llm": "tool", "summary": "conversation", "evicted": "conversation"}


#: The longest ``call_id`` / ``user_id`` the store takes (PostgreSQL indexes them in B-trees,
#: whose entries must stay well under a page).
MAX_ID_CHARS = 512


def check_id(name: str, value: object) -> None:
    """Refuse an id the store cannot keep, naming the field.

    Raises:
        TypeError: If ``value`` is not a string.
        ValueError: If it is empty or blank, longer than ``MAX_ID_CHARS``, or holds a NUL
            or a lone surrogate (neither can be stored by PostgreSQL).
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{name} must be a non-empty string or None")
    if len(value) > MAX_ID_CHARS:
        raise ValueError(f"{name} is {len(value)} characters long; the most is {MAX_ID_CHARS}")
    if "\x00" in value:
        raise ValueError(f"{name} must not contain a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} must not contain a lone surrogate (invalid Unicode)") from None


def sha256_hex(text: str) -> str:
    """The full sha256 hex digest of ``text`` (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def tool_call_ids(message: Any) -> list[str]:
    """The tool-call ids a message carries (an assistant's calls, or a tool result's id)."""
    if not isinstance(message, Mapping):
        return []
    ids = [c.get("id") for c in message.get("tool_calls") or () if isinstance(c, Mapping)]
    if message.get("tool_call_id"):
        ids.append(message["tool_call_id"])
    return [str(i) for i in ids if i]


def message_json(message: Any) -> str:
    """The message verbatim as JSON (non-JSON values as their ``str``)."""
    if not isinstance(message, Mapping):  # a provider-specific message object
        message = {"role": "unknown", "content": str(message)}
    try:
        return json.dumps(message, ensure_ascii=False, default=str)
    except (RecursionError, ValueError):  # nested too deep, or a circular reference
        # still archived, as text: a message that cannot be encoded must not cost the call
        short = reprlib.Repr()
        short.maxlevel, short.maxstring, short.maxlist, short.maxdict = 12, 4000, 200, 200
        text = short.repr(dict(message))
        return json.dumps({"role": str(message.get("role", "unknown")), "text": text})


@dataclass(frozen=True)
class ArchivedMessage:
    """A message that left the context, verbatim.

    Parameters:
        call_id: The call's key in the store (a recorder's session key: unique per session).
        position: Its place in the call's archive (0-based), which is its order in the
            conversation: the oldest messages always leave first.
        role: ``user``, ``assistant``, ``tool``, ``system``...
        content: Its text (content, text parts, tool calls), for reading and search.
        message_json: The message exactly as it was in the context, as JSON.
        tool_call_ids: Tool-call ids it carries.
        removed_by: ``summarized``, ``evicted`` (to the pending queue, under the ceiling) or
            ``replaced`` (the application replaced the context while it was pending), or
            ``in_context_at_end`` (still in the context when the call ended), or
            ``cleared`` (a tool result whose content was cleared: its placeholder stays).
        compaction: The compaction that summarized it (``None`` while pending/replaced).
        turn: The user turn at which it left.
        at: When it left (seconds since the epoch).
        user_id: The caller, if known.
        evicted_turn: The turn at which the ceiling evicted it, if it went through the
            pending queue (kept when it is summarized or replaced later).
    """

    kind = "message"
    call_id: str
    position: int
    role: str
    content: str
    message_json: str
    tool_call_ids: tuple[str, ...] = ()
    removed_by: Removal = "summarized"
    compaction: int | None = None
    turn: int = 0
    at: float = field(default_factory=time.time)
    user_id: str | None = None
    evicted_turn: int | None = None


@dataclass(frozen=True)
class CompactionRecord:
    """One summary attempt, applied or failed.

    Parameters:
        call_id: The call.
        attempt: 1 for the call's first attempt, then 2, 3...
        compaction: The applied compaction's number (``None`` if it failed); archived
            messages name it.
        ok: Whether it was applied.
        reason: ``tokens``, ``messages``, ``manual`` or ``backlog``.
        turn: The user turn at which it ended.
        messages_before / messages_after / tokens_before / tokens_after: Context figures
            around the splice (0 for a failure).
        messages_summarized: Messages folded in.
        summary: The summary text (empty for a failure).
        summary_sha256: Full sha256 of the summary text.
        latency_s: Seconds from request to splice (or to the failure).
        model: The summarizer's model, if it names one.
        error: What went wrong (a failure only; no conversation text).
        at: When (seconds since the epoch).
        user_id: The caller, if known.
    """

    kind = "compaction"
    call_id: str
    attempt: int
    compaction: int | None
    ok: bool
    reason: str
    turn: int = 0
    messages_before: int = 0
    messages_after: int = 0
    messages_summarized: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    summary: str = ""
    summary_sha256: str = ""
    latency_s: float = 0.0
    model: str | None = None
    error: str | None = None
    at: float = field(default_factory=time.time)
    user_id: str | None = None


@dataclass(frozen=True)
class FactEvent:
    """One change of a pinned fact.

    Parameters:
        call_id: The call.
        seq: 1, 2, 3... within the call.
        key: The fact's key.
        action: ``pinned``, ``corrected``, ``unpinned`` or ``restored`` (from an earlier call).
        text: The fact's text after the change (before it, for ``unpinned``).
        fact_kind: ``fact`` or ``constraint``.
        source: The pinned store's source: ``app``, ``summary``, ``evicted``, ``llm``.
        actor: Who: ``app``, ``conversation`` or ``tool``.
        turn: The user turn.
        at: When.
        user_id: The caller, if known.
    """

    kind = "fact"
    call_id: str
    seq: int
    key: str
    action: FactAction
    text: str
    fact_kind: str = "fact"
    source: str = "app"
    actor: FactActor = "app"
    turn: int = 0
    at: float = field(default_factory=time.time)
    user_id: str | None = None


@dataclass(frozen=True)
class CallRecord:
    """A call's row: written at start and again at its end with the final state.

    Parameters:
        call_id: The call's key in the store (a recorder's session key: unique per session).
        user_id: The caller, if known.
        started_at: When the processor started.
        ended_at: When it ended (``None`` while running).
        ended_by: ``end`` or ``cancel``.
        summary: The summary in the context at the end.
        facts: The pinned facts at the end: ``[{key, text, kind, source}]``.
        messages_in_context: Messages in the context at the end.
        messages_archived: Messages archived during the call.
        compactions: Applied compactions.
        turns: User turns.
        resumed: Whether it started with an earlier call's summary (its own summaries then
            cover the earlier calls too).
        label: The application's call id (``None``: the same as ``call_id``). A
            :class:`~pipecat_summarizer._session.recorder.CallRecorder` records each session
            under its own key (``call_id``, unique) and the application's id here, so a
            reused id (a room name, a reconnect) never merges two sessions.
    """

    kind = "call"
    call_id: str
    user_id: str | None = None
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    ended_by: str | None = None
    summary: str | None = None
    facts: tuple[Mapping[str, str], ...] = ()
    messages_in_context: int = 0
    messages_archived: int = 0
    compactions: int = 0
    turns: int = 0
    resumed: bool = False
    label: str | None = None


Record = ArchivedMessage | CompactionRecord | FactEvent | CallRecord


@dataclass(frozen=True)
class SearchHit(ArchivedText):
    """One archived message that matched a search, best first.

    Parameters:
        call_id / position / turn / at / role / content: The message (the fields of
            every archived message read, declared once in ``ArchivedText``).
        removed_by: How it left the context.
        score: Relevance, higher is better (BM25 negated on SQLite, ``ts_rank`` on PostgreSQL).
        user_id: The caller.
    """

    removed_by: str
    score: float
    user_id: str | None = None


@dataclass(frozen=True)
class CallerMemory:
    """What a returning caller's new call starts with.

    Parameters:
        user_id: The caller.
        facts: Their pinned facts as of their latest call: ``[{key, text, kind, source}]``.
        summaries: Final summaries of their earlier calls, newest first:
            ``(ended_at, text, resumed)``.
        calls: How many earlier calls were found.
    """

    user_id: str
    facts: list[dict[str, str]] = field(default_factory=list)
    summaries: list[tuple[float, str, bool]] = field(default_factory=list)
    calls: int = 0


def user_hash(user_id: str) -> str:
    """The forget tombstone's key for a caller: a hash, so the tombstone keeps no id."""
    return hashlib.sha256(("forgotten:" + user_id).encode("utf-8", "surrogatepass")).hexdigest()


def not_forgotten(
    records: Iterable[Any],
    tombstones: Mapping[str, float],
    started_at: Mapping[str, float],
) -> list[Any]:
    """The records a forget does not refuse: those of callers without a tombstone, and those
    of sessions that started after their caller's tombstone (a new call after the forget).

    Args:
        records: A batch.
        tombstones: ``{user_id: when forgotten}`` of the batch's forgotten callers.
        started_at: ``{session key: start}`` of the sessions the database still holds (a
            forget deleted the others' call rows); a call row in the batch counts too.
    """
    records = list(records)
    if not tombstones:
        return records
    starts = dict(started_at)
    for r in records:
        if isinstance(r, CallRecord):
            starts.setdefault(r.call_id, r.started_at)
    kept = []
    for r in records:
        forgotten = tombstones.get(r.user_id) if r.user_id is not None else None
        if forgotten is None:
            kept.append(r)
            continue
        start = r.started_at if isinstance(r, CallRecord) else starts.get(r.call_id)
        if start is not None and start > forgotten:
            kept.append(r)
    return kept


def record_key(record: Any) -> str:
    """A record's kind and key, for log lines (never its text)."""
    call = repr(str(getattr(record, "call_id", "?"))[:64])
    if isinstance(record, ArchivedMessage):
        return f"message (call {call}, position {record.position})"
    if isinstance(record, CompactionRecord):
        return f"compaction record (call {call}, attempt {record.attempt})"
    if isinstance(record, FactEvent):
        return f"fact event (call {call}, seq {record.seq})"
    if isinstance(record, CallRecord):
        return f"call row (call {call})"
    return f"record of type {type(record).__name__}"


def to_dict(record: Any) -> dict[str, Any]:
    """A record as a JSON-ready dict (for ``inspect --json``)."""
    data = asdict(record)
    if isinstance(data.get("facts"), tuple):
        data["facts"] = list(data["facts"])
    return data


# -- pure rules --------------------------------------------------------------------------


def fact_snapshot(facts: Iterable[Any]) -> dict[str, tuple[str, str, str]]:
    """``{key: (text, kind, source)}`` of pinned facts (anything with those attributes)."""
    return {f.key: (f.text, f.kind, f.source) for f in facts}


def fact_changes(
    before: Mapping[str, tuple[str, str, str]],
    after: Mapping[str, tuple[str, str, str]],
    *,
    restoring: bool = False,
) -> list[tuple[str, FactAction, str, str, str, FactActor]]:
    """The fact events between two snapshots: ``(key, action, text, kind, source, actor)``.

    A new key is ``pinned`` (``restored`` while a returning caller's memory is loaded), a
    key whose text or kind changed is ``corrected``, a key that is gone is ``unpinned``
    (by whoever had pinned it). Keys in sorted order, so the result is deterministic.
    """
    out: list[tuple[str, FactAction, str, str, str, FactActor]] = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if new is None:
            text, kind, source = old  # type: ignore[misc]
            out.append((key, "unpinned", text, kind, source, _actor(source)))
            continue
        text, kind, source = new
        if old is None:
            action: FactAction = "restored" if restoring else "pinned"
        elif old[:2] == new[:2]:
            continue  # only the source changed (a summary confirmed an evicted fact)
        else:
            action = "corrected"
        out.append((key, action, text, kind, source, _actor(source)))
    return out


def _actor(source: str) -> FactActor:
    return _ACTOR.get(source, "conversation")  # type: ignore[return-value]


def earlier_calls_text(
    summaries: Iterable[tuple[float, str, bool]], budget_tokens: int, *, chars_per_token: int = 4
) -> str | None:
    """One bounded "earlier calls" text from final summaries ``(ended_at, text, resumed)``,
    newest first.

    Each call's summary is headed with its date; summaries are taken newest first while
    they fit ``budget_tokens`` (estimated at ``chars_per_token``), and the first one is cut
    at a line boundary if it alone is too long. A call that itself resumed already rolled
    the earlier ones into its summary, so older calls stop there. ``None`` if there is
    nothing to say.
    """
    budget = max(0, budget_tokens) * chars_per_token
    parts: list[str] = []
    used = 0
    for ended_at, text, resumed in summaries:
        text = (text or "").strip()
        if not text:
            continue
        day = time.strftime("%Y-%m-%d", time.gmtime(ended_at)) if ended_at else "earlier"
        block = f"Call of {day}:\n{text}"
        if used + len(block) > budget:
            if parts:
                break
            block = _cut(block, budget)
            if not block:
                break
        parts.append(block)
        used += len(block) + 2
        if resumed:
            break
    return "\n\n".join(parts) or None


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    lines, out, n = text.splitlines(), [], 0
    for line in lines:
        if n + len(line) + 1 > limit:
            break
        out.append(line)
        n += len(line) + 1
    if len(out) <= 1:  # no whole content line fits: cut at a word
        return text[:limit].rsplit(" ", 1)[0].rstrip() if limit > 20 else ""
    return "\n".join(out)

"""Row codecs shared by the SQL backends: records to insert parameters, and rows back.

The column lists name each table's ``SELECT`` order; the ``*_row`` functions give each
table's insert parameters in table order. SQLite and PostgreSQL use the same tables.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from pipecat_summarizer.store.records import (
    ArchivedMessage,
    CallRecord,
    CompactionRecord,
    FactEvent,
)

# a NUL (PostgreSQL text cannot hold one) or a lone surrogate (not UTF-8: a browser client
# that cut an emoji in two)
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(text: str | None) -> str | None:
    """``text`` as every database can store it: NUL removed, lone surrogates replaced by
    U+FFFD. One C-speed scan when there is nothing to change."""
    if text is None or _UNSTORABLE.search(text) is None:
        return text
    return _UNSTORABLE.sub(lambda m: "" if m.group() == "\x00" else "\ufffd", text)


MESSAGE_COLS = (
    "call_id, position, role, content, message_json, tool_call_ids, removed_by, "
    "compaction, turn, at, user_id, evicted_turn"
)
CALL_COLS = (
    "call_id, user_id, started_at, ended_at, ended_by, summary, facts, "
    "messages_in_context, messages_archived, compactions, turns, resumed, label"
)
COMPACTION_COLS = (
    "call_id, attempt, compaction, ok, reason, turn, messages_before, messages_after, "
    "messages_summarized, tokens_before, tokens_after, summary, summary_sha256, latency_s, "
    "model, error, at, user_id"
)
FACT_COLS = "call_id, seq, key, action, text, fact_kind, source, actor, turn, at, user_id"


def message_row(r: ArchivedMessage) -> tuple:
    """An archived message as the ``messages`` insert's parameters ."""
    return (
        r.call_id,
        r.user_id,
        r.position,
        r.turn,
        r.at,
        storable(r.role),
        storable(r.content),
        storable(r.message_json),
        storable(json.dumps(list(r.tool_call_ids), ensure_ascii=False)),
        storable(r.removed_by),
        r.compaction,
        r.evicted_turn
        if r.evicted_turn is not None
        else r.turn
        if r.removed_by == "evicted"
        else None,
    )


def compaction_row(r: CompactionRecord) -> tuple:
    """A compaction as the ``compactions`` insert's parameters, in table order."""
    return (
        r.call_id,
        r.attempt,
        r.compaction,
        r.ok,
        storable(r.reason),
        r.turn,
        r.at,
        r.messages_before,
        r.messages_after,
        r.messages_summarized,
        r.tokens_before,
        r.tokens_after,
        storable(r.summary),
        r.summary_sha256,
        r.latency_s,
        storable(r.model),
        storable(r.error),
        r.user_id,
    )


def fact_row(r: FactEvent) -> tuple:
    """A fact event as the ``facts`` insert's parameters, in table order."""
    return (
        r.call_id,
        r.seq,
        r.user_id,
        storable(r.key),
        r.action,
        storable(r.text),
        storable(r.fact_kind),
        storable(r.source),
        r.actor,
        r.turn,
        r.at,
    )


def caller_fact_row(r: FactEvent) -> tuple:
    """A fact event as the ``caller_facts`` upsert's parameters (the caller's current
    state of that key), in table order."""
    return (
        r.user_id,
        storable(r.key),
        r.action,
        storable(r.text),
        storable(r.fact_kind),
        storable(r.source),
        r.at,
        r.call_id,
        r.seq,
    )


def call_row(r: CallRecord) -> tuple:
    """A call's final state as the ``calls`` insert's parameters, in table order."""
    return (
        r.call_id,
        r.user_id,
        r.started_at,
        r.ended_at,
        storable(r.ended_by),
        storable(r.summary),
        storable(json.dumps([dict(f) for f in r.facts], ensure_ascii=False, default=str)),
        r.messages_in_context,
        r.messages_archived,
        r.compactions,
        r.turns,
        r.resumed,
        call_label(r),
    )


def call_label(r: CallRecord) -> str:
    """The application's id of a call (its key when it has none)."""
    return r.label if r.label is not None else r.call_id


def to_message(row: Sequence) -> ArchivedMessage:
    """A ``MESSAGE_COLS`` row as a record."""
    return ArchivedMessage(
        call_id=row[0],
        position=row[1],
        role=row[2],
        content=row[3],
        message_json=row[4],
        tool_call_ids=tuple(json.loads(row[5] or "[]")),
        removed_by=row[6],
        compaction=row[7],
        turn=row[8],
        at=row[9],
        user_id=row[10],
        evicted_turn=row[11],
    )


def to_call(row: Sequence) -> CallRecord:
    """A ``CALL_COLS`` row as a record."""
    facts = row[6]
    facts = json.loads(facts) if isinstance(facts, str) else (facts or [])
    return CallRecord(
        call_id=row[0],
        user_id=row[1],
        started_at=row[2],
        ended_at=row[3],
        ended_by=row[4],
        summary=row[5],
        facts=tuple(facts),
        messages_in_context=row[7],
        messages_archived=row[8],
        compactions=row[9],
        turns=row[10],
        resumed=bool(row[11]),
        label=row[12] if row[12] != row[0] else None,
    )


def to_compaction(row: Sequence) -> CompactionRecord:
    """A ``COMPACTION_COLS`` row as a record."""
    values = list(row)
    values[3] = bool(values[3])
    return CompactionRecord(*values)


def to_fact(row: Sequence) -> FactEvent:
    """A ``FACT_COLS`` row as a record."""
    return FactEvent(*row)


#: How many of a search's first hits bring the message said just before them (a search with
#: recall's ``_replies`` reads them with the replies; recall quotes it before the assistant's
#: hits, see ``gather.with_befores``): an answer is often the message before the one that
#: repeats the question's words ("Paris?! That is great!"). On LoCoMo (1 s budget, not
#: spoken) answer recall at question time / across calls went 85.5% -> 85.8% / 86.6% ->
#: 86.9% (conversations 30 + 26) and 79.26% -> 79.34% / 79.20% -> 79.38% (held out, 49 + 42)
#: at 0.0-0.2 more points of the full buffer's input.
BEFORE_HITS = 3

#: The message said just before a hit: role, content, turn and time.
Before = tuple[str, str, int, float]


def said_before(hit: Any, message: Any) -> Before | None:
    """``message`` (read at ``hit``'s call key, the position before) as ``hit``'s before,
    when it is the same caller's (as the stores' statements: ``user_id`` equal, both
    ``None`` included); ``None`` otherwise."""
    if message is None or getattr(message, "user_id", None) != getattr(hit, "user_id", None):
        return None
    return (str(message.role), str(message.content), int(message.turn), float(message.at))


class Hits(list):
    """A search's hits, and the messages around the first of them: ``replies``,
    ``{(call_id, position): (role, content)}`` of the message that followed a hit (either
    backend's ``search`` with recall's ``_replies``), and ``befores``, ``{(call_id,
    position): (role, content, turn, at) or None}`` of the message said just before each
    of the first ``BEFORE_HITS`` hits (``None``: read, and there is none of the caller's)."""

    def __init__(
        self,
        hits: Iterable[Any] = (),
        replies: dict[tuple[str, int], tuple[str, str]] | None = None,
        befores: dict[tuple[str, int], Before | None] | None = None,
    ):
        """The hits, and their replies and befores (none by default)."""
        super().__init__(hits)
        self.replies = {} if replies is None else replies
        self.befores = {} if befores is None else befores

"""What the SQL backends do the same way, written once: which statement a record takes,
the deletes of a purge and of a forget, and a returning caller's memory from its rows.

Parameters are numbered (``?1`` on SQLite, ``$1`` on PostgreSQL): ``mark`` is the prefix.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence

from pipecat_summarizer.store._rows import (
    call_label,
    call_row,
    caller_fact_row,
    compaction_row,
    fact_row,
    message_row,
)
from pipecat_summarizer.store.records import (
    ArchivedMessage,
    CallerMemory,
    CallRecord,
    CompactionRecord,
    FactEvent,
    Record,
)

#: The tables whose rows are a caller's, by their own ``user_id`` or by their call's.
CALL_TABLES = ("messages", "compactions", "facts")


def statement_rows(records: Iterable[Record]) -> Iterator[tuple[str, Record, tuple]]:
    """Each record's statements in record order, as ``(statement, record, parameters)``:
    ``message``, ``compaction``, ``fact`` (and ``caller_fact`` when the fact has a caller),
    ``start`` (a call's first row) or ``end`` (its final state).

    Raises:
        TypeError: A record of no store kind.
    """
    for r in records:
        if isinstance(r, ArchivedMessage):
            yield "message", r, message_row(r)
        elif isinstance(r, CompactionRecord):
            yield "compaction", r, compaction_row(r)
        elif isinstance(r, FactEvent):
            yield "fact", r, fact_row(r)
            if r.user_id is not None:
                yield "caller_fact", r, caller_fact_row(r)
        elif isinstance(r, CallRecord):
            if r.ended_at is None:
                yield "start", r, (r.call_id, r.user_id, r.started_at, r.resumed, call_label(r))
            else:
                yield "end", r, call_row(r)
        else:
            raise TypeError(f"not a store record: {type(r).__name__}")


def check_purge_days(days: float) -> None:
    """Refuse a purge age that is not a non-negative number."""
    if isinstance(days, bool) or not days >= 0:
        raise ValueError("days must be a non-negative number")


def purge_cutoff(days: float) -> float:
    """The wall-clock time before which a purge deletes."""
    return time.time() - days * 86400


def purge_statements(mark: str) -> list[tuple[str, bool]]:
    """A purge's deletes (parameter 1: the cutoff), each with whether its rows count in
    the number deleted (a caller's current facts are a copy of their fact history).

    Rows go by their ``at`` (the conversation's date), a call's row by when it was recorded
    (its end, else its start), and also a call whose messages all go now: an imported
    transcript dated far back (``MemoryParams(conversation_started_at=...)``) recorded today
    would otherwise keep its call row without a message. So the calls go before the
    messages they are judged by."""
    old_call = (
        f"COALESCE(ended_at, started_at) < {mark}1 OR (call_id IN (SELECT call_id FROM "
        f"messages WHERE at < {mark}1) AND NOT EXISTS (SELECT 1 FROM messages m WHERE "
        f"m.call_id = calls.call_id AND m.at >= {mark}1))"
    )
    return [
        *(
            (f"DELETE FROM {table} WHERE at < {mark}1", True)
            for table in CALL_TABLES
            if table != "messages"
        ),
        (f"DELETE FROM calls WHERE {old_call}", True),
        (f"DELETE FROM messages WHERE at < {mark}1", True),
        (f"DELETE FROM caller_facts WHERE at < {mark}1", False),
    ]


def forget_statements(mark: str, lock_calls: bool = False) -> list[tuple[str, bool]]:
    """A forget's deletes (parameters: 1 the caller, 2 the forget's time), each with whether
    its rows count in the number deleted. The caller's sessions that started after the
    forget's time keep their rows (a new call, written before the deletes: the tombstone
    lets such a session write, so a forget must not delete what it wrote before).

    The tables go in a purge's order (compactions, facts, calls, messages, caller_facts):
    on PostgreSQL a forget and a purge at once, each holding rows the other wants next,
    deadlocked (S13-A-2). The forget's deletes of the call tables read the caller's calls,
    so with ``lock_calls`` (PostgreSQL: ``FOR UPDATE``) the calls are locked where a purge
    deletes them, and deleted after the messages."""
    later = f"SELECT call_id FROM calls WHERE user_id = {mark}1 AND started_at > {mark}2"
    mine = f"calls WHERE user_id = {mark}1 AND started_at <= {mark}2"

    def call_table(table: str) -> tuple[str, bool]:
        return (
            f"DELETE FROM {table} WHERE (user_id = {mark}1 OR call_id IN "
            f"(SELECT call_id FROM calls WHERE user_id = {mark}1)) "
            f"AND call_id NOT IN ({later})",
            True,
        )

    return [
        *(call_table(table) for table in CALL_TABLES if table != "messages"),
        *([(f"SELECT 1 FROM {mine} ORDER BY call_id FOR UPDATE", False)] if lock_calls else []),
        call_table("messages"),
        (f"DELETE FROM {mine}", True),
        (f"DELETE FROM caller_facts WHERE user_id = {mark}1 AND call_id NOT IN ({later})", False),
    ]


def tombstone_statement(mark: str) -> str:
    """The forget's tombstone (parameters: the caller's hash, the time)."""
    return (
        f"INSERT INTO forgotten VALUES ({mark}1, {mark}2) ON CONFLICT(user_hash) "
        "DO UPDATE SET at = excluded.at"
    )


def caller_summaries_sql(mark: str) -> str:
    """The caller's latest calls (parameters: the caller, how many), newest first: when,
    the summary (the call's final one, else its latest successful compaction's), resumed."""
    return (
        "SELECT COALESCE(ended_at, started_at), COALESCE(summary, (SELECT c.summary FROM"
        " compactions c WHERE c.call_id = calls.call_id AND c.ok"
        f" ORDER BY attempt DESC LIMIT 1)), resumed FROM calls WHERE user_id = {mark}1"
        f" ORDER BY started_at DESC LIMIT {mark}2"
    )


def caller_memory_of(
    user_id: str,
    facts: Iterable[Sequence],
    calls: Sequence[Sequence],
) -> CallerMemory:
    """A caller's memory from their current facts' rows (key, action, text, kind, source;
    oldest first) and their latest calls' rows (see :func:`caller_summaries_sql`)."""
    pinned = [
        {"key": key, "text": text, "kind": kind, "source": source}
        for key, action, text, kind, source in facts
        if action != "unpinned"
    ]
    summaries = [(at, text, bool(resumed)) for at, text, resumed in calls if text]
    return CallerMemory(user_id, pinned, summaries, len(calls))

"""The SQLite store's writes: a batch of records in one transaction, a purge (a forget:
``_sqlite_forget``).

Each runs on the store's thread with its connection, inside ``BEGIN IMMEDIATE`` (the
database's write lock, across processes).
"""

from __future__ import annotations

import sqlite3

from loguru import logger

from pipecat_summarizer.store import _sqlite_schema as schema
from pipecat_summarizer.store._statements import purge_cutoff, purge_statements, statement_rows
from pipecat_summarizer.store.records import ArchivedMessage, Record, not_forgotten, user_hash

_INSERT_MESSAGE = """INSERT INTO messages(call_id, user_id, position, turn, at, role, content,
    message_json, tool_call_ids, removed_by, compaction, evicted_turn, scope)
    VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)
    ON CONFLICT(call_id, position) DO UPDATE SET removed_by=excluded.removed_by,
    compaction=COALESCE(excluded.compaction, messages.compaction)"""
_INSERT_COMPACTION = """INSERT OR REPLACE INTO compactions VALUES
    (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"""
_INSERT_FACT = "INSERT OR REPLACE INTO facts VALUES (?,?,?,?,?,?,?,?,?,?,?)"
_CALLER_FACT = """INSERT INTO caller_facts VALUES (?,?,?,?,?,?,?,?,?)
    ON CONFLICT(user_id, key) DO UPDATE SET action=excluded.action, text=excluded.text,
    fact_kind=excluded.fact_kind, source=excluded.source, at=excluded.at,
    call_id=excluded.call_id, seq=excluded.seq
    WHERE excluded.at > caller_facts.at
    OR (excluded.at = caller_facts.at AND excluded.seq >= caller_facts.seq)"""
_START_CALL = """INSERT INTO calls(call_id, user_id, started_at, resumed, label)
    VALUES (?,?,?,?,?)
    ON CONFLICT(call_id) DO UPDATE SET user_id=COALESCE(excluded.user_id, calls.user_id),
    resumed=MAX(excluded.resumed, calls.resumed)"""
_END_CALL = """INSERT INTO calls(call_id, user_id, started_at, ended_at, ended_by, summary, facts,
    messages_in_context, messages_archived, compactions, turns, resumed, label)
    VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)
    ON CONFLICT(call_id) DO UPDATE SET user_id=COALESCE(excluded.user_id, calls.user_id),
    ended_at=excluded.ended_at, ended_by=excluded.ended_by, summary=excluded.summary,
    facts=excluded.facts, messages_in_context=excluded.messages_in_context,
    messages_archived=excluded.messages_archived, compactions=excluded.compactions,
    turns=excluded.turns, resumed=MAX(excluded.resumed, calls.resumed)"""


_STATEMENTS = {
    "message": _INSERT_MESSAGE,
    "compaction": _INSERT_COMPACTION,
    "fact": _INSERT_FACT,
    "caller_fact": _CALLER_FACT,
    "start": _START_CALL,
    "end": _END_CALL,
}


def write(conn: sqlite3.Connection, records: list[Record]) -> None:
    """Write ``records`` in one transaction, in their order (a forgotten caller's earlier
    sessions' records left out)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        records = after_forget(conn, records)
        for statement, r, row in statement_rows(records):
            if isinstance(r, ArchivedMessage):
                row = (*row, schema.scope_of(r.user_id, r.call_id))
            conn.execute(_STATEMENTS[statement], row)
        conn.execute("COMMIT")
    except BaseException:
        schema.rollback(conn)
        raise


def after_forget(conn: sqlite3.Connection, records: list[Record]) -> list[Record]:
    """The batch without the records of forgotten callers' sessions that started before
    the forget (inside the write transaction: a forget cannot slip in between)."""
    users = {r.user_id for r in records if r.user_id is not None}
    if not users:
        return records
    hashes = {user_hash(u): u for u in users}
    marks = ",".join("?" * len(hashes))
    tombstones = {
        hashes[h]: at
        for h, at in conn.execute(
            f"SELECT user_hash, at FROM forgotten WHERE user_hash IN ({marks})", list(hashes)
        )
    }
    if not tombstones:
        return records
    sessions = list({r.call_id for r in records if r.user_id in tombstones})
    started = dict(
        conn.execute(
            f"SELECT call_id, started_at FROM calls WHERE call_id IN "
            f"({','.join('?' * len(sessions))})",
            sessions,
        ).fetchall()
    )
    kept = not_forgotten(records, tombstones, started)
    if len(kept) < len(records):
        logger.info(
            f"memory store: {len(records) - len(kept)} records of a forgotten caller's "
            "earlier session refused"
        )
    return kept


def purge(conn: sqlite3.Connection, days: float) -> int:
    """Delete records older than ``days`` days in one transaction; the rows deleted."""
    cutoff = purge_cutoff(days)
    conn.execute("BEGIN IMMEDIATE")
    try:
        n = 0
        for sql, counted in purge_statements("?"):
            deleted = conn.execute(sql, (cutoff,)).rowcount
            n += deleted if counted else 0
        conn.execute("COMMIT")
    except BaseException:
        schema.rollback(conn)
        raise
    return n

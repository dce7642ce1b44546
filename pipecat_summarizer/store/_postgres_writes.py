"""The PostgreSQL store's writes: a batch of records in one transaction, a forget, a purge.

Every record is an upsert on its natural key, so workers on many machines can write for
the same caller; a caller's advisory lock keeps a forget and the writes apart.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from loguru import logger

from pipecat_summarizer.store._postgres_schema import FOLD_KEY, FOLD_REMOVALS
from pipecat_summarizer.store._statements import (
    forget_statements,
    purge_cutoff,
    purge_statements,
    statement_rows,
    tombstone_statement,
)
from pipecat_summarizer.store.records import Record, not_forgotten, user_hash

_INSERT_MESSAGE = """INSERT INTO messages(call_id, user_id, position, turn, at, role, content,
    message_json, tool_call_ids, removed_by, compaction, evicted_turn)
    VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)
    ON CONFLICT(call_id, position) DO UPDATE SET removed_by=excluded.removed_by,
    compaction=COALESCE(excluded.compaction, messages.compaction)"""
_INSERT_COMPACTION = """INSERT INTO compactions VALUES
    ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18)
    ON CONFLICT(call_id, attempt) DO NOTHING"""
_INSERT_FACT = """INSERT INTO facts VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)
    ON CONFLICT(call_id, seq) DO NOTHING"""
_CALLER_FACT = """INSERT INTO caller_facts VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)
    ON CONFLICT(user_id, md5(key)) DO UPDATE SET action=excluded.action, text=excluded.text,
    fact_kind=excluded.fact_kind, source=excluded.source, at=excluded.at,
    call_id=excluded.call_id, seq=excluded.seq
    WHERE (excluded.at, excluded.seq) >= (caller_facts.at, caller_facts.seq)"""
_START_CALL = """INSERT INTO calls(call_id, user_id, started_at, resumed, label)
    VALUES ($1,$2,$3,$4,$5)
    ON CONFLICT(call_id) DO UPDATE SET user_id=COALESCE(excluded.user_id, calls.user_id),
    resumed=excluded.resumed OR calls.resumed"""
_END_CALL = """INSERT INTO calls(call_id, user_id, started_at, ended_at, ended_by, summary, facts,
    messages_in_context, messages_archived, compactions, turns, resumed, label)
    VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13)
    ON CONFLICT(call_id) DO UPDATE SET user_id=COALESCE(excluded.user_id, calls.user_id),
    ended_at=excluded.ended_at, ended_by=excluded.ended_by, summary=excluded.summary,
    facts=excluded.facts, messages_in_context=excluded.messages_in_context,
    messages_archived=excluded.messages_archived, compactions=excluded.compactions,
    turns=excluded.turns, resumed=excluded.resumed OR calls.resumed"""


#: The statements of a batch, in the order they run: calls first, their end last;
#: messages before compactions.
_STATEMENTS = {
    "start": _START_CALL,
    "message": _INSERT_MESSAGE,
    "compaction": _INSERT_COMPACTION,
    "fact": _INSERT_FACT,
    "caller_fact": _CALLER_FACT,
    "end": _END_CALL,
}
#: A forget's statements: the caller's calls locked before their messages are deleted.
_FORGET = forget_statements("$", lock_calls=True)


async def write(conn, records: list[Record]) -> None:
    """Write ``records`` in one transaction (a forgotten caller's earlier sessions'
    records left out), each statement's rows in one ``executemany``."""
    async with conn.transaction():
        records = await after_forget(conn, records)
        if not records:
            return
        groups: dict[str, list[tuple]] = {name: [] for name in _STATEMENTS}
        for statement, _, row in statement_rows(records):
            groups[statement].append(row)
        for name, sql in _STATEMENTS.items():
            if groups[name]:
                await conn.executemany(sql, groups[name])


async def after_forget(conn, records: list[Record]) -> list[Record]:
    """The batch without the records of forgotten callers' sessions that started before
    the forget. Each caller's advisory lock is taken shared (writers never wait for each
    other; a forget takes it exclusively), so a forget cannot slip in between."""
    users = sorted({r.user_id for r in records if r.user_id is not None})
    if not users:
        return records
    hashes = {user_hash(u): u for u in users}
    await conn.execute(
        "SELECT pg_advisory_xact_lock_shared(hashtextextended(h, 0)) FROM unnest($1::text[]) h",
        sorted(hashes),
    )
    rows = await conn.fetch(
        "SELECT user_hash, at FROM forgotten WHERE user_hash = ANY($1::text[])", list(hashes)
    )
    if not rows:
        return records
    tombstones = {hashes[r["user_hash"]]: r["at"] for r in rows}
    sessions = list({r.call_id for r in records if r.user_id in tombstones})
    started = {
        r["call_id"]: r["started_at"]
        for r in await conn.fetch(
            "SELECT call_id, started_at FROM calls WHERE call_id = ANY($1::text[])", sessions
        )
    }
    return not_forgotten(records, tombstones, started)


#: How many times a forget or a purge runs when PostgreSQL breaks a deadlock by rolling it
#: back (SQLSTATE 40P01: the transaction is undone whole, so running it again is safe). The
#: two take the tables in one order (see ``forget_statements``); an operator's transaction
#: may still take them in another.
DEADLOCK_TRIES = 5
#: deadlock_detected; serialization_failure (not expected: both run at READ COMMITTED)
_RETRIED = ("40P01", "40001")


async def deadlock_retried(what: str, run: Callable[[], Awaitable[int]]) -> int:
    """``run()`` (one transaction), run again when it was rolled back to break a deadlock
    (or by a serialization failure), up to :data:`DEADLOCK_TRIES` times in all (then its
    error is raised)."""
    for tries in range(DEADLOCK_TRIES - 1, -1, -1):
        try:
            return await run()
        except Exception as e:
            state = getattr(e, "sqlstate", None)
            if state not in _RETRIED or not tries:
                raise
            why = "a deadlock" if state == "40P01" else "a serialization failure"
            logger.warning(f"PostgreSQL {what} rolled back by {why}: run again")
    raise AssertionError("unreachable")  # pragma: no cover


async def forget(conn, user_id: str, at: float) -> int:
    """Delete every record of ``user_id`` but those of their sessions that started after
    ``at`` (as on SQLite: see ``forget_statements``) and leave its tombstone (time ``at``),
    in one transaction (run again if a deadlock rolled it back); then the store runs
    :func:`vacuum_forgotten`."""
    key = user_hash(user_id)

    async def run() -> int:
        n = 0
        async with conn.transaction(isolation="read_committed"):  # see purge
            # exclusive: waits for the writes under way for this caller, holds new ones
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key)
            for sql, counted in _FORGET:
                status = await conn.execute(sql, user_id, at)
                n += int(status.split()[-1]) if counted else 0
            await conn.execute(tombstone_statement("$"), key, at)
        return n

    return await deadlock_retried("forget", run)


#: The longest a forget's fold waits for a lock on ``removals`` (milliseconds): folds never
#: wait for each other (the try-lock), and no other write of the store holds a row of it;
#: only an operator's statement on the table (a ``LOCK``, a ``TRUNCATE``, a ``DELETE`` of its
#: rows) does, and then the fold is left to the next forget or purge.
FOLD_LOCK_TIMEOUT_MS = 200
#: What a fold after a forget may meet and skip quietly (DEBUG): a role refused EXECUTE on
#: the fold function (migration 9 grants it to the roles holding DELETE on ``messages``
#: then: one granted DELETE since is refused), and the lock timeout above.
_FOLD_SKIPPED = ("42501", "55P03")


async def fold_after_forget(conn, user_id: str) -> bool:
    """Fold the removals of ``user_id``'s bucket and ``EVERYONE``'s (``FOLD_BUCKETS``) in a
    short transaction of its own, unless a purge or another forget is folding (the
    try-lock: never waits); run once a forget committed, so the forget's own row is
    folded and a forget rolled back folds nothing. The fold runs in ``removals_fold``
    (schema v9, ``FOLD_FUNCTION``) with the owner's rights: a role that may forget but not
    write ``removals`` folds too (S14-S-2). Never raises but a cancellation: the forget is
    committed whatever happens here (a failure is logged without text, and the next forget
    or purge folds). Returns whether it folded."""
    try:
        async with conn.transaction(isolation="read_committed"):  # see purge
            # the function takes the try-lock (FOLD_KEY), then folds in a statement of its
            # own, whose snapshot is taken with the lock held
            return bool(
                await conn.fetchval(
                    "SELECT removals_fold($1) FROM set_config('lock_timeout', $2, true)",
                    user_id,
                    f"{FOLD_LOCK_TIMEOUT_MS}ms",
                )
            )
    except Exception as e:
        state = getattr(e, "sqlstate", None)
        if state in _FOLD_SKIPPED:
            logger.debug(f"PostgreSQL removals not folded after a forget (SQLSTATE {state})")
        else:
            # the error's type only (no caller, no server text)
            logger.warning(f"PostgreSQL removals' fold after a forget failed ({type(e).__name__})")
        return False


#: The most a forget's VACUUM may take (both statements), seconds: it runs after the
#: forget committed, on the forget's connection; past it the VACUUM is cancelled (a lock it
#: waits for: another session's VACUUM, ANALYZE or index build).
VACUUM_TIMEOUT_S = 60.0


async def vacuum_forgotten(conn, timeout_s: float | None = None) -> None:
    """``VACUUM`` the tables a forget deleted from (outside its transaction: VACUUM cannot
    run in one): deleted rows are dead tuples, holding the words, until a vacuum reclaims
    them; the caller's word index (``message_words``) holds their words too. With
    ``INDEX_CLEANUP ON``: from PostgreSQL 14 a plain VACUUM skips the indexes when few pages
    hold dead rows (one caller among many), leaving the words in the indexes' entries.
    Reclaimed is not erased: the freed bytes stay in the pages until reused or the table
    rewritten (``VACUUM FULL``, ``CLUSTER``, pg_repack).

    Raises:
        TimeoutError: If it takes more than ``timeout_s`` (by default
            :data:`VACUUM_TIMEOUT_S`): asyncpg cancels the statement.
        asyncpg.PostgresError: If a statement fails (a ``lock_timeout`` of the database's).
    """
    deadline = time.monotonic() + (VACUUM_TIMEOUT_S if timeout_s is None else timeout_s)
    for sql in (
        "VACUUM (INDEX_CLEANUP ON) messages, compactions, facts, calls, caller_facts",
        "VACUUM (INDEX_CLEANUP ON) message_words",
    ):
        await conn.execute(sql, timeout=max(0.001, deadline - time.monotonic()))


async def fold_in_purge(conn) -> None:
    """Fold every bucket's removals (``FOLD_REMOVALS``) inside a purge's transaction, in a
    savepoint: a role that may delete records but not write ``removals`` (an erasure job
    granted SELECT and DELETE, as migration 8 copies its rights on ``messages``) is refused
    the fold, and that must not roll the purge back (records kept past their retention):
    the fold is left to the next forget or purge (DEBUG)."""
    try:
        async with conn.transaction():  # a savepoint
            await conn.execute(FOLD_REMOVALS)
    except Exception as e:
        if getattr(e, "sqlstate", None) != "42501":
            raise
        logger.debug("PostgreSQL removals not folded by a purge (SQLSTATE 42501)")


async def purge(conn, days: float) -> int:
    """Delete records older than ``days`` days in one transaction (run again if a deadlock
    rolled it back), and fold the removals (``FOLD_REMOVALS``) unless another purge is
    folding them; the rows deleted."""
    cutoff = purge_cutoff(days)

    async def run() -> int:
        n = 0
        # whatever the database's default isolation: the fold deletes rows another purge
        # may have folded since this one's first statement (S13-B-1: a serialization
        # failure under REPEATABLE READ), and the lock order assumes each statement sees
        # what committed before it
        async with conn.transaction(isolation="read_committed"):
            for sql, counted in purge_statements("$"):
                status = await conn.execute(sql, cutoff)
                n += int(status.split()[-1]) if counted else 0
            if await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", FOLD_KEY):
                await fold_in_purge(conn)
        return n

    return await deadlock_retried("purge", run)

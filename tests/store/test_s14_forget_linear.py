"""PostgreSQL schema v9 (S14-T-1): a delete's word rows are found by their whole key, so a
forget of N messages costs O(N x their words), not O(N x the caller's word rows).

Migration 5's statement trigger (``message_words_drop``) was planned as a nested loop over
the deleted messages probing the word index's primary key ``(scope, word, id)`` by scope
alone (the word joined above it): each deleted message read its caller's whole range. A
forget of 12,000 messages took 11-20 s (past the statement timeout for a large caller).

The structural check counts the word index's blocks read by a delete in the deleting
transaction (``pg_stat_get_xact_blocks_fetched``: this backend's own counts, read in the same
transaction, no waiting on the statistics' flush): in proportion to the word rows deleted, and
no sequential scan of the word index's table. Figures are printed (``-s``), never asserted.
"""

from __future__ import annotations

import random
import time

import pytest

from pipecat_summarizer.store import _postgres_writes, open_store
from pipecat_summarizer.store._postgres_schema import migrations
from pipecat_summarizer.store.base import SCHEMA_VERSION
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord

asyncpg = pytest.importorskip("asyncpg")

#: A fresh word index: what migration 5 fills it with, from the messages left.
_FRESH_WORDS = """SELECT md5(m.user_id)::uuid AS scope, u.lexeme AS word, m.id,
    (CASE WHEN 16383 = ANY(u.positions) THEN -1 ELSE 1 END)
        * COALESCE(cardinality(u.positions), 1) AS tf, m.at
    FROM messages m, unnest(m.tsv) u WHERE m.user_id IS NOT NULL"""
_WORDS = "SELECT scope, word, id, tf, at FROM message_words"
#: The word index's blocks read and the word table's sequential scans so far: this backend's
#: counts not yet flushed to the shared statistics, earlier transactions' included (read
#: before and after what is measured).
_COUNTS = (
    "SELECT pg_stat_get_xact_blocks_fetched('message_words_pkey'::regclass), "
    "pg_stat_get_xact_numscans('message_words'::regclass)"
)


def _msg(call: str, i: int, text: str, at: float, user: str) -> ArchivedMessage:
    return ArchivedMessage(
        call_id=call,
        position=i,
        role="user",
        content=text,
        message_json="{}",
        turn=i,
        at=at,
        user_id=user,
    )


def _records(user: str, n: int, at: float, text: str = "card {i}") -> list:
    """``n`` messages of ``user`` (calls of 1,000), with their calls' records."""
    records: list = []
    for c in range(0, n, 1000):
        call = f"{user}-{c // 1000}"
        records.append(CallRecord(call, user_id=user, started_at=at))
        records += [
            _msg(call, i - c, text.format(i=i), at + i, user) for i in range(c, min(n, c + 1000))
        ]
    return records


async def _fill(conn, user: str, n: int, at: float, text: str = "card {i}") -> None:
    """``n`` messages of ``user`` (calls of 1,000), through the store's own writes."""
    await _postgres_writes.write(conn, _records(user, n, at, text))


async def _make_v8(dsn: str) -> None:
    """An empty database as the v8 code created it."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE TABLE schema_version(version INTEGER NOT NULL)")
        for version in range(1, 9):
            for statement in migrations("english")[version]:
                await conn.execute(statement)
            await conn.execute("INSERT INTO schema_version VALUES ($1)", version)
    finally:
        await conn.close()


class _Rollback(Exception):
    """Leaves the transaction rolled back, with what was read in it."""

    def __init__(self, figures: tuple[int, int, int, int]):
        super().__init__("rolled back")
        self.figures = figures


async def _reads(conn, user: str, limit: int | None = None) -> tuple[int, int, int, int]:
    """Delete ``user``'s messages (their first ``limit``, by id) in a transaction rolled
    back after: the messages deleted, their word rows (the lexemes of their ``tsv``), the
    word index's blocks read (the trigger's statement: nothing else reads it here), and
    the sequential scans of the word table."""
    where = "user_id = $1" + ("" if limit is None else f" ORDER BY id LIMIT {limit}")
    try:
        async with conn.transaction():
            blocks_before, scans_before = await conn.fetchrow(_COUNTS)
            n, words = await conn.fetchrow(
                f"WITH g AS (DELETE FROM messages WHERE id IN (SELECT id FROM messages "
                f"WHERE {where}) RETURNING length(tsv) AS k) SELECT count(*), sum(k) FROM g",
                user,
            )
            blocks, scans = await conn.fetchrow(_COUNTS)
            raise _Rollback((n, words, blocks - blocks_before, scans - scans_before))
    except _Rollback as r:
        return r.figures
    raise AssertionError("unreachable")


async def _words(conn) -> tuple[list, list]:
    """The word index's rows, and a fresh index's from the messages left."""
    return (
        sorted(tuple(r) for r in await conn.fetch(_WORDS)),
        sorted(tuple(r) for r in await conn.fetch(_FRESH_WORDS)),
    )


def _keys(hits) -> list[tuple[str, int]]:
    return [(h.call_id, h.position) for h in hits]


async def test_s14_a_delete_reads_the_word_index_by_whole_keys(pg_server):
    # 3,000 messages of one caller (two lexemes each) among other callers': deleting them
    # reads the word index's primary key a few blocks per deleted word row (a probe by the
    # whole key), and never scans the word table. Migration 5's plan read the caller's
    # whole range per deleted message (~35 blocks per word row here, growing with the
    # caller's archive). The same for an UPDATE of their content (message_words_move).
    dsn = pg_server.create_database(f"s14_linear_{random.randrange(10**9)}")
    store = open_store(dsn)
    await store.open()
    await store.close()
    now = time.time() - 86400
    conn = await asyncpg.connect(dsn)
    try:
        await _fill(conn, "big", 3000, now)
        # a fleet: many other callers (the planner then expects a caller's range of the
        # word index to be small, and probes it; with ten callers, migration 5's plan
        # was a hash join over the whole table)
        # was, one write a caller: the same rows in one write (~40% of the test's time)
        fleet = [r for k in range(200) for r in _records(f"other-{k}", 100, now, "card {i} zebra")]
        await _postgres_writes.write(conn, fleet)
        await conn.execute("VACUUM ANALYZE message_words")
        for limit in (None, 300):
            n, words, blocks, scans = await _reads(conn, "big", limit)
            print(f"\ndelete of {n} messages ({words} word rows): {blocks} index blocks read")
            assert n == (limit or 3000) and words == 2 * n
            assert blocks <= 6 * words
            assert scans == 0
        async with conn.transaction():
            blocks_before, scans_before = await conn.fetchrow(_COUNTS)
            await conn.execute(
                "UPDATE messages SET content = 'redacted ' || id WHERE user_id = 'big' "
                "AND position < 100 AND call_id = 'big-0'"
            )
            blocks, scans = await conn.fetchrow(_COUNTS)
            blocks, scans = blocks - blocks_before, scans - scans_before
            print(f"update of 100 messages' content: {blocks} index blocks read")
            assert scans == 0
            # each row: its two old word rows deleted, its two new ones inserted
            assert blocks <= 6 * 400
            have, fresh = await _words(conn)
            assert have == fresh
    finally:
        await conn.close()


async def test_s14_a_v8_database_forgets_12000_messages_and_leaves_a_fresh_index(pg_server):
    # a database of the v8 code, its archive written by the v8 triggers, opened by this
    # code (migrated to v9): a forget of 12,000 messages of one caller leaves exactly the
    # word rows a fresh index of the messages left holds, and al's search (counts kept
    # before the forget) finds what a fresh store finds
    dsn = pg_server.create_database(f"s14_v8_{random.randrange(10**9)}")
    await _make_v8(dsn)
    now = time.time() - 86400
    conn = await asyncpg.connect(dsn)
    worker = open_store(dsn)
    fresh = open_store(dsn)
    try:
        await _fill(conn, "big", 12000, now)
        await _fill(conn, "al", 50, now, "card {i} zebra")
        await _fill(conn, "bo", 50, now, "card {i}")
        await worker.open()
        assert await conn.fetchval("SELECT MAX(version) FROM schema_version") == SCHEMA_VERSION
        assert SCHEMA_VERSION == 9
        before = _keys(await worker.search("card zebra", user_id="al", any_word=True, limit=20))
        assert len(before) == 20
        started = time.perf_counter()
        assert await worker.forget("big") == 12000 + 12  # the messages and the 12 calls
        print(
            f"\nforget of 12,000 messages on a v8 database migrated to v9: "
            f"{time.perf_counter() - started:.2f} s (VACUUM included)"
        )
        have, want = await _words(conn)
        assert have == want
        assert len(have) == 3 * 50 + 2 * 50  # al's three lexemes, bo's two
        got = _keys(await worker.search("card zebra", user_id="al", any_word=True, limit=20))
        assert got == _keys(await fresh.search("card zebra", user_id="al", any_word=True, limit=20))
        assert got == before
    finally:
        await conn.close()
        await worker.close()
        await fresh.close()

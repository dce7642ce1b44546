"""PostgreSQL forget: its VACUUM is meant to reclaim the forgotten caller's words (the
deleted rows' dead tuples, their word index ``message_words``). On PostgreSQL 14 and later a
plain VACUUM skips the index scans when few pages hold dead items (one caller among many):
the heap tuples go, the index entries stay (S10-A-3). Read with ``pageinspect`` on the real
server: after ``forget`` the word is no longer among ``message_words``' primary key's items
(its VACUUM runs with ``INDEX_CLEANUP ON``)."""

from __future__ import annotations

import os

import pytest

from pipecat_summarizer.store import PostgresMemoryStore
from tests.recall.test_attacks_dates import archived, utc

asyncpg = pytest.importorskip("asyncpg")

SECRET = "zanzibar"


async def _index_holds(conn, index: str, word: bytes) -> int:
    """How many of ``index``'s leaf tuples hold ``word`` (pageinspect's raw items)."""
    pages = await conn.fetchval("SELECT pg_relation_size($1::regclass) / 8192", index)
    found = 0
    for page in range(1, pages):
        rows = await conn.fetch("SELECT data FROM bt_page_items($1, $2)", index, page)
        found += sum(word in bytes.fromhex((r["data"] or "").replace(" ", "")) for r in rows)
    return found


async def test_a_forgotten_word_leaves_the_word_index(pg_server):
    dsn = pg_server.create_database(f"s10_vacidx_{os.getpid()}")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
    except asyncpg.PostgresError as e:  # no contrib package, or not a superuser
        await conn.close()
        pytest.skip(f"pageinspect unavailable ({type(e).__name__})")
    store = PostgresMemoryStore(dsn)
    try:
        # bob's many calls (the table is large beside alice's one message: the case of any
        # store with more than a few callers), then alice's secret
        lines = [f"line {i} about the blue vespa number {i}" for i in range(2400)]
        await store.write(archived(lines, call_id="b1", at=utc(2026, 5, 1), user_id="bob"))
        await store.write(
            archived([f"my code word is {SECRET}", "Noted."], call_id="a1", at=utc(2026, 5, 2))
        )
        assert await _index_holds(conn, "message_words_pkey", SECRET.encode()) == 1
        assert await store.forget("alice") > 0
        assert (
            await conn.fetchval("SELECT count(*) FROM message_words WHERE word = $1", SECRET) == 0
        )
        assert await _index_holds(conn, "message_words_pkey", SECRET.encode()) == 0
    finally:
        await store.close()
        await conn.close()

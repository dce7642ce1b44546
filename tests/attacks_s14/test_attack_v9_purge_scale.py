"""Attacks on schema v9's ``message_words_drop`` (6eff03e: the deleted messages' word keys in
a MATERIALIZED CTE, hash and merge joins off inside the function) at a purge's scale, and on
``message_words_move`` under an operator's UPDATE of many messages.

A retention purge deletes 50,000 messages of 500 callers in one statement (10,000 in the
suite, ``PCS_ATTACK_PURGE_OLD=100`` for 50,000) (a forget is one
caller's): with hash joins off, the join of ~150,000 deleted word keys with the word index
must still be a probe of the primary key per key (blocks read in proportion to the word rows
deleted, no sequential scan of the word table), not a nested loop reading ranges, and linear:
half the purge reads about half the blocks. Structural facts are asserted; times printed.
"""

from __future__ import annotations

import asyncio
import os
import random
import time

import pytest

from pipecat_summarizer.store import open_store
from pipecat_summarizer.store.base import SCHEMA_VERSION
from tests.store.test_s14_forget_linear import _COUNTS, _make_v8, _words

asyncpg = pytest.importorskip("asyncpg")

DAY = 86400.0
CALLERS = 500
#: each caller's messages older than the retention: 500 x 20 in the suite (~4 s); the brief's
#: 50,000 (500 x 100, ~35 s at load 14) with PCS_ATTACK_PURGE_OLD=100
OLD = int(os.environ.get("PCS_ATTACK_PURGE_OLD", "20"))
NEW = 10  # each caller's recent ones, kept

_INSERT = """INSERT INTO messages(call_id, user_id, position, turn, at, role, content,
        message_json, removed_by)
    SELECT 'c-' || u, 'u-' || u, i, i, $1 + i * 60, 'user',
        'note ' || i || ' caller' || u || ' ' || (ARRAY['rent', 'room', 'train'])[1 + i % 3],
        '{}', 'compaction'
    FROM generate_series(0, $2 - 1) u, generate_series($3, $4 - 1) i"""


async def _blocks_of(conn, cutoff: float) -> tuple[int, int, int, float]:
    """The purge's delete of messages before ``cutoff`` in a transaction rolled back: the
    messages deleted, their word rows, the word index's blocks read, the word table's
    sequential scans, and the statement's wall time (printed only)."""
    tr = conn.transaction()
    await tr.start()
    try:
        blocks_before, scans_before = await conn.fetchrow(_COUNTS)
        started = time.perf_counter()
        n, words = await conn.fetchrow(
            "WITH g AS (DELETE FROM messages WHERE at < $1 RETURNING length(tsv) AS k) "
            "SELECT count(*), sum(k) FROM g",
            cutoff,
        )
        took = time.perf_counter() - started
        blocks, scans = await conn.fetchrow(_COUNTS)
        return n, words, blocks - blocks_before, scans - scans_before, took
    finally:
        await tr.rollback()


async def test_attack_v9_a_purge_across_500_callers_probes_each_word_key(pg_server):
    dsn = pg_server.create_database(f"s14_a_purge_{random.randrange(10**9)}")
    old = time.time() - 90 * DAY
    conn = await asyncpg.connect(dsn)
    store = open_store(dsn)
    try:
        await store.open()
        started = time.perf_counter()
        await conn.execute(_INSERT, old, CALLERS, 0, OLD)
        await conn.execute(_INSERT, time.time() - DAY - OLD * 60, CALLERS, OLD, OLD + NEW)
        await conn.execute("VACUUM ANALYZE message_words")
        await conn.execute("ANALYZE messages")
        print(f"\nload {os.getloadavg()[0]:.1f}; built in {time.perf_counter() - started:.1f} s")
        rows = {}
        for share in (0.5, 1.0):
            cutoff = old + (OLD * share - 0.5) * 60
            n, words, blocks, scans, took = await _blocks_of(conn, cutoff)
            rows[share] = (n, words, blocks)
            print(
                f"purge of {n} messages ({words} word rows): {blocks} word index blocks "
                f"read ({blocks / words:.2f} per word row), {scans} seq scans, {took:.2f} s"
            )
            assert n == CALLERS * OLD * share
            assert scans == 0
            assert blocks <= 6 * words
        # linear: the whole purge reads at most 2.5x the half's blocks for 2x the rows
        assert rows[1.0][2] <= 2.5 * rows[0.5][2]
        started = time.perf_counter()
        assert await store.purge_older_than(30) == CALLERS * OLD
        print(f"store.purge_older_than: {time.perf_counter() - started:.2f} s (VACUUM included)")
        have, fresh = await _words(conn)
        assert have == fresh
        assert len(have) == CALLERS * NEW * 4  # note, its number, the caller's word, the topic
    finally:
        await store.close()
        await conn.close()


async def test_attack_v9_an_operators_update_of_many_messages_leaves_a_fresh_index(pg_server):
    # an operator's redaction: one UPDATE of 2,000 messages of 20 callers (content changed,
    # some moved to another caller, some to another time): message_words_move (per row)
    # leaves exactly a fresh index's word rows, and a store's search finds the new words
    dsn = pg_server.create_database(f"s14_a_update_{random.randrange(10**9)}")
    conn = await asyncpg.connect(dsn)
    store = open_store(dsn)
    try:
        await store.open()
        await conn.execute(_INSERT, time.time() - 10 * DAY, 20, 0, 150)
        status = await conn.execute(
            "UPDATE messages SET content = 'redacted ' || position || ' ' || content, "
            "user_id = CASE WHEN position % 7 = 0 THEN 'u-moved' ELSE user_id END, "
            "at = at + CASE WHEN position % 5 = 0 THEN 1 ELSE 0 END "
            "WHERE position < 100"
        )
        assert status == "UPDATE 2000"
        have, fresh = await _words(conn)
        assert have == fresh
        hits = await store.search("redacted", user_id="u-moved", limit=500)
        assert len(hits) == 20 * len(range(0, 100, 7))
        assert await store.search("redacted", user_id="u-3", limit=500)
    finally:
        await store.close()
        await conn.close()


async def test_attack_v9_three_processes_open_a_v8_database_at_once(pg_server, tmp_path):
    # three processes (not store objects of one: separate connections, pools and Python
    # states) open a v8 database at the same moment: migration 9 runs once (one row of
    # schema_version per version, one removals_fold), each opens
    dsn = pg_server.create_database(f"s14_a_three_{random.randrange(10**9)}")
    await _make_v8(dsn)
    go = tmp_path / "go"
    script = (
        "import asyncio, os, sys, time\n"
        "from pipecat_summarizer.store import open_store\n"
        "async def main():\n"
        f"    while not os.path.exists({str(go)!r}):\n"
        "        time.sleep(0.005)\n"
        "    s = open_store(sys.argv[1])\n"
        "    await s.open()\n"
        "    await s.close()\n"
        "asyncio.run(main())\n"
    )
    procs = [
        await asyncio.create_subprocess_exec(
            "/work/main/.venv/bin/python", "-c", script, dsn, cwd="/work/main"
        )
        for _ in range(3)
    ]
    await asyncio.sleep(1.0)  # each imported and waiting (a start not at once still passes)
    go.write_text("")
    codes = [await asyncio.wait_for(p.wait(), 60) for p in procs]
    assert codes == [0, 0, 0]
    conn = await asyncpg.connect(dsn)
    try:
        versions = [r[0] for r in await conn.fetch("SELECT version FROM schema_version ORDER BY 1")]
        assert versions == list(range(1, SCHEMA_VERSION + 1))
        assert (
            await conn.fetchval("SELECT count(*) FROM pg_proc WHERE proname = 'removals_fold'") == 1
        )
    finally:
        await conn.close()

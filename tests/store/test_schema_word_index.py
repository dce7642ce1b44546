"""The caller's word index (schema v5, PostgreSQL): recall's search by caller reads it.

A v4 database migrates in place when it opens (two processes opening it at once migrate it
once), and its old messages are found; the index follows every write, forget and purge, so
a forgotten message is never found by it; a message whose positions were clamped is ranked
on its own row. The ranking itself is compared with a plain reference query in
tests/store/test_postgres_search.py. Speed is measured by benchmarks/recall.py.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from pathlib import Path

import pytest

from pipecat_summarizer.store import open_store
from pipecat_summarizer.store._rows import message_row
from pipecat_summarizer.store.base import SCHEMA_VERSION
from pipecat_summarizer.store.records import ArchivedMessage

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0
VOCAB = "hotel train budapest room breakfast dinner ticket museum river bridge".split()


def _msg(call: str, pos: int, text: str, user: str | None, at: float | None = None):
    return ArchivedMessage(
        call_id=call,
        position=pos,
        role="user",
        content=text,
        message_json=json.dumps({"role": "user", "content": text}),
        turn=pos // 2,
        at=T0 + pos if at is None else at,
        user_id=user,
    )


def _archive(users=("alice", "bob"), per_user=120, seed=5, t0=T0) -> list[ArchivedMessage]:
    rng = random.Random(seed)
    text = [" ".join(rng.sample(VOCAB, 3)) + f". Note {i}." for i in range(per_user)]
    return [
        _msg(f"{user}-{i // 40}", i % 40, text[i], user, at=t0 + i)
        for user in users
        for i in range(per_user)
    ]


async def _reference(conn, user: str, query: str, limit: int) -> list[tuple]:
    """The search's hits by a plain query over the caller's rows (see the ranking test in
    test_postgres_search.py): words matched plus ts_rank_cd, ties by time then id."""
    words = sorted(set(query.split()))
    matched = " + ".join(
        f"(tsv @@ plainto_tsquery('english', ${i + 3}))::int" for i in range(len(words))
    )
    rows = await conn.fetch(
        f"""SELECT call_id, position FROM messages
            WHERE user_id = $2 AND tsv @@ websearch_to_tsquery('english', $1)
            ORDER BY ({matched} + ts_rank_cd(tsv, websearch_to_tsquery('english', $1), 32))
            ::float8 DESC, at DESC, id DESC LIMIT {limit}""",
        " or ".join(query.split()),
        user,
        *words,
    )
    return [tuple(r) for r in rows]


async def _make_v4(dsn: str, records: list[ArchivedMessage]) -> None:
    """A database as the v4 code left it: its statements, and messages written by its
    insert."""
    import asyncpg

    from pipecat_summarizer.store._postgres_schema import migrations
    from pipecat_summarizer.store._postgres_writes import _INSERT_MESSAGE

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE TABLE schema_version(version INTEGER NOT NULL)")
        for version in (1, 2, 3, 4):
            for statement in migrations("english")[version]:
                await conn.execute(statement)
            await conn.execute("INSERT INTO schema_version VALUES ($1)", version)
        await conn.executemany(_INSERT_MESSAGE, [message_row(m) for m in records])
    finally:
        await conn.close()


async def _words_rows(conn, user: str | None = None) -> int:
    if user is None:
        return await conn.fetchval("SELECT count(*) FROM message_words")
    return await conn.fetchval(
        "SELECT count(*) FROM message_words WHERE scope = md5($1)::uuid", user
    )


async def _expected_rows(conn) -> int:
    """One row per lexeme of each message that has a caller."""
    return await conn.fetchval(
        "SELECT count(*) FROM messages m, unnest(m.tsv) WHERE m.user_id IS NOT NULL"
    )


async def test_a_v4_postgres_database_migrates_and_finds_its_old_messages(pg_server):
    import asyncpg

    dsn = pg_server.create_database(f"v4_{random.randrange(10**9)}")
    old = _archive() + [_msg("anon-1", 0, "A hotel without a caller.", None)]
    await _make_v4(dsn, old)
    store = open_store(dsn)
    queries = ["hotel train", "museum", "bridge river dinner ticket"]
    try:
        found = [await store.search(q, user_id="alice", any_word=True, limit=25) for q in queries]
        await store.write([_msg("alice-new", 0, "A museum ticket for Sunday.", "alice")])
        newest = await store.search("sunday", user_id="alice", any_word=True)
        anon = await store.search("hotel", call_id="anon-1", any_word=True)
    finally:
        await store.close()
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT MAX(version) FROM schema_version") == SCHEMA_VERSION
        assert SCHEMA_VERSION >= 6  # v7 changes SQLite only
        for query, hits in zip(queries, found, strict=True):
            assert len(hits) == 25 and {h.user_id for h in hits} == {"alice"}
            assert [(h.call_id, h.position) for h in hits] == await _reference(
                conn, "alice", query, 25
            )
        assert [(h.call_id, h.position) for h in newest] == [("alice-new", 0)]
        assert [(h.call_id, h.position) for h in anon] == [("anon-1", 0)]
        # every old message with a caller is in the index, and only those
        assert await _words_rows(conn) == await _expected_rows(conn) > 0
    finally:
        await conn.close()


async def _spawn(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.store_worker",
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def test_two_processes_opening_a_v4_database_migrate_it_once(pg_server):
    import asyncpg

    dsn = pg_server.create_database(f"v4_two_{random.randrange(10**9)}")
    await _make_v4(dsn, _archive(users=("dana",), per_user=200))
    procs = [await _spawn("write", dsn, "dana", f"w{i}", "40") for i in range(2)]
    codes = await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), 120)
    assert codes == [0, 0]
    store = open_store(dsn)
    try:
        apples = await store.search("apples", user_id="dana", any_word=True, limit=100)
        old = await store.search("hotel", user_id="dana", any_word=True, limit=500)
    finally:
        await store.close()
    conn = await asyncpg.connect(dsn)
    try:
        versions = [r[0] for r in await conn.fetch("SELECT version FROM schema_version")]
        assert sorted(versions) == list(range(1, SCHEMA_VERSION + 1))
        assert await _words_rows(conn) == await _expected_rows(conn)
    finally:
        await conn.close()
    assert len(apples) == 80
    assert len(old) == sum("hotel" in m.content for m in _archive(users=("dana",), per_user=200))


async def test_a_forgotten_or_purged_message_is_never_found(store_target, backend):
    store = open_store(store_target)
    try:
        await store.write(_archive(per_user=80, t0=time.time()))
        await store.write([_msg("old-1", 0, "An old hotel, long ago.", "bob", at=1000.0)])
        before = await store.search("hotel train museum", user_id="alice", any_word=True)
        await store.forget("alice")
        alice = await store.search("hotel train museum", user_id="alice", any_word=True)
        assert await store.purge_older_than(1) >= 1
        bob = await store.search("hotel old", user_id="bob", any_word=True, limit=200)
    finally:
        await store.close()
    assert before and alice == []
    assert bob and ("old-1", 0) not in {(h.call_id, h.position) for h in bob}
    if backend == "postgres":
        import asyncpg

        conn = await asyncpg.connect(store_target)
        try:
            assert await _words_rows(conn) == await _expected_rows(conn)
            assert await _words_rows(conn, "alice") == 0
        finally:
            await conn.close()


async def test_a_message_whose_positions_were_clamped_is_ranked_on_its_own_row(pg_server):
    # past 16,383 words every position is the last one: two lexemes may share it, and the
    # rank counted from the index would differ from ts_rank_cd's; such a row is read whole
    import asyncpg

    dsn = pg_server.create_database(f"clamped_{random.randrange(10**9)}")
    store = open_store(dsn)
    long_text = "a " * 16_400 + "hotel train hotel"
    try:
        await store.write(
            [
                _msg("c1", 0, long_text, "erin"),
                _msg("c1", 1, "hotel train, hotel again", "erin"),
                _msg("c1", 2, "train", "erin"),
            ]
        )
        hits = await store.search("hotel train", user_id="erin", any_word=True)
    finally:
        await store.close()
    conn = await asyncpg.connect(dsn)
    try:
        clamped = await conn.fetchval("SELECT count(*) FROM message_words WHERE tf < 0")
        want = await conn.fetch(
            """SELECT position, ((tsv @@ 'hotel'::tsquery)::int + (tsv @@ 'train'::tsquery)::int
                + ts_rank_cd(tsv, 'hotel | train'::tsquery, 32))::float8 FROM messages
            ORDER BY 2 DESC, at DESC, id DESC"""
        )
    finally:
        await conn.close()
    assert clamped == 2  # hotel and train of the long message
    assert [(h.position, h.score) for h in hits] == [(r[0], pytest.approx(r[1])) for r in want]


async def test_a_word_beyond_ascii_is_searched_through_the_gin_index_with_the_same_ranking(
    pg_server,
):
    # the database's locale decides how PostgreSQL's parser splits such a word: the word
    # index's search (one lexeme per word) is not used for it
    import asyncpg

    from pipecat_summarizer.store import _postgres_search

    dsn = pg_server.create_database(f"accents_{random.randrange(10**9)}")
    records = _archive(per_user=60) + [
        _msg("alice-c", i, f"Café {word} near the hotel", "alice") for i, word in enumerate(VOCAB)
    ]
    store = open_store(dsn)
    try:
        await store.write(records)
        plain = await store.search("hotel museum", user_id="alice", any_word=True, limit=20)
        accented = await store.search("café hotel museum", user_id="alice", any_word=True)
    finally:
        await store.close()
    statement = _postgres_search.search_sql(
        "english", "café hotel", user_id="alice", call_id=None, limit=10, any_word=True
    )
    assert statement is not None and "message_words" not in statement[0]
    conn = await asyncpg.connect(dsn)
    try:
        assert [(h.call_id, h.position) for h in plain] == await _reference(
            conn, "alice", "hotel museum", 20
        )
        assert [(h.call_id, h.position) for h in accented] == await _reference(
            conn, "alice", "café hotel museum", 10
        )
    finally:
        await conn.close()
    assert accented[0].call_id == "alice-c"  # café, hotel and museum


async def test_a_forget_leaves_no_dead_row_of_the_callers_words(pg_server):
    # a deleted row keeps its words on disk until a vacuum: the forget vacuums the word
    # index as it does the messages
    import asyncpg

    dsn = pg_server.create_database(f"forget_vacuum_{random.randrange(10**9)}")
    store = open_store(dsn)
    try:
        await store.write(_archive(per_user=60, t0=time.time()))
        await store.forget("alice")
    finally:
        await store.close()
    conn = await asyncpg.connect(dsn)
    try:
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        except asyncpg.PostgresError:
            pytest.skip("pgstattuple unavailable: the dead rows were not counted")
        dead = await conn.fetchval("SELECT dead_tuple_count FROM pgstattuple('message_words')")
        alive = await conn.fetchval("SELECT tuple_count FROM pgstattuple('message_words')")
        assert await _words_rows(conn, "alice") == 0
    finally:
        await conn.close()
    assert dead == 0 and alive > 0  # bob's words stay

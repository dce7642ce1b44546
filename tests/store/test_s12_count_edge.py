"""A common word's kept count stands while no message it may have counted was deleted
(S11-A-6, S12-B-1, S12-B-2, S12-C-1).

Each store object keeps its searches' counts of common words; a forget or a purge through
another store object (another worker process on the same database) deletes rows it counted.
Every transaction that deletes archived messages bumps the database's removals (schema v8:
a trigger; SQLite one count for the file, PostgreSQL one per bucket of callers): a search
reads them
(one primary-key read; in the same statement on PostgreSQL) and counts a word afresh when
they changed since its count was kept. While they stand the count is reused.
"""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

from pipecat_summarizer.store import SQLiteMemoryStore, open_store
from pipecat_summarizer.store import _postgres_search as pg_search
from pipecat_summarizer.store import _sqlite_schema as schema
from pipecat_summarizer.store import _sqlite_search as sqlite_search
from pipecat_summarizer.store._postgres_schema import EVERYONE, REMOVALS_OF
from pipecat_summarizer.store.records import ArchivedMessage


def _msg(call: str, i: int, text: str, at: float, user: str = "al") -> ArchivedMessage:
    return ArchivedMessage(
        call_id=call,
        position=i,
        role="user",
        content=text,
        message_json=json.dumps({"role": "user", "content": text}),
        turn=i // 2,
        at=at,
        user_id=user,
    )


async def test_another_stores_purge_drops_the_counts_of_what_it_deleted(store_target):
    # a worker counts al's old "card" messages (more than KEEP_MATCHES); another process's
    # retention purge deletes them; al's new "card" messages must be found by the worker
    worker, admin, fresh = (open_store(store_target) for _ in range(3))
    old = time.time() - 90 * 86400
    keep = pg_search.KEEP_MATCHES
    try:
        await worker.write(
            [_msg(f"old-{i // 500}", i % 500, f"card {i}", old + i) for i in range(keep + 50)]
        )
        assert await worker.search("card zebra", user_id="al", any_word=True, limit=5)
        assert await admin.purge_older_than(30) >= keep + 50
        now = time.time()
        await admin.write(
            [
                _msg("new", 0, "my card was declined", now),
                _msg("new", 1, "zebra print card holder", now + 1),
                _msg("new", 2, "the card again", now + 2),
            ]
        )
        want = await fresh.search("card zebra", user_id="al", any_word=True, limit=10)
        got = await worker.search("card zebra", user_id="al", any_word=True, limit=10)
    finally:
        for store in (worker, admin, fresh):
            await store.close()
    assert sorted(h.position for h in want) == [0, 1, 2]
    assert sorted((h.call_id, h.position) for h in got) == sorted(
        (h.call_id, h.position) for h in want
    )


async def _removals_pg(conn, user: str) -> int:
    return await conn.fetchval(
        "SELECT COALESCE(sum(n), 0) FROM removals "
        f"WHERE bucket IN ({REMOVALS_OF.format(user='$1')}, $2)",
        user,
        EVERYONE,
    )


@pytest.mark.parametrize("function", [False, True])
async def test_postgres_reuses_a_count_while_the_callers_removals_stand(
    pg_server, monkeypatch, function
):
    asyncpg = pytest.importorskip("asyncpg")
    monkeypatch.setattr(pg_search, "DF_CACHE_MIN", 20)
    dsn = pg_server.create_database(f"s12_count_edge_{int(function)}")
    store = open_store(dsn)
    t0 = time.time() - 3600
    try:
        await store.write([_msg("c", i, f"card {i}", t0 + i) for i in range(30)])
        await store.write([_msg("d", 0, "zebra", t0 + 40), _msg("b", 0, "card", t0, "bo")])
    finally:
        await store.close()
    conn = await asyncpg.connect(dsn)
    try:
        if function:
            await conn.execute(pg_search.function_sql("english"))
        edge = await conn.fetchval(
            "SELECT min(id) FROM message_words WHERE scope = md5('al')::uuid AND word = 'card'"
        )

        async def df_of_card(counts: pg_search.WordCounts) -> tuple[int, int, int, int]:
            statement = pg_search.search_sql(
                "english",
                "card zebra",
                user_id="al",
                call_id=None,
                limit=50,
                any_word=True,
                counts=counts,
                function=function,
            )
            assert statement is not None
            rows = await conn.fetch(*statement)
            pg_search.remember_counts(counts, statement, rows)
            return rows[0]["df"][0], rows[0]["edge"][0], rows[0]["removals"], len(rows)

        now = time.monotonic()
        assert await _removals_pg(conn, "al") == 0  # nothing deleted yet
        # a made-up count at the current removals: reused (not counted again), and it decides
        kept: pg_search.WordCounts = {("al", "card"): (25, edge, now, 0)}
        assert await df_of_card(kept) == (25, edge, 0, 31)
        assert kept == {("al", "card"): (25, edge, now, 0)}
        # another caller's message deleted (another bucket): al's removals stand, so does
        # his count
        assert await conn.fetchval("SELECT left(md5('al'), 3) <> left(md5('bo'), 3)")
        assert await conn.execute("DELETE FROM messages WHERE user_id = 'bo'") == "DELETE 1"
        assert await df_of_card(kept) == (25, edge, 0, 31)
        # one of al's deleted (his oldest "card" stays, the check by edge let it stand):
        # counted afresh at his new removals
        await conn.execute("DELETE FROM messages WHERE user_id = 'al' AND position = 29")
        assert await _removals_pg(conn, "al") == 1
        assert await df_of_card(kept) == (29, edge, 1, 30)
        assert kept[("al", "card")][:2] == (29, edge) and kept[("al", "card")][3] == 1
        # a delete of nothing bumps nothing (the kept count stands)
        await conn.execute("DELETE FROM messages WHERE user_id = 'al' AND position = 999")
        assert await df_of_card(kept) == (29, edge, 1, 30)
        # a rolled-back delete neither: its bump goes with it
        rolled = conn.transaction()
        await rolled.start()
        await conn.execute("DELETE FROM messages WHERE user_id = 'al' AND position = 28")
        assert await _removals_pg(conn, "al") == 2
        await rolled.rollback()
        assert await _removals_pg(conn, "al") == 1
        assert await df_of_card(kept) == (29, edge, 1, 30)
        # a TRUNCATE bumps everyone's
        await conn.execute("TRUNCATE messages")
        assert await _removals_pg(conn, "al") == 2 and await _removals_pg(conn, "cy") == 1
        # and a fresh count under DF_CACHE_MIN leaves nothing kept
        await conn.execute(
            "INSERT INTO messages(call_id, user_id, position, turn, at, role, content,"
            " message_json, removed_by) VALUES ('e', 'al', 0, 0, 1, 'user', 'card zebra',"
            " '{}', '')"
        )
        assert (await df_of_card(kept))[0] == 1
        assert kept == {}
    finally:
        await conn.close()


def test_a_count_counted_again_replaces_or_drops_the_kept_one():
    now = time.monotonic()
    counts: pg_search.WordCounts = {
        ("al", "card"): (500, 5, now - 10, 4),
        ("al", "new"): (400, 6, now - 10, 3),
        ("al", "tea"): (300, 7, now - 10, 3),
    }
    words = ["card", "new", "tea"]
    statement = ("sql", words, "al", 10, [500, 400, 300], [5, 6, 7], [4, 3, 3], 0)
    # card reused (counted at the current removals, 4), new and tea counted again (they
    # were counted at 3): new 600 rows (edge 8), tea 3 rows (rare: dropped)
    row = (*("x",) * 9, [500, 600, 3], [5, 8, 11], *(None,) * 6, 4)
    pg_search.remember_counts(counts, statement, [row])
    assert counts[("al", "card")] == (500, 5, now - 10, 4)
    assert counts[("al", "new")][:2] == (600, 8) and counts[("al", "new")][2] > now - 10
    assert counts[("al", "new")][3] == 4
    assert ("al", "tea") not in counts


async def test_sqlite_reuses_a_count_while_no_message_went(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_search, "DF_CACHE_MIN", 5)
    path = tmp_path / "m.db"
    store = SQLiteMemoryStore(path)
    t0 = time.time() - 3600
    try:
        await store.write([_msg("c", i, f"card {i}", t0 + i) for i in range(30)])
    finally:
        await store.close()
    bounds = schema.scope_range(schema.scope_of("al", ""))
    conn = sqlite3.connect(path, isolation_level=None)

    def card(counts: sqlite_search.WordCounts) -> tuple[int, int]:
        # as a search reads them: the removals, then the words
        removals = conn.execute("SELECT n FROM removals").fetchone()[0]
        return sqlite_search.word_counts(conn, counts, ["card"], bounds, removals)["card"]

    try:
        counts: sqlite_search.WordCounts = {}
        assert card(counts) == (30, 0)
        n, edge, at, cap, removals = counts[(bounds, "card")]
        assert (n, removals) == (30, 0)
        # a made-up count at the current removals: reused
        counts[(bounds, "card")] = (7, edge, at, cap, removals)
        assert card(counts) == (7, 0)
        # a delete of nothing, and a rolled-back delete, bump nothing
        conn.execute("DELETE FROM messages WHERE position = 999")
        conn.execute("BEGIN")
        conn.execute("DELETE FROM messages WHERE position = 29")
        conn.execute("ROLLBACK")
        assert card(counts) == (7, 0)
        # a message deleted (the newest: the oldest, the check by anchor, stays): counted
        # afresh
        conn.execute("DELETE FROM messages WHERE position = 29")
        assert card(counts) == (29, 0)
        assert counts[(bounds, "card")][0] == 29 and counts[(bounds, "card")][4] == 1
    finally:
        conn.close()


async def test_sqlite_a_forget_of_the_caller_sharing_the_scope_elsewhere(tmp_path):
    # SQLite counts a word over the full-text scope (a 23-bit hash of the caller): bo and al
    # share one. bo's message is the scope's oldest "card": the worker's kept count (al's
    # thousands) stands after al is forgotten through another store object
    bo, al = "u216", "u1449"
    assert schema.scope_of(bo, "") == schema.scope_of(al, "")
    worker, admin, fresh = (SQLiteMemoryStore(tmp_path / "m.db") for _ in range(3))
    old = time.time() - 86400
    keep = sqlite_search.RANK_MATCHES
    try:
        await worker.write([_msg("bo-0", 0, "my card was declined", old - 10, bo)])
        await worker.write(
            [_msg(f"al-{i // 500}", i % 500, f"card {i}", old + i, al) for i in range(keep + 50)]
        )
        assert await worker.search("card zebra", user_id=bo, any_word=True, limit=5)
        await admin.forget(al)
        now = time.time()
        await admin.write(
            [
                _msg("bo-1", 0, "zebra print card holder", now, bo),
                _msg("bo-1", 1, "the card again", now + 1, bo),
            ]
        )
        want = await fresh.search("card zebra", user_id=bo, any_word=True, limit=10)
        got = await worker.search("card zebra", user_id=bo, any_word=True, limit=10)
    finally:
        for store in (worker, admin, fresh):
            await store.close()
    assert len(want) == 3
    assert sorted((h.call_id, h.position) for h in got) == sorted(
        (h.call_id, h.position) for h in want
    )

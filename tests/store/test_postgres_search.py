"""PostgreSQL search latency without timing: what the server does for a search (schema v5).

A search must read only the scope's matches through the scoped GIN index, whatever the
table's statistics (right after a bulk load there are none) and however often the same
statement has run; the scoped index keeps no pending list (every search would scan it whole);
a search and the recall step's batched read cost one statement each on their connection.
The ranking is checked against a plain reference query. Speed itself is measured by
benchmarks/recall.py, never asserted here.
"""

from __future__ import annotations

import itertools
import json
import random

import pytest

from pipecat_summarizer.store._rows import message_row
from pipecat_summarizer.store.base import SCHEMA_VERSION
from pipecat_summarizer.store.records import ArchivedMessage

asyncpg = pytest.importorskip("asyncpg")

from pipecat_summarizer.store import _postgres_search  # noqa: E402
from pipecat_summarizer.store._postgres_schema import migrations as _migrations  # noqa: E402
from pipecat_summarizer.store._postgres_writes import _INSERT_MESSAGE  # noqa: E402
from pipecat_summarizer.store.postgres import PostgresMemoryStore  # noqa: E402

T0 = 1_700_000_000.0
VOCAB = "hotel train budapest room breakfast dinner ticket museum river bridge".split()
_names = itertools.count(1)


def _archive(users=("alice", "bob"), per_user=3000, seed=3) -> list[ArchivedMessage]:
    """Each caller's messages over calls of 100, three or four words of a small vocabulary
    each (every word in about a third of them: common words, many matches)."""
    rng = random.Random(seed)
    out = []
    for user in users:
        for i in range(per_user):
            text = " ".join(rng.sample(VOCAB, rng.randint(3, 4))) + f". Note {i}."
            out.append(
                ArchivedMessage(
                    call_id=f"{user}-{i // 100}",
                    position=i % 100,
                    role="user" if i % 2 == 0 else "assistant",
                    content=text,
                    message_json=json.dumps({"role": "user", "content": text}),
                    turn=(i % 100) // 2,
                    at=T0 + i,
                    user_id=user,
                )
            )
    return out


def _database(pg_server) -> str:
    return pg_server.create_database(f"pgsearch_{next(_names)}_{random.randrange(10**9)}")


async def _search_statement(store, *args, **kwargs) -> tuple[list, str, tuple]:
    """The hits of a search, and the statement and arguments it sent."""
    sent = []
    fetch = store._fetch

    async def capture(sql, *values):
        sent.append((sql, values))
        return await fetch(sql, *values)

    store._fetch = capture
    try:
        hits = await store.search(*args, **kwargs)
    finally:
        store._fetch = fetch
    (sql, values) = sent[-1]
    return hits, sql, values


async def _plan(dsn: str, sql: str, values) -> str:
    conn = await asyncpg.connect(dsn, server_settings={"max_parallel_workers_per_gather": "0"})
    try:
        return "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, *values))
    finally:
        await conn.close()


async def _gin_pending(conn) -> tuple[int, int] | None:
    """Pages and entries waiting in messages_scoped's pending list (``None`` without the
    pgstattuple extension)."""
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
    except asyncpg.PostgresError:
        return None
    row = await conn.fetchrow(
        "SELECT pending_pages, pending_tuples FROM pgstatginindex('messages_scoped')"
    )
    return row[0], row[1]


async def test_a_search_right_after_a_bulk_load_reads_only_the_scopes_matches(
    pg_server, monkeypatch
):
    # the statement as sent (past SLOTS words, or with no search function): its body
    monkeypatch.setattr(_postgres_search, "SLOTS", 0)
    # no ANALYZE has run (autovacuum has not come by): the planner must still find the
    # scope's matches through the scoped GIN index, not read every message of the caller
    # (or of the call) through a B-tree and compute the index expression on each
    dsn = _database(pg_server)
    store = PostgresMemoryStore(dsn)
    try:
        await store.write(_archive())
        by_caller, caller_sql, caller_args = await _search_statement(
            store, "hotel train museum", user_id="alice", any_word=True, limit=30
        )
        by_call, call_sql, call_args = await _search_statement(
            store, "hotel river", call_id="alice-7", any_word=True, limit=30
        )
    finally:
        await store.close()
    assert len(by_caller) == 30 and {h.user_id for h in by_caller} == {"alice"}
    assert len(by_call) == 30 and {h.call_id for h in by_call} == {"alice-7"}
    # by caller: each word's latest rows of the caller's word index (schema v5)
    plan = await _plan(dsn, caller_sql, caller_args)
    assert "Index Only Scan Backward using message_words_pkey" in plan, plan
    assert "messages_scoped" not in plan and "messages_user" not in plan, plan
    assert "Seq Scan on message" not in plan, plan
    plan = await _plan(dsn, call_sql, call_args)
    assert "Bitmap Index Scan on messages_scoped" in plan, plan
    assert "messages_user" not in plan, plan
    assert "messages_call_id_position_key" not in plan, plan
    assert "Seq Scan on messages" not in plan, plan


async def test_a_callers_search_merges_the_words_latest_rows_and_stops_at_the_window(
    pg_server, monkeypatch
):
    # the statement as sent (past SLOTS words, or with no search function): its body
    monkeypatch.setattr(_postgres_search, "SLOTS", 0)
    # each word's rows are read newest first and merged by id, grouped as they come: the
    # window's latest RANK_MATCHES ids end the reads, so a common word's older rows are never
    # read, hashed or sorted (it read each word's RANK_MATCHES rows, then hashed and sorted
    # their union: the p99 of recall's search at 100k messages)
    dsn = _database(pg_server)
    store = PostgresMemoryStore(dsn)
    try:
        await store.write(_archive(per_user=2000))
        hits, sql, args = await _search_statement(
            store, "hotel train museum", user_id="alice", any_word=True, limit=30
        )
    finally:
        await store.close()
    assert len(hits) == 30 and {h.user_id for h in hits} == {"alice"}
    plan = await _plan(dsn, sql, args)
    window = plan.split("CTE c\n", 1)[1].split("CTE k\n", 1)[0]  # the window's reads
    assert "GroupAggregate" in window and "Merge Append" in window, plan
    # three reads under the merge, each a backward index scan: no read sorted or hashed
    assert window.count("Index Only Scan Backward using message_words_pkey") == 3, plan
    assert "Bitmap" not in window and "HashAggregate" not in window, plan
    assert "->  Sort" not in window and "->  Incremental Sort" not in window, plan


async def test_the_same_search_statement_is_planned_with_its_own_words_every_time(
    pg_server, monkeypatch
):
    # the statement as sent (past SLOTS words, or with no search function): its body
    monkeypatch.setattr(_postgres_search, "SLOTS", 0)
    # asyncpg prepares each statement once per connection; after five runs PostgreSQL may
    # switch to a generic plan that does not know the words (their frequencies) and
    # recomputes the query per row. Every run of the search must be a custom plan.
    dsn = _database(pg_server)
    store = PostgresMemoryStore(dsn, min_size=1, max_size=1)  # one connection: one session
    try:
        await store.write(_archive(per_user=1500))
        queries = [" ".join(random.Random(i).sample(VOCAB, 3)) for i in range(12)]
        for q in queries:  # three words each: one statement text, twelve runs
            await store.search(q, user_id="alice", any_word=True, limit=20)
        rows = await store._fetch(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%FROM message_words%' "
            "AND statement NOT LIKE '%pg_prepared_statements%' "
            # the connection's warm-up ran its own searches once each (see _postgres_pool.warm)
            "AND generic_plans + custom_plans > 1"
        )
        setting = await store._fetch("SHOW plan_cache_mode")
    finally:
        await store.close()
    # one statement text per number of words: the twelve three-word searches and the warm-up's
    assert [tuple(r) for r in rows] == [(0, 13)]
    assert setting[0][0] == "force_custom_plan"


async def test_a_search_and_the_batched_read_are_one_statement_each(pg_server, monkeypatch):
    # the statement as sent (past SLOTS words, or with no search function): its body
    monkeypatch.setattr(_postgres_search, "SLOTS", 0)
    # a released connection is not reset with a RESET ALL round trip (the store leaves
    # no session state): the recall step's archive work is two statements, no more
    dsn = _database(pg_server)
    store = PostgresMemoryStore(dsn, min_size=1, max_size=1)
    sent: list[str] = []
    try:
        await store.write(_archive(per_user=200))
        async with store._pool.acquire() as conn:
            conn.add_query_logger(lambda record: sent.append(record.query))
        for _ in range(2):  # the first time, asyncpg also reads the types it has not met
            sent.clear()
            hits = await store.search("hotel bridge", user_id="bob", any_word=True, limit=5)
            replies = await store.messages_at([(h.call_id, h.position + 1) for h in hits])
        async with store._pool.acquire() as conn:  # a transaction left open is rolled back
            await conn.execute("BEGIN; SET LOCAL application_name = 'left open'")
        name = await store._fetch("SELECT current_setting('application_name')")
    finally:
        await store.close()
    assert len(hits) == 5 and len(replies) == 5
    assert len(sent) == 5, sent  # search, read, BEGIN, ROLLBACK (asyncpg's), SELECT
    assert "FROM message_words" in sent[0] and "unnest" in sent[1]
    assert not any("RESET" in q or "UNLISTEN" in q for q in sent), sent
    assert sent[3] == "ROLLBACK"
    assert name[0][0] != "left open"  # the next statement is outside that transaction


async def test_a_v2_postgres_database_migrates_to_an_index_without_a_pending_list(pg_server):
    dsn = _database(pg_server)
    records = _archive(per_user=400)
    conn = await asyncpg.connect(dsn)
    try:  # a database as the v2 code left it: fast-update GIN, entries pending
        await conn.execute("CREATE TABLE schema_version(version INTEGER NOT NULL)")
        for version in (1, 2):
            for statement in _migrations("english")[version]:
                await conn.execute(statement)
            await conn.execute("INSERT INTO schema_version VALUES ($1)", version)
        await conn.executemany(_INSERT_MESSAGE, [message_row(m) for m in records])
        pending_before = await _gin_pending(conn)
    finally:
        await conn.close()
    store = PostgresMemoryStore(dsn)
    try:
        alice = await store.search("hotel", user_id="alice", any_word=True, limit=500)
        await store.write(_archive(users=("carol",), per_user=100))
        carol = await store.search("hotel", user_id="carol", any_word=True, limit=500)
    finally:
        await store.close()
    hotel = {
        (m.call_id, m.position) for m in records if m.user_id == "alice" and "hotel" in m.content
    }
    assert {(h.call_id, h.position) for h in alice} == hotel
    assert carol and {h.user_id for h in carol} == {"carol"}
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT MAX(version) FROM schema_version") == SCHEMA_VERSION
        options = await conn.fetchval(
            "SELECT reloptions FROM pg_class WHERE relname = 'messages_scoped'"
        )
        assert options == ["fastupdate=off"]
        # the index expression's statistics were gathered by the migration
        stats = await conn.fetchval(
            "SELECT count(*) FROM pg_stats WHERE tablename = 'messages_scoped'"
        )
        assert stats >= 1
        pending_after = await _gin_pending(conn)  # carol's messages went to the index
    finally:
        await conn.close()
    if pending_before is None:
        pytest.skip("pgstattuple unavailable: the pending list was not inspected")
    assert pending_before[1] > 0
    assert pending_after == (0, 0)


def _text(rng: random.Random, corpus: str) -> str:
    if corpus == "mixed":  # one to twelve words of the vocabulary, repeats included
        return " ".join(rng.choice(VOCAB) for _ in range(rng.randint(1, 12)))
    # one word of the vocabulary, once to three times, among other words: every match
    # holds one query word and they differ only by how often (and when)
    word = rng.choice(VOCAB)
    return " ".join([word] * rng.randint(1, 3) + rng.sample(["we", "went", "late", "again"], 2))


@pytest.mark.parametrize(
    "window, corpus", [(40, "mixed"), (10**6, "mixed"), (40, "one word"), (10**6, "one word")]
)
async def test_postgres_ranking_matches_the_reference_query(pg_server, monkeypatch, window, corpus):
    # the score: distinct query words matched plus ts_rank_cd scaled into [0, 1), over the
    # scope's latest ``window`` matches; ties by time then id. A plain query computing it
    # over the caller's rows (no index tricks, ts_rank_cd against the whole query) must
    # give the same hits in the same order, with the same scores.
    monkeypatch.setattr(_postgres_search, "RANK_MATCHES", window)
    rng = random.Random(17)
    records = []
    for user in ("alice", "bob"):
        for i in range(300):
            text = _text(rng, corpus)
            records.append(
                ArchivedMessage(
                    call_id=f"{user}-{i // 40}",
                    position=i % 40,
                    role="user",
                    content=text,
                    message_json=json.dumps({"role": "user", "content": text}),
                    turn=0,
                    at=T0 + (i // 3),  # equal times: the id breaks the tie
                    user_id=user,
                )
            )
    dsn = _database(pg_server)
    store = PostgresMemoryStore(dsn)
    try:
        await store.write(records)
        queries = [" ".join(rng.sample(VOCAB, rng.randint(1, 4))) for _ in range(20)]
        got = [await store.search(q, user_id="alice", any_word=True, limit=15) for q in queries]
    finally:
        await store.close()
    conn = await asyncpg.connect(dsn)
    try:
        for query, hits in zip(queries, got, strict=True):
            words = sorted(set(query.split()))
            matched = " + ".join(
                f"(tsv @@ plainto_tsquery('english', ${i + 2}))::int" for i in range(len(words))
            )
            want = await conn.fetch(
                f"""WITH c AS (SELECT * FROM messages
                        WHERE user_id = 'alice' AND tsv @@ websearch_to_tsquery('english', $1)
                        ORDER BY id DESC LIMIT {window})
                    SELECT call_id, position,
                        ({matched} + ts_rank_cd(tsv, websearch_to_tsquery('english', $1), 32))
                        ::float8 AS score
                    FROM c ORDER BY score DESC, at DESC, id DESC LIMIT 15""",
                " or ".join(query.split()),
                *words,
            )
            assert [(h.call_id, h.position) for h in hits] == [(r[0], r[1]) for r in want], query
            assert [h.score for h in hits] == pytest.approx([r[2] for r in want])
    finally:
        await conn.close()

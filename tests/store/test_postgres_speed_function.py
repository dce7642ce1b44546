"""PostgreSQL's search by caller through each connection's function (no timing here).

Each pool connection creates a temporary function holding the search's statement, planned
once (generic) instead of at every search: a search of up to ``SLOTS`` distinct words calls
it, with the statement's hits, order and scores; a longer one, a read-only store and a
connection that lost the function send the statement itself. Speed is measured by
benchmarks/recall.py.
"""

from __future__ import annotations

import json
import random

import pytest

from pipecat_summarizer.store.records import ArchivedMessage, SearchHit

asyncpg = pytest.importorskip("asyncpg")

from pipecat_summarizer.store import _postgres_search  # noqa: E402
from pipecat_summarizer.store.postgres import PostgresMemoryStore  # noqa: E402

T0 = 1_700_000_000.0
VOCAB = "hotel train budapest room breakfast dinner ticket museum river bridge".split()


def _archive(users=("alice", "bob"), per_user=300) -> list[ArchivedMessage]:
    rng = random.Random(9)
    out = []
    for user in users:
        for i in range(per_user):
            text = " ".join(rng.choice(VOCAB) for _ in range(rng.randint(1, 8))) + f" n{i % 7}"
            out.append(
                ArchivedMessage(
                    call_id=f"{user}-{i // 40}",
                    position=i % 40,
                    role="user",
                    content=text,
                    message_json=json.dumps({"role": "user", "content": text}),
                    turn=0,
                    at=T0 + i // 3,  # equal times: the id breaks the tie
                    user_id=user,
                )
            )
    return out


async def _searched(store, query: str, limit: int) -> tuple[list, str]:
    """The hits of a search by caller, and the statement it sent."""
    sent: list[str] = []
    fetch = store._fetch

    async def capture(sql, *values):
        sent.append(sql)
        return await fetch(sql, *values)

    store._fetch = capture
    try:
        hits = await store.search(query, user_id="alice", any_word=True, limit=limit)
    finally:
        store._fetch = fetch
    return hits, sent[-1]


async def _statements_hits(store, query: str, limit: int) -> list[SearchHit]:
    statement = _postgres_search.search_sql(
        "english", query, user_id="alice", call_id=None, limit=limit, any_word=True
    )
    assert statement is not None and "message_words" in statement[0]
    return [SearchHit(*tuple(r)[:9]) for r in await store._fetch(*statement)]


async def test_a_callers_search_calls_the_connections_function_with_the_statements_hits(
    pg_server, monkeypatch
):
    monkeypatch.setattr(_postgres_search, "KEEP_MATCHES", 150)  # some words dropped
    dsn = pg_server.create_database(f"function_{random.randrange(10**9)}")
    rng = random.Random(4)
    queries = [" ".join(rng.sample(VOCAB, k)) for k in (1, 2, 3, 5, 8, 8, 3)]
    queries.append(" ".join(VOCAB[:8]) + " n3")  # 9 distinct words: past SLOTS
    store = PostgresMemoryStore(dsn, min_size=2, max_size=2)
    try:
        await store.write(_archive())
        got = [await _searched(store, q, 25) for q in queries]
        for _ in range(3):  # counts now cached: the same hits
            again = [
                await store.search(q, user_id="alice", any_word=True, limit=25) for q in queries
            ]
        want = [await _statements_hits(store, q, 25) for q in queries]
        config = await store._fetch(
            "SELECT proconfig FROM pg_proc WHERE proname = 'pcs_caller_search' "
            "AND pronamespace = pg_my_temp_schema()"
        )
    finally:
        await store.close()
    for query, (hits, sql), expected, later in zip(queries, got, want, again, strict=True):
        assert hits == expected, query
        assert later == hits, query
        calls = "pcs_caller_search" in sql
        assert calls == (len(query.split()) <= _postgres_search.SLOTS), (query, sql[:80])
    assert len(want[0]) == 25
    # planned once per connection, whatever the session's setting for other statements
    assert [tuple(r) for r in config] == [(["plan_cache_mode=force_generic_plan"],)]


async def test_without_the_function_a_search_sends_its_statement(pg_server):
    dsn = pg_server.create_database(f"nofunction_{random.randrange(10**9)}")
    writer = PostgresMemoryStore(dsn, min_size=1, max_size=1)
    try:
        await writer.write(_archive(per_user=120))
        before, sql = await _searched(writer, "hotel river bridge", 10)
        assert "pcs_caller_search" in sql
        await writer._fetch("DISCARD TEMP")  # a connection that lost it (a pooler's reset)
        after, sql = await _searched(writer, "hotel river bridge", 10)
        assert "message_words" in sql
    finally:
        await writer.close()
    reader = PostgresMemoryStore(dsn, read_only=True)  # creates nothing, not even that
    try:
        read, sql = await _searched(reader, "hotel river bridge", 10)
        assert reader._functions == set() and "message_words" in sql
    finally:
        await reader.close()
    assert len(before) == 10 and after == before and read == before

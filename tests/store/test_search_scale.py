"""What keeps a search within the turn's budget on a large archive, asserted on plans and on
the statements sent, never on times (benchmarks/recall.py measures those): SQLite's FTS5
reads only the caller's rowid range and ranks a bounded window; a new PostgreSQL
connection has run a turn's statements before the first turn needs them."""

from __future__ import annotations

import json
import os
import random
import sqlite3

import pytest

from pipecat_summarizer.store import PostgresMemoryStore, SQLiteMemoryStore
from pipecat_summarizer.store import _sqlite_search as sqlite_search
from pipecat_summarizer.store.records import ArchivedMessage

pytest.importorskip("asyncpg")


def _archive(users=("alice", "bob"), per_user=400) -> list[ArchivedMessage]:
    words = "hotel train budapest room breakfast dinner ticket museum river bridge".split()
    out = []
    for user in users:
        for i in range(per_user):
            text = f"The {words[i % 10]} and the {words[(i * 7) % 10]}, note {i}."
            out.append(
                ArchivedMessage(
                    call_id=f"{user}-{i // 40}",
                    position=i % 40,
                    role="user",
                    content=text,
                    message_json=json.dumps({"role": "user", "content": text}),
                    turn=0,
                    at=1_700_000_000 + i,
                    user_id=user,
                )
            )
    return out


async def test_sqlite_search_reads_the_callers_rowid_range_of_the_index(tmp_path, monkeypatch):
    # every statement of an any-word search on the full-text index is a MATCH with both
    # rowid bounds handed to FTS5 ("M...><"): the caller's range only, never the whole
    # index; the window's edge comes from the index in rowid order (no sort), and the
    # messages are read by primary key for the best rows only
    monkeypatch.setattr(sqlite_search, "RANK_MATCHES", 50)  # the windowed path
    path = tmp_path / "m.db"
    store = SQLiteMemoryStore(path)
    try:
        await store.write(_archive())
        assert len(await store.search("hotel budapest", user_id="alice", any_word=True)) == 10
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    sent: list[str] = []
    conn.set_trace_callback(sent.append)
    try:
        hits = sqlite_search.find(conn, {}, ["hotel", "budapest"], "alice", None, 10, True)
        conn.set_trace_callback(None)
        assert len(hits) == 10 and {h[-1] for h in hits} == {"alice"}
        plans = {}
        for sql in sent:
            if "messages_fts MATCH" in sql:
                plans[sql] = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql)]
    finally:
        conn.close()
    assert len(plans) >= 3  # the counts, the window's edge, the ranking
    for sql, plan in plans.items():
        fts = [p for p in plan if "messages_fts VIRTUAL TABLE" in p]
        assert fts and all(p.endswith("><") and ":M" in p for p in fts), (sql, plan)
        # the only other table read is messages, by its primary key
        assert not any(p == "SCAN m" or p.startswith("SCAN m ") for p in plan), (sql, plan)
    edge = [plan for sql, plan in plans.items() if "OFFSET" in sql]
    assert edge and not any("TEMP B-TREE" in p for p in edge[0])  # rowid order from FTS5


async def test_a_new_postgres_connection_sends_a_turns_statements_alone(pg_server):
    # the first search, tombstone read and batched read on a connection used to bring
    # asyncpg's type introspection and the server's first catalog reads into the turn
    # (10-30 ms): the pool's connections run them when they open, so the turn sends
    # its own three statements and nothing else
    dsn = pg_server.create_database(f"scale_{os.getpid()}_{random.randrange(10**9)}")
    store = PostgresMemoryStore(dsn, min_size=1, max_size=1)
    sent: list[str] = []
    try:
        await store.write(_archive(per_user=50))
        async with store._pool.acquire() as conn:
            conn.add_query_logger(lambda record: sent.append(record.query))
        hits = await store.search("hotel bridge", user_id="bob", any_word=True, limit=5)
        await store.forgotten_at("bob")
        replies = await store.messages_at([(h.call_id, h.position + 1) for h in hits])
    finally:
        await store.close()
    assert len(hits) == 5 and any(r is not None for r in replies)
    assert len(sent) == 3, sent

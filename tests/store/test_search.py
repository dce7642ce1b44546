"""Search inside the caller's scope (schema v2) and the batched read of archived messages.

The caller (or, for a call without one, the call) is part of the full-text index on both
backends, so a caller's search ranks only their own messages; a v1 database migrates when it
opens. ``messages_at`` reads several messages in one query. Speed is measured by
benchmarks/recall.py, never asserted here.
"""

from __future__ import annotations

import json
import random
import sqlite3
import time

import pytest

from pipecat_summarizer._recall.step import RecallStep
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import MemoryStore, SQLiteMemoryStore, open_store
from pipecat_summarizer.store import _sqlite_schema as sqlite_schema
from pipecat_summarizer.store import _sqlite_search as sqlite_search
from pipecat_summarizer.store._rows import message_row
from pipecat_summarizer.store.base import SCHEMA_VERSION
from pipecat_summarizer.store.records import ArchivedMessage

T0 = 1_700_000_000.0


def _msg(call, pos, text, *, user="alice", role="user", at=None):
    return ArchivedMessage(
        call_id=call,
        position=pos,
        role=role,
        content=text,
        message_json=json.dumps({"role": role, "content": text}),
        compaction=1,
        turn=pos // 2,
        at=T0 + pos if at is None else at,
        user_id=user,
    )


def _keys(hits):
    return [(h.call_id, h.position) for h in hits]


def _two_callers(bob_messages: int = 400) -> list[ArchivedMessage]:
    """Alice's few messages first, then many newer ones of Bob that share her words."""
    alice = [
        _msg("a1", 0, "Our hotel is the Grand Budapest, room 12."),
        _msg("a1", 1, "Breakfast is served at seven.", role="assistant"),
        _msg("a1", 2, "The hotel bar closes at midnight."),
        _msg("a2", 0, "Remind me about the Budapest train on Friday."),
        _msg("a2", 1, "The train leaves at nine.", role="assistant"),
    ]
    bob = [
        _msg(f"b{i // 50}", i % 50, f"Hotel Budapest booking number {i} for the train.", user="bob")
        for i in range(bob_messages)
    ]
    anonymous = [_msg("anon", i, f"A hotel in Budapest, note {i}.", user=None) for i in range(3)]
    return alice + bob + anonymous


# -- the caller's scope --------------------------------------------------------------------


async def test_a_caller_never_sees_another_callers_messages(store_target, monkeypatch):
    # the window of latest matches is small here, and Bob's matches are all newer than
    # Alice's: ranking must still be over Alice's own matches only
    from pipecat_summarizer.store import _postgres_search

    monkeypatch.setattr(sqlite_search, "RANK_MATCHES", 50)
    monkeypatch.setattr(_postgres_search, "RANK_MATCHES", 50)
    store = open_store(store_target)
    try:
        await store.write(_two_callers())
        alice = await store.search("hotel Budapest train", user_id="alice", any_word=True)
        alice_all = await store.search("hotel budapest", user_id="alice")
        bob = await store.search("hotel", user_id="bob", any_word=True, limit=30)
        anon = await store.search("hotel budapest", call_id="anon", any_word=True)
        alice_call = await store.search("hotel train", call_id="a2", any_word=True)
        nobody = await store.search("hotel", user_id="carol", any_word=True)
        everyone = await store.search("hotel", any_word=True, limit=500)
    finally:
        await store.close()
    assert {h.user_id for h in alice} == {"alice"}
    assert set(_keys(alice)) == {("a1", 0), ("a1", 2), ("a2", 0), ("a2", 1)}
    assert _keys(alice_all) == [("a1", 0)]
    assert len(bob) == 30 and {h.user_id for h in bob} == {"bob"}
    assert {h.call_id for h in anon} == {"anon"} and len(anon) == 3
    assert set(_keys(alice_call)) == {("a2", 0), ("a2", 1)}
    assert nobody == []
    assert {h.user_id for h in everyone} == {"alice", "bob", None}
    assert len(everyone) == 2 + 400 + 3


async def test_sqlite_callers_sharing_a_scope_stay_apart(tmp_path, monkeypatch):
    # two callers whose scope hashes collide share one rowid range of the index: the exact
    # caller filter still applies, and the caller with few matches still gets hers although
    # the latest matches in the range are all Bob's (the word counts are the range's: only
    # the rarest word, "train", is ranked, as on v1 where they were the whole index's)
    monkeypatch.setattr(sqlite_schema, "scope_of", lambda user_id, call_id: 7)
    monkeypatch.setattr(sqlite_search, "RANK_MATCHES", 50)
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await store.write(_two_callers())
        alice = await store.search("hotel Budapest train", user_id="alice", any_word=True)
        bob = await store.search("hotel", user_id="bob", any_word=True, limit=30)
    finally:
        await store.close()
    assert set(_keys(alice)) == {("a2", 0), ("a2", 1)}
    assert len(bob) == 30 and {h.user_id for h in bob} == {"bob"}


async def test_sqlite_ranking_is_bm25_over_the_whole_index_filtered_to_the_caller(
    tmp_path, monkeypatch
):
    # the scoped search ranks exactly as BM25 over every message with the caller filter
    # outside the index did (same idf, same document lengths): same hits, same order
    monkeypatch.setattr(sqlite_search, "RANK_MATCHES", 10**9)  # every word ranked
    rng = random.Random(11)
    vocab = "hotel train budapest room breakfast dinner ticket museum river bridge".split()
    records = []
    for user in ("alice", "bob", "carol"):
        for i in range(300):
            text = " ".join(rng.choice(vocab) for _ in range(rng.randint(1, 12)))
            records.append(_msg(f"{user}-{i // 40}", i % 40, text, user=user, at=T0 + i))
    path = tmp_path / "m.db"
    store = SQLiteMemoryStore(path)
    try:
        await store.write(records)
        queries = [" ".join(rng.sample(vocab, rng.randint(1, 4))) for _ in range(25)]
        got = [await store.search(q, user_id="alice", any_word=True, limit=15) for q in queries]
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    try:
        for query, hits in zip(queries, got, strict=True):
            match = " OR ".join(f'"{w}"' for w in query.split())
            want = conn.execute(
                "SELECT m.call_id, m.position, -bm25(messages_fts) FROM messages_fts "
                f"JOIN messages m ON m.id = (messages_fts.rowid & {sqlite_schema.ID_MASK}) "
                "WHERE messages_fts MATCH ? AND m.user_id = 'alice' "
                "ORDER BY bm25(messages_fts), messages_fts.rowid DESC LIMIT 15",
                (match,),
            ).fetchall()
            assert _keys(hits) == [(c, p) for c, p, _ in want], query
            assert [h.score for h in hits] == pytest.approx([s for *_, s in want])
    finally:
        conn.close()


# -- migration v1 -> v2 --------------------------------------------------------------------

_V1_INSERT = """INSERT INTO messages(call_id, user_id, position, turn, at, role, content,
    message_json, tool_call_ids, removed_by, compaction, evicted_turn)
    VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"""


def _make_v1_sqlite(path) -> None:
    """A database as the v1 code left it: its schema, and messages written by its insert."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("CREATE TABLE schema_version(version INTEGER NOT NULL)")
        for statement in sqlite_schema.MIGRATIONS[1]:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version VALUES (1)")
        for m in _two_callers(bob_messages=60):
            conn.execute(_V1_INSERT, message_row(m))
    finally:
        conn.close()


async def test_a_v1_sqlite_database_is_migrated_on_open_and_finds_its_messages(tmp_path):
    path = tmp_path / "v1.db"
    _make_v1_sqlite(path)
    store = SQLiteMemoryStore(path)
    try:
        alice = await store.search("hotel Budapest train", user_id="alice", any_word=True)
        anon = await store.search("hotel", call_id="anon", any_word=True)
        await store.write([_msg("a3", 0, "A new hotel after the upgrade.")])
        latest = await store.search("upgrade", user_id="alice")
        forgotten = await store.forget("alice")
        after = await store.search("hotel", user_id="alice", any_word=True)
        bob = await store.search("hotel", user_id="bob", any_word=True, limit=100)
    finally:
        await store.close()
    assert set(_keys(alice)) == {("a1", 0), ("a1", 2), ("a2", 0), ("a2", 1)}
    assert len(anon) == 3
    assert _keys(latest) == [("a3", 0)]
    assert forgotten >= 6 and after == []
    assert len(bob) == 60
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone() == (
            SCHEMA_VERSION,
        )
        # the index agrees with the messages it was rebuilt from (raises if not)
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
    finally:
        conn.close()


async def test_a_v1_postgres_database_is_migrated_on_open_and_finds_its_messages(pg_server):
    import asyncpg

    from pipecat_summarizer.store._postgres_schema import migrations as _migrations
    from pipecat_summarizer.store._postgres_writes import _INSERT_MESSAGE
    from pipecat_summarizer.store.postgres import PostgresMemoryStore

    dsn = pg_server.create_database(f"v1_{int(time.time() * 1000)}")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE TABLE schema_version(version INTEGER NOT NULL)")
        for statement in _migrations("english")[1]:
            await conn.execute(statement)
        await conn.execute("INSERT INTO schema_version VALUES (1)")
        await conn.executemany(_INSERT_MESSAGE, [message_row(m) for m in _two_callers(60)])
    finally:
        await conn.close()
    store = PostgresMemoryStore(dsn)
    try:
        alice = await store.search("hotel Budapest train", user_id="alice", any_word=True)
        anon = await store.search("hotel", call_id="anon", any_word=True)
        bob = await store.search("hotel", user_id="bob", any_word=True, limit=100)
    finally:
        await store.close()
    assert set(_keys(alice)) == {("a1", 0), ("a1", 2), ("a2", 0), ("a2", 1)}
    assert len(anon) == 3 and len(bob) == 60
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT MAX(version) FROM schema_version") == SCHEMA_VERSION
        indexes = {r[0] for r in await conn.fetch("SELECT indexname FROM pg_indexes")}
        assert "messages_scoped" in indexes and "messages_tsv" not in indexes
    finally:
        await conn.close()


# -- the batched read ----------------------------------------------------------------------


async def test_messages_at_equals_the_per_position_reads(store_target):
    store = open_store(store_target)
    try:
        await store.write(_two_callers(bob_messages=150))  # b0..b2: 50 each
        keys = [("a1", 1), ("b1", 7), ("a1", 99), ("nope", 0), ("a1", 1), ("anon", 2)]
        keys += [(f"b{random.Random(i).randint(0, 2)}", i % 50) for i in range(40)]
        one_by_one = [await store.message(c, p) for c, p in keys]
        batched = await store.messages_at(keys)
        default = await MemoryStore.messages_at(store, keys)  # the base class's loop
        empty = await store.messages_at([])
    finally:
        await store.close()
    assert batched == one_by_one == default
    assert batched[2] is None and batched[3] is None and batched[0] == batched[4]
    assert sum(m is not None for m in batched) == len(keys) - 2
    assert empty == []


async def test_the_recall_step_reads_the_replies_in_one_query(tmp_path):
    class Counting(SQLiteMemoryStore):
        singles = 0
        batches = 0

        async def message(self, call_id, position):
            Counting.singles += 1
            return await super().message(call_id, position)

        async def messages_at(self, keys):
            Counting.batches += 1
            return await super().messages_at(keys)

    store = Counting(tmp_path / "m.db")
    try:
        await store.write(_two_callers(bob_messages=0))
        step = RecallStep(store, RecallParams(latency_budget_s=30.0), call_id="a9", user_id="alice")
        (hits, replies), how = await step.hits_for_turn("Which hotel and which train?")
    finally:
        await store.close()
    assert how == "on_time" and hits
    assert replies[("a1", 0)] == ("assistant", "Breakfast is served at seven.")
    assert replies[("a2", 0)] == ("assistant", "The train leaves at nine.")
    # never one read per hit: the replies come with the search's own trip (the store reads
    # them there), or at most one batched read after it
    assert Counting.singles == 0 and Counting.batches <= 1

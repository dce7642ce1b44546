"""PostgreSQL's search by caller ranks its rarest words, as SQLite does (no timing here).

A word in most of the caller's messages is dropped from the ranking while rarer words'
rows fill ``KEEP_MATCHES``; over the words kept, the hits, their order (ties by time then
id) and their scores are a plain query's; a common word alone is still searched; when every
word is common the one rarest over the stretch its latest rows cover is ranked. Speed is
measured by benchmarks/recall.py.
"""

from __future__ import annotations

import json
import random

import pytest

from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.store import _sqlite_search as sqlite_search
from pipecat_summarizer.store.records import ArchivedMessage

asyncpg = pytest.importorskip("asyncpg")

from pipecat_summarizer.store import _postgres_search  # noqa: E402
from pipecat_summarizer.store.postgres import PostgresMemoryStore  # noqa: E402

T0 = 1_700_000_000.0


def _msg(i: int, text: str, user: str = "alice") -> ArchivedMessage:
    return ArchivedMessage(
        call_id=f"{user}-{i // 20}",
        position=i % 20,
        role="user",
        content=text,
        message_json=json.dumps({"role": "user", "content": text}),
        turn=0,
        at=T0 + i // 3,  # equal times: the id breaks the tie
        user_id=user,
    )


def _archive() -> list[ArchivedMessage]:
    """Alice's 120 messages: "card" in the latest 60 (recent, dense), "new" in every third
    (40, spread over all), "parcel" in 10 and "arrive" in 8; Bob's say "arrive" often."""
    rng = random.Random(5)
    out = []
    for i in range(120):
        words = ["we", "talked"]
        if i >= 60:
            words.append("card")
        if i % 3 == 0:
            words.append("new")
        if i % 12 == 5:
            words.append("parcel")
        if i % 15 == 7:
            words += ["arrive"] * rng.randint(1, 3)
        rng.shuffle(words)
        out.append(_msg(i, " ".join(words)))
    out += [_msg(i, "the parcel will arrive soon", user="bob") for i in range(40)]
    return out


async def _reference(conn, kept: list[str], limit: int) -> list[tuple]:
    """The ranking over ``kept`` by a plain query over Alice's rows: words matched plus
    ts_rank_cd, ties by time then id."""
    matched = " + ".join(
        f"(tsv @@ plainto_tsquery('english', ${i + 2}))::int" for i in range(len(kept))
    )
    rows = await conn.fetch(
        f"""SELECT call_id, position,
                ({matched} + ts_rank_cd(tsv, websearch_to_tsquery('english', $1), 32))::float8
            FROM messages WHERE user_id = 'alice' AND tsv @@ websearch_to_tsquery('english', $1)
            ORDER BY 3 DESC, at DESC, id DESC LIMIT {limit}""",
        " or ".join(kept),
        *kept,
    )
    return [tuple(r) for r in rows]


async def test_a_callers_search_ranks_its_rarest_words_as_sqlite_does(
    pg_server, tmp_path, monkeypatch
):
    monkeypatch.setattr(_postgres_search, "KEEP_MATCHES", 20)
    monkeypatch.setattr(sqlite_search, "RANK_MATCHES", 20)
    dsn = pg_server.create_database(f"rarest_{random.randrange(10**9)}")
    records = _archive()
    searches = {
        # arrive (8) and parcel (10) fit in 20 rows; new (40) and card (60) do not
        "new card arrive parcel": ["arrive", "parcel"],
        "card": ["card"],  # a common word alone is still searched
        # both past 20: new's 21 latest rows reach further back than card's
        "card new": ["new"],
        "arrive": ["arrive"],
    }
    store = PostgresMemoryStore(dsn)
    sqlite = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await store.write(records)
        await sqlite.write(records)
        got = {q: await store.search(q, user_id="alice", any_word=True, limit=12) for q in searches}
        lite = {
            q: await sqlite.search(q, user_id="alice", any_word=True, limit=60) for q in searches
        }
    finally:
        await store.close()
        await sqlite.close()
    conn = await asyncpg.connect(dsn)
    try:
        for query, kept in searches.items():
            want = await _reference(conn, kept, 12)
            hits = got[query]
            assert [(h.call_id, h.position) for h in hits] == [r[:2] for r in want], query
            assert [h.score for h in hits] == pytest.approx([r[2] for r in want]), query
            assert {h.user_id for h in hits} == {"alice"}
    finally:
        await conn.close()
    # the same words ranked on both backends: every hit SQLite finds holds a kept word
    for query, kept in searches.items():
        texts = [h.content.split() for h in lite[query]]
        assert texts and all(set(t) & set(kept) for t in texts), query
    assert len(got["new card arrive parcel"]) == 12 and len(lite["new card arrive parcel"]) == 18


async def test_a_message_with_hundreds_of_matched_positions_ranks_on_its_own_row(pg_server):
    # a lexeme holds at most 256 positions: the rank of a total past that was computed on a
    # tsvector of 256 positions, below the message's own ts_rank_cd
    dsn = pg_server.create_database(f"positions_{random.randrange(10**9)}")
    texts = ["hotel " * 200 + "train " * 200, "hotel " * 255 + "train", "hotel train", "train"]
    store = PostgresMemoryStore(dsn)
    try:
        await store.write([_msg(i, t) for i, t in enumerate(texts)])
        hits = await store.search("hotel train", user_id="alice", any_word=True)
    finally:
        await store.close()
    conn = await asyncpg.connect(dsn)
    try:
        want = await _reference(conn, ["hotel", "train"], 10)
    finally:
        await conn.close()
    assert [(h.call_id, h.position) for h in hits] == [r[:2] for r in want]
    assert [h.score for h in hits] == pytest.approx([r[2] for r in want], abs=1e-7)
    assert hits[0].position == 0


async def test_common_words_counts_are_reused_for_a_minute_and_forgotten(pg_server, monkeypatch):
    # counting a common word reads up to KEEP_MATCHES + 1 index rows: its count is kept by
    # the store (as SQLite's are); a rare word is counted again each time (it may be new)
    monkeypatch.setattr(_postgres_search, "KEEP_MATCHES", 20)
    monkeypatch.setattr(_postgres_search, "DF_CACHE_MIN", 15)
    dsn = pg_server.create_database(f"counts_{random.randrange(10**9)}")
    store = PostgresMemoryStore(dsn)
    query = "new card arrive parcel"
    try:
        await store.write(_archive())
        first = await store.search(query, user_id="alice", any_word=True, limit=12)
        cached = dict(store._df)
        statement = _postgres_search.search_sql(
            "english",
            query,
            user_id="alice",
            call_id=None,
            limit=12,
            any_word=True,
            counts=store._df,
        )
        again = await store.search(query, user_id="alice", any_word=True, limit=12)
        await store.write([_msg(500, "arrive arrive arrive parcel")])
        later = await store.search(query, user_id="alice", any_word=True, limit=12)
        await store.search("parcel", user_id="bob", any_word=True)
        await store.forget("alice")
        left = set(store._df)
    finally:
        await store.close()
    assert set(cached) == {("alice", "card"), ("alice", "new")}
    # counted up to KEEP_MATCHES + 1: arrive (8) and parcel (10) are counted each time
    assert statement is not None and statement[4] == [None, 21, 21, None]  # sorted words
    assert again == first
    assert (later[0].call_id, later[0].position) == ("alice-25", 0)  # the new message
    assert left == {("bob", "parcel")}

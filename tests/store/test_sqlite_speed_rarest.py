"""The SQLite any-word search's choice of words (``rarest``) counts a word's matches only to
``RANK_MATCHES + 1``, and when every word has more, takes the one whose latest matches reach
furthest back: the same words as that rule on every match counted, warm cache or cold; a
common word's count stops at the cap; a forget drops the caller's cached words. Speed is
measured by benchmarks/recall.py, never asserted here."""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3

import pytest

from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.store import _sqlite_schema as schema
from pipecat_summarizer.store import _sqlite_search as sqlite_search
from pipecat_summarizer.store.records import ArchivedMessage

# word i is in about 1 message in 2 ** (i / 2): from every message down to a handful
WORDS = [f"w{i}" for i in range(16)]


def _text(rng: random.Random) -> str:
    return " ".join(w for i, w in enumerate(WORDS) if rng.random() < 0.5 ** (i / 2)) or "none"


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("rarest") / "r.db"
    rng = random.Random(3)
    records = [
        ArchivedMessage(
            call_id=f"c{i // 50}",
            position=i % 50,
            role="user",
            content=(text := _text(rng)),
            message_json=json.dumps({"role": "user", "content": text}),
            turn=i % 50,
            at=1_700_000_000 + i,
            user_id="al" if i % 3 else "bo",
        )
        for i in range(1200)
    ]

    async def write() -> None:
        store = SQLiteMemoryStore(path)
        try:
            await store.write(records)
        finally:
            await store.close()

    asyncio.run(write())
    return str(path)


def _every_match_counted(conn, words, bounds) -> list[str]:
    """The choice from every word's matches counted in full; when every word has more than
    RANK_MATCHES, the one whose latest RANK_MATCHES + 1 matches reach furthest back."""
    r = sqlite_search.RANK_MATCHES
    counted, reach = [], {}
    for w in dict.fromkeys(words):
        rowids = [
            row[0]
            for row in conn.execute(
                "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? "
                "AND rowid BETWEEN ? AND ? ORDER BY rowid DESC",
                (f'"{w}"', *bounds),
            )
        ]
        if 0 < len(rowids) <= r:
            counted.append((len(rowids), w))
        elif rowids:
            reach[w] = rowids[r]
    if not counted:
        return [min(reach, key=lambda w: (reach[w], w))] if reach else []
    kept, total = [], 0
    for n, w in sorted(counted):
        if kept and total + n > r:
            break
        kept.append(w)
        total += n
    return kept


@pytest.mark.parametrize("rank_matches", [3, 20, 60, 3000])
def test_the_words_chosen_are_those_of_counting_every_match(db, monkeypatch, rank_matches):
    monkeypatch.setattr(sqlite_search, "RANK_MATCHES", rank_matches)
    monkeypatch.setattr(sqlite_search, "DF_CACHE_MIN", 5)  # counts and edges cached
    conn = sqlite3.connect(db)
    rng = random.Random(rank_matches)
    try:
        for user in ("al", "bo"):
            bounds = schema.scope_range(schema.scope_of(user, ""))
            counts: sqlite_search.WordCounts = {}
            for _ in range(60):  # the cache fills as the queries go: warm and cold
                words = rng.sample(WORDS + ["absent"], rng.randint(1, 5))
                want = _every_match_counted(conn, words, bounds)
                assert sqlite_search.rarest(conn, counts, words, bounds, 0) == want, words
                assert sqlite_search.rarest(conn, {}, words, bounds, 0) == want, words
    finally:
        conn.close()


def test_a_common_words_matches_are_counted_only_to_the_cap(db, monkeypatch):
    monkeypatch.setattr(sqlite_search, "RANK_MATCHES", 20)
    monkeypatch.setattr(sqlite_search, "DF_CACHE_MIN", 5)
    conn = sqlite3.connect(db)
    try:
        bounds = schema.scope_range(schema.scope_of("al", ""))
        counts: sqlite_search.WordCounts = {}
        assert sqlite_search.rarest(conn, counts, ["w0", "w13"], bounds, 0) == ["w13"]
        # w0 is in all 800 of al's messages: counted to 21, no edge read (w13 is rarer)
        assert counts[(bounds, "w0")][:2] == (21, 0)
        # every word common: the edges decide (w4, in ~1 message in 4, reaches back furthest)
        assert sqlite_search.rarest(conn, counts, ["w0", "w4"], bounds, 0) == ["w4"]
        (n0, edge0, *_), (n4, edge4, *_) = counts[(bounds, "w0")], counts[(bounds, "w4")]
        assert n0 == n4 == 21 and 0 < edge4 < edge0
    finally:
        conn.close()


async def test_a_forget_drops_the_callers_cached_words(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_search, "DF_CACHE_MIN", 1)
    store = SQLiteMemoryStore(tmp_path / "f.db")
    try:
        for user in ("al", "bo"):
            await store.write(
                [
                    ArchivedMessage(
                        f"c-{user}", i, "user", "secret garden", "{}", turn=0, at=1.0, user_id=user
                    )
                    for i in range(3)
                ]
            )
            await store.search("secret garden", user_id=user, any_word=True)
        assert {w for _, w in store._df} == {"secret", "garden"} and len(store._df) == 4
        await store.forget("al")
        al = schema.scope_range(schema.scope_of("al", ""))
        assert store._df and all(bounds != al for bounds, _ in store._df)
    finally:
        await store.close()

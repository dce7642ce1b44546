"""The SQLite any-word search's choice of words (``rarest``) counts a word's matches only as
far as the choice needs (to ``RANK_MATCHES``, in full only while no word is below it): the
same words as counting every match, warm cache or cold; common words' counts are kept as floors; a
forget drops the caller's cached words. Speed is measured by benchmarks/recall.py, never
asserted here."""

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
    """The choice as it was made before: every word's matches counted in full."""
    counted = []
    for w in dict.fromkeys(words):
        n = conn.execute(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ? "
            "AND rowid BETWEEN ? AND ?",
            (f'"{w}"', *bounds),
        ).fetchone()[0]
        if n:
            counted.append((n, w))
    kept, total = [], 0
    for n, w in sorted(counted):
        if kept and total + n > sqlite_search.RANK_MATCHES:
            break
        kept.append(w)
        total += n
    return kept


@pytest.mark.parametrize("rank_matches", [3, 20, 60, 3000])
def test_the_words_chosen_are_those_of_counting_every_match(db, monkeypatch, rank_matches):
    monkeypatch.setattr(sqlite_search, "RANK_MATCHES", rank_matches)
    monkeypatch.setattr(sqlite_search, "DF_CACHE_MIN", 5)  # floors and exact counts cached
    conn = sqlite3.connect(db)
    rng = random.Random(rank_matches)
    try:
        for user in ("al", "bo"):
            bounds = schema.scope_range(schema.scope_of(user, ""))
            counts: sqlite_search.WordCounts = {}
            for _ in range(60):  # the cache fills as the queries go: warm and cold
                words = rng.sample(WORDS + ["absent"], rng.randint(1, 5))
                want = _every_match_counted(conn, words, bounds)
                assert sqlite_search.rarest(conn, counts, words, bounds) == want, words
                assert sqlite_search.rarest(conn, {}, words, bounds) == want, words
    finally:
        conn.close()


def test_a_common_words_matches_are_counted_only_to_the_cap(db, monkeypatch):
    monkeypatch.setattr(sqlite_search, "RANK_MATCHES", 20)
    monkeypatch.setattr(sqlite_search, "DF_CACHE_MIN", 5)
    conn = sqlite3.connect(db)
    try:
        bounds = schema.scope_range(schema.scope_of("al", ""))
        counts: sqlite_search.WordCounts = {}
        assert sqlite_search.rarest(conn, counts, ["w0", "w13"], bounds) == ["w13"]
        n, _, exact = counts[(bounds, "w0")]
        assert (n, exact) == (21, False)  # w0 is in all 800 of al's messages: a floor
        # all words common: each is counted in full (to find the rarest), once
        assert sqlite_search.rarest(conn, counts, ["w0", "w4"], bounds) == ["w4"]
        assert counts[(bounds, "w0")][0] == 800 and counts[(bounds, "w0")][2]
        assert counts[(bounds, "w4")][0] > 21 and counts[(bounds, "w4")][2]
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

"""The SQLite search's window: BM25 scores the latest ``RANK_WINDOW`` matches (of an any-word
search's ranked words, chosen by ``RANK_MATCHES``: their matches together; of all the words),
and beside them an any-word search's older messages holding every ranked word. Speed is
measured by benchmarks/recall.py, never asserted here."""

from __future__ import annotations

import json

import pytest

from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.store import _sqlite_search as sqlite_search
from pipecat_summarizer.store.records import ArchivedMessage

T0 = 1_700_000_000.0


def _msg(call: str, pos: int, text: str, user: str | None = "al") -> ArchivedMessage:
    return ArchivedMessage(
        call_id=call,
        position=pos,
        role="user",
        content=text,
        message_json=json.dumps({"role": "user", "content": text}),
        turn=pos,
        at=T0 + pos,
        user_id=user,
    )


# oldest first: "parcel" in 12 messages (the first four shortest: BM25's best), "lisbon" in 3
LINES = [f"parcel {i}" for i in range(4)]
LINES += [f"the parcel went out on a long and winding road number {i}" for i in range(4, 12)]
LINES += ["lisbon hotel one two three four", "lisbon again five six", "lisbon parcel at last"]


@pytest.fixture
async def store(tmp_path):
    s = SQLiteMemoryStore(tmp_path / "w.db")
    await s.write([_msg("c1", i, text) for i, text in enumerate(LINES)])
    yield s
    await s.close()


def _positions(hits) -> list[int]:
    return [h.position for h in hits]


async def test_bm25_scores_only_the_latest_window_of_matches(store, monkeypatch):
    monkeypatch.setattr(sqlite_search, "RANK_WINDOW", 5)
    # 13 "parcel" matches: the latest 5 (positions 8-11 and 14) are ranked; the short old
    # ones, BM25's best over all of them, are outside the window
    hits = await store.search("parcel", user_id="al", any_word=True, limit=3)
    assert set(_positions(hits)) <= {8, 9, 10, 11, 14} and len(hits) == 3
    assert _positions(hits)[0] == 14  # the shortest in the window
    monkeypatch.setattr(sqlite_search, "RANK_WINDOW", 10**9)
    everything = await store.search("parcel", user_id="al", any_word=True, limit=3)
    assert set(_positions(everything)) <= {0, 1, 2, 3}


async def test_a_window_of_exactly_the_matches_ranks_them_all(store, monkeypatch):
    monkeypatch.setattr(sqlite_search, "RANK_WINDOW", 13)  # "parcel": 13 matches, no edge
    hits = await store.search("parcel", user_id="al", any_word=True, limit=4)
    assert set(_positions(hits)) == {0, 1, 2, 3}
    monkeypatch.setattr(sqlite_search, "RANK_WINDOW", 12)  # the oldest one is out
    hits = await store.search("parcel", user_id="al", any_word=True, limit=4)
    assert 0 not in _positions(hits) and set(_positions(hits)) == {1, 2, 3, 14}


async def test_the_words_ranked_follow_rank_matches_not_the_window(store, monkeypatch):
    # "lisbon" (3) and "parcel" (13) together are 16 matches: within RANK_MATCHES both are
    # ranked (the message holding both comes first), though the window is smaller
    monkeypatch.setattr(sqlite_search, "RANK_WINDOW", 4)
    monkeypatch.setattr(sqlite_search, "RANK_MATCHES", 16)
    both = await store.search("lisbon parcel", user_id="al", any_word=True, limit=4)
    assert _positions(both)[0] == 14 and len(both) == 4
    assert set(_positions(both)) <= {11, 12, 13, 14}  # the window: the latest 4 matches
    # below 16 only the rarer word is ranked, and its 3 matches fit the window of 4
    monkeypatch.setattr(sqlite_search, "RANK_MATCHES", 15)
    rare = await store.search("lisbon parcel", user_id="al", any_word=True, limit=4)
    assert set(_positions(rare)) == {12, 13, 14}


async def test_the_window_never_exceeds_rank_matches(store, monkeypatch):
    # a smaller RANK_MATCHES (the words' budget) caps the window too
    monkeypatch.setattr(sqlite_search, "RANK_WINDOW", 10**9)
    monkeypatch.setattr(sqlite_search, "RANK_MATCHES", 5)
    hits = await store.search("parcel", user_id="al", any_word=True, limit=3)
    assert set(_positions(hits)) <= {8, 9, 10, 11, 14}


async def test_a_window_with_too_few_of_the_calls_ranks_all_its_matches(tmp_path, monkeypatch):
    # a call of a caller searches the caller's scope: the caller's newer call fills the
    # window, and the call's own older matches are still found (all of them ranked)
    monkeypatch.setattr(sqlite_search, "RANK_WINDOW", 3)
    s = SQLiteMemoryStore(tmp_path / "s.db")
    try:
        await s.write([_msg("c1", i, f"parcel {i}") for i in range(2)])
        await s.write([_msg("c2", i, f"parcel late {i}") for i in range(6)])
        hits = await s.search("parcel", call_id="c1", any_word=True, limit=2)
    finally:
        await s.close()
    assert sorted(_positions(hits)) == [0, 1] and {h.call_id for h in hits} == {"c1"}


async def test_older_messages_holding_every_ranked_word_are_ranked_beside_the_window(
    tmp_path, monkeypatch
):
    # the window holds the latest matches; an older message holding both ranked words is
    # ranked with them, at the score BM25 gives it over every match
    old = ["lisbon parcel kept for you", "lisbon parcel two", "just lisbon"]
    newer = [f"parcel number {i} left at the door today" for i in range(5)]
    newer += [f"lisbon trip number {i} was lovely in the spring" for i in range(5)]
    others = [f"nothing to see here {i}" for i in range(30)]  # the words' weights
    s = SQLiteMemoryStore(tmp_path / "o.db")
    try:
        await s.write([_msg("c1", i, text) for i, text in enumerate(old + newer + others)])
        monkeypatch.setattr(sqlite_search, "RANK_WINDOW", 4)
        windowed = await s.search("lisbon parcel", user_id="al", any_word=True, limit=4)
        monkeypatch.setattr(sqlite_search, "RANK_WINDOW", 10**9)
        full = await s.search("lisbon parcel", user_id="al", any_word=True, limit=13)
    finally:
        await s.close()
    window = {9, 10, 11, 12}  # the latest 4 matches
    want = [h for h in full if h.position in window | {0, 1}][:4]  # + both words, older
    assert [(h.position, h.score) for h in windowed] == [(h.position, h.score) for h in want]
    assert [h.position for h in windowed][:2] == [1, 0]  # the two holding both words
    assert 2 not in {h.position for h in windowed}  # older, one word only: outside


async def test_an_all_words_search_ranks_the_latest_window_of_its_matches(store, monkeypatch):
    # "parcel" (13 matches) searched for all its words: the latest 5 are ranked when they
    # hold enough, all of them when they do not
    monkeypatch.setattr(sqlite_search, "RANK_WINDOW", 5)
    latest = await store.search("parcel", user_id="al", limit=3)
    assert set(_positions(latest)) <= {8, 9, 10, 11, 14} and _positions(latest)[0] == 14
    everyone = await store.search("parcel", user_id="al", limit=8)
    assert set(_positions(everyone)) >= {0, 1, 2, 3}  # the window held 5 < 8: all ranked
    monkeypatch.setattr(sqlite_search, "RANK_WINDOW", 10**9)
    assert set(_positions(await store.search("parcel", user_id="al", limit=3))) <= {0, 1, 2, 3}

"""Recall's search on SQLite reads the first hits' replies (the messages that followed them)
in the same trip to the store's thread: the same hits and replies as the search and the
batched read (``messages_at``) after it, one trip instead of two. Speed is measured by
benchmarks/recall.py, never asserted here."""

from __future__ import annotations

import json
import random

import pytest

from pipecat_summarizer._recall.step import RecallStep
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.store.records import ArchivedMessage

T0 = 1_700_000_000.0
WORDS = "hotel train lisbon parcel doctor refund ticket garden piano exam".split()


def _msg(call: str, pos: int, text: str, user: str | None) -> ArchivedMessage:
    role = "user" if pos % 2 == 0 else "assistant"
    return ArchivedMessage(
        call_id=call,
        position=pos,
        role=role,
        content=text,
        message_json=json.dumps({"role": role, "content": text}),
        turn=pos // 2,
        at=T0 + pos,
        user_id=user,
    )


@pytest.fixture(scope="module")
def archive() -> list[ArchivedMessage]:
    rng = random.Random(5)
    out = []
    for user in ("al", "bo", None):
        for c in range(4):
            call = f"{user}-{c}"
            for p in range(rng.randint(3, 9)):  # a call's last message has no reply
                out.append(_msg(call, p, " ".join(rng.sample(WORDS, 3)) + f" {p}", user))
    return out


async def test_the_replies_read_with_the_search_equal_the_batched_read(archive, tmp_path):
    store = SQLiteMemoryStore(tmp_path / "r.db")
    rng = random.Random(7)
    try:
        await store.write(archive)
        for _ in range(20):
            query = " ".join(rng.sample(WORDS, rng.randint(1, 3)))
            scope = rng.choice([{"user_id": "al"}, {"call_id": "None-1"}, {}])
            first = rng.randint(0, 12)
            plain = await store.search(query, any_word=True, limit=10, **scope)
            both = await store.search(query, any_word=True, limit=10, _replies=first, **scope)
            assert list(both) == plain
            read = await store.messages_at([(h.call_id, h.position + 1) for h in plain[:first]])
            want = {
                (h.call_id, h.position): (m.role, m.content)
                for h, m in zip(plain, read, strict=False)
                if m is not None
            }
            assert both.replies == want if first else not hasattr(both, "replies")
        # nothing to search for, and a search of no hit: no replies, no error
        assert (await store.search("?!", _replies=5)).replies == {}
        assert (await store.search("zebra", any_word=True, _replies=5)).replies == {}
    finally:
        await store.close()


async def test_the_recall_step_reads_hits_and_replies_in_one_trip(archive, tmp_path):
    class Counting(SQLiteMemoryStore):
        trips = 0
        batched: list[int] = []

        async def _run(self, fn, *, read=False):
            Counting.trips += 1
            return await super()._run(fn, read=read)

        async def messages_at(self, keys):
            Counting.batched.append(len(keys))
            return await super().messages_at(keys)

    store = Counting(tmp_path / "t.db")
    params = RecallParams(latency_budget_s=30.0)
    question = "Which hotel and which piano exam?"
    try:
        await store.write(archive)
        turns = []
        # the store's own search; then behind a wrapper whose search reads no replies
        for archive_ in (store, _SearchOnly(store)):
            step = RecallStep(archive_, params, call_id="al-9", user_id="al")
            before, Counting.batched = Counting.trips, []
            found, how = await step.hits_for_turn(question)
            turns.append((found, Counting.trips - before, Counting.batched))
            assert how == "on_time"
    finally:
        await store.close()
    (hits, replies), trips, batched = turns[0]
    (old_hits, old_replies), old_trips, old_batched = turns[1]
    assert hits and replies and old_batched != [0]
    # one trip less (the other: the forget tombstone's read), nothing left to read after
    assert trips == old_trips - 1 and not any(batched)
    assert [(h.call_id, h.position) for h in hits] == [(h.call_id, h.position) for h in old_hits]
    assert replies == old_replies


class _SearchOnly:
    """The store behind a wrapper whose ``search`` reads no replies (the old path)."""

    def __init__(self, store: SQLiteMemoryStore):
        self.store = store

    async def search(self, query, **kwargs):
        return await self.store.search(query, **kwargs)

    def __getattr__(self, name):
        return getattr(self.store, name)

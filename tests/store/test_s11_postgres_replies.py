"""Recall's search on PostgreSQL reads the first hits' replies (the messages that followed
them) with the search, as on SQLite (tests/store/test_sqlite_speed_replies.py): a search by
caller in its own statement, another with ``messages_at`` after it; the same hits and
replies as the search and the batched read after it, one statement a turn instead of two.
Speed is measured by benchmarks/recall.py, never asserted here."""

from __future__ import annotations

import random

import pytest

from pipecat_summarizer._recall.step import RecallStep
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import PostgresMemoryStore
from pipecat_summarizer.store._postgres_pool import MESSAGES_AT
from pipecat_summarizer.store.records import ArchivedMessage
from tests.store.test_sqlite_speed_replies import WORDS, _msg, _SearchOnly

#: More distinct words than the search function takes (``SLOTS``): the statement itself.
MANY = " ".join(WORDS)


@pytest.fixture(scope="module")
def archive() -> list[ArchivedMessage]:
    """Two callers' calls and some without a caller (a call's last message has no reply)."""
    rng = random.Random(5)
    return [
        _msg(f"{user}-{c}", p, " ".join(rng.sample(WORDS, 3)) + f" {p}", user)
        for user in ("al", "bo", None)
        for c in range(4)
        for p in range(rng.randint(3, 9))
    ]


def _dsn(pg_server) -> str:
    return pg_server.create_database(f"s11_replies_{random.randrange(10**9)}")


async def test_the_replies_read_with_the_search_equal_the_batched_read(archive, pg_server):
    store = PostgresMemoryStore(_dsn(pg_server))
    rng = random.Random(7)
    try:
        await store.write(archive)
        cases = [
            (" ".join(rng.sample(WORDS, rng.randint(1, 3))), rng.randint(0, 12)) for _ in range(20)
        ]
        for query, first in [*cases, (MANY, 4), (MANY, 12)]:
            for scope in ({"user_id": "al"}, {"call_id": "None-1"}, {}):
                plain = await store.search(query, any_word=True, limit=10, **scope)
                both = await store.search(query, any_word=True, limit=10, _replies=first, **scope)
                assert list(both) == plain
                keys = [(h.call_id, h.position + 1) for h in plain[:first]]
                read = await store.messages_at(keys)
                want = {
                    (h.call_id, h.position): (m.role, m.content)
                    for h, m in zip(plain, read, strict=False)
                    if m is not None
                }
                assert both.replies == want if first else not hasattr(both, "replies")
        # nothing to search for, and a search of no hit: no replies, no error
        assert (await store.search("?!", _replies=5)).replies == {}
        assert (await store.search("zebra", user_id="al", any_word=True, _replies=5)).replies == {}
    finally:
        await store.close()


async def test_the_recall_step_reads_hits_and_replies_in_one_statement(archive, pg_server):
    class Counting(PostgresMemoryStore):
        batched: list[str] = []

        async def _fetch(self, sql, *args):
            if sql == MESSAGES_AT:
                Counting.batched.append(sql)
            return await super()._fetch(sql, *args)

    store = Counting(_dsn(pg_server))
    params = RecallParams(latency_budget_s=30.0)
    question = "Which hotel and which piano exam?"
    try:
        await store.write(archive)
        turns = []
        # the store's own search; then behind a wrapper whose search reads no replies
        for archive_ in (store, _SearchOnly(store)):
            step = RecallStep(archive_, params, call_id="al-9", user_id="al")
            Counting.batched = []
            found, how = await step.hits_for_turn(question)
            turns.append((found, Counting.batched))
            assert how == "on_time"
    finally:
        await store.close()
    (hits, replies), batched = turns[0]
    (old_hits, old_replies), old_batched = turns[1]
    assert hits and replies and old_batched
    assert not batched  # read with the search: no batched read after it
    assert [(h.call_id, h.position) for h in hits] == [(h.call_id, h.position) for h in old_hits]
    assert replies == old_replies

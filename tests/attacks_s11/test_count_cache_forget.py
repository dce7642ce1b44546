"""A forgotten caller's word counts, cached by another store object (another worker process
on the same database): the forget runs through one store, the caller comes back,
and the other store's search of their new words must find what a fresh store finds (a count
of the forgotten archive must not decide which words are searched)."""

from __future__ import annotations

import json
import time

from pipecat_summarizer.store import PostgresMemoryStore, open_store
from pipecat_summarizer.store._postgres_search import KEEP_MATCHES
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord


def _msg(call: str, i: int, text: str, at: float) -> ArchivedMessage:
    return ArchivedMessage(
        call_id=call,
        position=i,
        role="user",
        content=text,
        message_json=json.dumps({"role": "user", "content": text}),
        turn=i // 2,
        at=at,
        user_id="al",
    )


async def test_another_workers_cached_count_of_a_forgotten_caller(store_target):
    # on both backends (SQLite: two store objects on one file)
    worker, admin, fresh = (open_store(store_target) for _ in range(3))
    old = time.time() - 86400
    try:
        # al said "card" in more messages than KEEP_MATCHES: the worker counts and keeps it
        await worker.write(
            [
                _msg(f"old-{i // 500}", i % 500, f"card {i}", old + i)
                for i in range(KEEP_MATCHES + 50)
            ]
        )
        assert await worker.search("card zebra", user_id="al", any_word=True, limit=5)
        await admin.forget("al")
        # al comes back (a new call after the forget) and says both words
        back = time.time() + 1
        await admin.write(
            [
                CallRecord("new", user_id="al", started_at=back),
                _msg("new", 0, "my card was declined", back),
                _msg("new", 1, "zebra print card holder", back + 1),
                _msg("new", 2, "the card again", back + 2),
            ]
        )
        want = await fresh.search("card zebra", user_id="al", any_word=True, limit=10)
        got = await worker.search("card zebra", user_id="al", any_word=True, limit=10)
    finally:
        for store in (worker, admin, fresh):
            await store.close()
    assert sorted(h.position for h in want) == [0, 1, 2]
    assert sorted(h.position for h in got) == sorted(h.position for h in want)


async def test_a_purge_drops_the_counts_of_what_it_deleted(pg_server):
    # the same store: al's old "card" messages (more than KEEP_MATCHES) are counted, then
    # purged; al's new "card" messages must be found (as on SQLite, whose purge drops its
    # counts)
    dsn = pg_server.create_database("s11_attack_count_purge")
    store = PostgresMemoryStore(dsn)
    old = time.time() - 90 * 86400
    try:
        await store.write(
            [
                _msg(f"old-{i // 500}", i % 500, f"card {i}", old + i)
                for i in range(KEEP_MATCHES + 50)
            ]
        )
        assert await store.search("card zebra", user_id="al", any_word=True, limit=5)
        await store.purge_older_than(30)
        now = time.time()
        await store.write(
            [
                _msg("new", 0, "my card was declined", now),
                _msg("new", 1, "zebra print card holder", now + 1),
                _msg("new", 2, "the card again", now + 2),
            ]
        )
        got = await store.search("card zebra", user_id="al", any_word=True, limit=10)
    finally:
        await store.close()
    assert sorted((h.call_id, h.position) for h in got) == [("new", 0), ("new", 1), ("new", 2)]

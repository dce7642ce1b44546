"""Attack: a search made while a forget of the caller is under way (this process's own
forget, PostgreSQL). ``forget`` counts the forget first ("a live call of this process stops at
once"), then waits for the caller's writes under way (an advisory lock) and deletes; a search
started in between is stamped with the new count, yet reads the rows the forget has not
deleted (committed) yet: nothing later tells it apart from a search made after the forget."""

from __future__ import annotations

import asyncio
import time

from pipecat_summarizer._recall.prefetch import PrefetchingArchive
from pipecat_summarizer.store import open_store
from pipecat_summarizer.store.records import user_hash
from tests.recall.test_attacks2_vectors import _archive

SECRET = "My locker code is 4411, remember it."


async def _forget_held(target: str, store, user_id: str):
    """The caller's forget, started while one of their writes holds the caller's lock (the
    live call's recorder, mid-write): counted, not yet deleted."""
    import asyncpg

    writer = await asyncpg.connect(target)
    held = writer.transaction()
    await held.start()
    await writer.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", user_hash(user_id)
    )
    forget = asyncio.ensure_future(store.forget(user_id))
    for _ in range(100):
        await asyncio.sleep(0.005)
        if store.forget_generation(user_id):
            break
    return writer, held, forget


async def test_an_early_search_made_during_the_forget_serves_no_forgotten_text(pg_server):
    target = pg_server.create_database(f"s8_attack_window_{time.monotonic_ns()}")
    store = open_store(target)
    await store.open()
    writer = held = forget = None
    try:
        await _archive(store, "alice", "a1", [SECRET, "Noted, 4411."])
        writer, held, forget = await _forget_held(target, store, "alice")
        assert store.forget_generation("alice") and not forget.done()  # under way
        archive = PrefetchingArchive(store)  # the caller keeps speaking: their words' search
        scope = {"user_id": "alice", "limit": 10, "any_word": True}
        assert archive.prefetch("locker code", **scope)
        taken = archive.take("locker code", **scope)  # the turn, after the forget was counted
        hits = list(await taken) if taken is not None else []
        assert not any("4411" in h.content for h in hits), "the forgotten text was served"
    finally:
        if held is not None:
            await held.rollback()
            await writer.close()
            await forget
        await store.close()


async def test_sqlite_orders_a_search_after_the_forget(tmp_path):
    """The same schedule on SQLite holds: the forget's delete is queued on the store's one
    thread as it is counted, so any search asked after the count reads after the delete."""
    store = open_store(str(tmp_path / "m.db"))
    await store.open()
    try:
        await _archive(store, "alice", "a1", [SECRET, "Noted, 4411."])
        forget = asyncio.ensure_future(store.forget("alice"))
        await asyncio.sleep(0)
        assert store.forget_generation("alice") == 1
        archive = PrefetchingArchive(store)
        scope = {"user_id": "alice", "limit": 10, "any_word": True}
        archive.prefetch("locker code", **scope)
        taken = archive.take("locker code", **scope)
        hits = list(await taken) if taken is not None else []
        await forget
        assert not any("4411" in h.content for h in hits)
    finally:
        await store.close()

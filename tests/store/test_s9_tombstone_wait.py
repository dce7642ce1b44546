"""PostgreSQL: a tombstone read (a live call's forget watch) waits for a forget of the caller
under way in another process (its advisory lock held, its deletes not committed), for a
bounded time, in one statement; the vector cache's batch read never waits (bugs.md S8-H-1)."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from pipecat_summarizer.store import PostgresMemoryStore, StoreError
from pipecat_summarizer.store import _postgres_pool as pool
from pipecat_summarizer.store.records import user_hash

asyncpg = pytest.importorskip("asyncpg")

#: A short bound for these tests (the store's is a second); set before the store opens: each
#: connection's function is created with it
WAIT_S = 0.15


@pytest.fixture(scope="module")
def dsn(pg_server) -> str:
    dsn = pg_server.create_database(f"s9_tombwait_{os.getpid()}")

    async def migrate() -> None:
        store = PostgresMemoryStore(dsn)
        await store.open()
        await store.close()

    asyncio.run(migrate())
    return dsn


@pytest.fixture
async def stores(dsn, monkeypatch):
    """A store of one connection (the pooled connection a read gives back is the one the
    next use gets), and another process's connection."""
    monkeypatch.setattr(pool, "TOMBSTONE_WAIT_S", WAIT_S)
    store = PostgresMemoryStore(dsn, min_size=1, max_size=1)
    await store.open()
    other = await asyncpg.connect(dsn)
    try:
        yield store, other
    finally:
        await other.close()
        await store.close()


async def _forgetting(other, user_id: str, at: float):
    """Another process's forget, under way: the caller's lock held, the tombstone written,
    nothing committed."""
    forgetting = other.transaction()
    await forgetting.start()
    key = user_hash(user_id)
    await other.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key)
    await other.execute(
        "INSERT INTO forgotten (user_hash, at) VALUES ($1, $2) "
        "ON CONFLICT (user_hash) DO UPDATE SET at = excluded.at",
        key,
        at,
    )
    return forgetting


def _without_function(store: PostgresMemoryStore) -> None:
    # as on a role without the TEMP privilege (or after a pooler's session reset)
    store._functions.clear()


@pytest.mark.parametrize("function", [True, False], ids=["function", "two statements"])
async def test_a_forget_committed_while_the_read_waits_is_seen(stores, function):
    store, other = stores
    if not function:
        _without_function(store)
    forgetting = await _forgetting(other, f"al-{function}", 1234.5)
    read = asyncio.ensure_future(store.forgotten_at(f"al-{function}"))
    await asyncio.sleep(WAIT_S / 3)
    assert not read.done()  # waits for the forget's commit
    await forgetting.commit()
    assert await asyncio.wait_for(read, 5) == 1234.5


async def test_a_forget_rolled_back_is_not_seen_and_the_read_returns(stores):
    store, other = stores
    forgetting = await _forgetting(other, "bo", 99.0)
    read = asyncio.ensure_future(store.forgotten_at("bo"))
    await asyncio.sleep(WAIT_S / 3)
    assert not read.done()
    await forgetting.rollback()
    assert await asyncio.wait_for(read, 5) is None


@pytest.mark.parametrize("function", [True, False], ids=["function", "two statements"])
async def test_a_lock_held_past_the_bound_gives_up_and_the_connection_serves_on(stores, function):
    store, other = stores
    if not function:
        _without_function(store)
    user = f"cy-{function}"
    forgetting = await _forgetting(other, user, 7.0)
    started = time.monotonic()
    with pytest.raises(StoreError, match="forget of the caller still under way"):
        await asyncio.wait_for(store.forgotten_at(user), 5)
    assert time.monotonic() - started < 5 * WAIT_S + 1  # gave up near its bound, not at 5 s
    # the store's only connection serves the next reads; the read left no lock behind
    assert await store.forgotten_at("nobody") is None
    assert await store.calls("nobody") == []
    await forgetting.commit()
    assert await store.forgotten_at(user) == 7.0
    assert await asyncio.wait_for(store.forget(user), 5) == 0  # no read holds the lock


async def test_a_watch_during_a_forget_under_way_counts_it_once_committed(stores):
    store, other = stores
    since = time.time()
    await store.forget_baseline("di", since)
    forgetting = await _forgetting(other, "di", since + 1)
    watch = asyncio.ensure_future(store.noticed_forget("di", since))
    await asyncio.sleep(WAIT_S / 3)
    await forgetting.commit()
    assert await asyncio.wait_for(watch, 5) is True
    assert store.forget_generation("di") == 1


async def test_the_vector_caches_batch_read_never_waits(stores):
    store, other = stores
    await other.execute("INSERT INTO forgotten (user_hash, at) VALUES ($1, 5.0)", user_hash("ed"))
    forgetting = await _forgetting(other, "fa", 6.0)
    try:
        started = time.monotonic()
        found = await asyncio.wait_for(store.tombstones([user_hash("ed"), user_hash("fa")]), 5)
        assert found == {user_hash("ed"): 5.0}  # the forget under way: found by a later sweep
        assert time.monotonic() - started < WAIT_S  # not held by the caller's lock
    finally:
        await forgetting.rollback()


async def test_a_connection_whose_function_went_reads_and_waits_without_it(stores):
    store, other = stores
    async with store._pool.acquire() as conn:  # a pooler's or a server's session reset
        await conn.execute("DISCARD TEMP")
        pid = conn.get_server_pid()
    forgetting = await _forgetting(other, "gu", 8.0)
    read = asyncio.ensure_future(store.forgotten_at("gu"))
    await asyncio.sleep(WAIT_S / 3)
    assert not read.done()
    await forgetting.commit()
    assert await asyncio.wait_for(read, 5) == 8.0
    assert pid not in store._functions  # known gone: the next read sends no doomed call

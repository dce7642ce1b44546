"""Two closes of a PostgreSQL store at once: the second waits for the pool to close, as the
first does (it returned at once before, while the pool was still open); a cancelled close
still closes, and the store opens again after."""

from __future__ import annotations

import asyncio
import os

import pytest

from pipecat_summarizer.store import ArchivedMessage, PostgresMemoryStore

pytest.importorskip("asyncpg")


@pytest.fixture(scope="module")
def dsn(pg_server) -> str:
    dsn = pg_server.create_database(f"pgclose_{os.getpid()}")

    async def fill() -> None:
        store = PostgresMemoryStore(dsn)
        try:
            said = "my beagle Rex walks on Dune Bay beach"
            await store.write([ArchivedMessage("c1", 0, "user", said, "{}", user_id="al")])
        finally:
            await store.close()

    asyncio.run(fill())
    return dsn


async def _held(store: PostgresMemoryStore) -> asyncio.Task:
    """A use of the store in flight (a close waits for it), and its pool."""
    task = asyncio.ensure_future(store._fetch("SELECT pg_sleep(0.3)"))
    while store._leases.in_use == 0:
        await asyncio.sleep(0.005)
    return task


async def test_a_second_close_waits_for_the_pool_to_close(dsn):
    store = PostgresMemoryStore(dsn)
    await store.open()
    pool = store._pool
    use = await _held(store)
    first = asyncio.ensure_future(store.close())
    await asyncio.sleep(0.02)
    second = asyncio.ensure_future(store.close())
    await asyncio.sleep(0.05)
    assert not second.done()  # before: it returned at once, the pool still open
    await asyncio.wait_for(second, 10)
    assert pool.is_closing()
    await asyncio.wait_for(asyncio.gather(first, use), 10)
    try:  # and it opens again
        assert len(await store.search("beagle", user_id="al")) == 1
    finally:
        await store.close()


async def test_a_cancelled_close_still_closes_the_pool(dsn):
    store = PostgresMemoryStore(dsn)
    await store.open()
    pool = store._pool
    use = await _held(store)
    closing = asyncio.ensure_future(store.close())
    await asyncio.sleep(0.02)
    closing.cancel()
    await asyncio.wait_for(store.close(), 10)  # joins the close still running
    assert pool.is_closing()
    await asyncio.wait_for(use, 10)

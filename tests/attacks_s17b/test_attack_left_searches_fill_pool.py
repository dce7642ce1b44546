"""S17 attack round B: PostgreSQL searches their callers left (``_postgres_pool.run_on``) in a
pool of few connections.

Turns that each let a slow search go (held on the server by a lock on ``removals``, which a
caller's search reads) can hold every connection of the pool with searches nobody waits for.
What comes next must not wait on them for ever: a write (it never reads ``removals``) gets a
connection once the left searches are cancelled after ``CANCEL_AFTER_S``, each left search
is cancelled once, and the close cuts every one (one still waiting for a connection too)
without waiting for the lock. Counted: the pool's leases and the server's lock waits, never
a time. All held.
"""

from __future__ import annotations

import asyncio

import pytest

from pipecat_summarizer.store import ArchivedMessage, PostgresMemoryStore
from tests.support.store_fixtures import database_with_one_line

asyncpg = pytest.importorskip("asyncpg")

from pipecat_summarizer.store import _postgres_pool  # noqa: E402  (asyncpg is there)

GUARD_S = 30.0  # a guard against a hang only: every wait below is on an event


@pytest.fixture(scope="module")
def dsn(pg_server) -> str:
    return database_with_one_line(pg_server, "pgleftfill")


@pytest.fixture
def cancels(monkeypatch) -> list[int]:
    """asyncpg's cancel requests, counted."""
    import asyncpg.connect_utils as connect_utils

    sent: list[int] = []
    original = connect_utils._cancel

    async def counted(*args, **kwargs):
        sent.append(1)
        return await original(*args, **kwargs)

    monkeypatch.setattr(connect_utils, "_cancel", counted)
    return sent


async def _waiting(holder) -> int:
    """Statements held by the lock on ``removals`` (searches, the removals timer's read)."""
    return await holder.fetchval(
        "SELECT count(*) FROM pg_locks WHERE relation = 'removals'::regclass AND NOT granted"
    )


async def _searching(holder) -> int:
    """Searches held by the lock (the removals timer's read, held too, is not one)."""
    return await holder.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND datname = current_database() AND query LIKE '%search%'"
    )


async def _until(check) -> None:
    while not await check():
        await asyncio.sleep(0.005)


async def _leave(store: PostgresMemoryStore, holder) -> int:
    """Searches held by the lock, each left by its caller once it waits on the server, until
    every connection of the pool is leased (the removals timer's read may hold one); how
    many were left."""
    left = 0
    while store._leases.in_use < store.max_size:
        search = asyncio.ensure_future(store.search("beagle", user_id="al", any_word=True))

        async def held(n: int = left) -> bool:
            # on the server, or queued for a connection (the timer's read took the last)
            return await _searching(holder) > n or store._leases.in_use > store.max_size

        await asyncio.wait_for(_until(held), GUARD_S)
        on_server = await _searching(holder) > left
        search.cancel()
        with pytest.raises(asyncio.CancelledError):
            await search
        left += on_server
    return left


async def _locked(holder):
    # the pool's connections are all open (min_size = max_size) and warmed before: a new
    # connection's warm-up reads removals too, and would wait for the lock in its opening
    locked = holder.transaction()
    await locked.start()
    await holder.execute("LOCK TABLE removals IN ACCESS EXCLUSIVE MODE")
    return locked


async def test_attack_left_searches_holding_every_connection_let_a_write_through(
    dsn, monkeypatch, cancels
):
    # short, so the test needs no long wait; the property is the same at 1 s
    monkeypatch.setattr(_postgres_pool, "CANCEL_AFTER_S", 0.2)
    holder = await asyncpg.connect(dsn)
    store = PostgresMemoryStore(dsn, min_size=2, max_size=2)
    try:
        await store.open()
        locked = await _locked(holder)
        try:
            left = await _leave(store, holder)
            assert left >= 1 and store._leases.in_use >= store.max_size
            line = ArchivedMessage("c9", 0, "user", "a parrot named Kiwi", "{}", user_id="bo")
            # the lock is still held: only the left searches' cancel frees a connection
            await asyncio.wait_for(store.write([line]), GUARD_S)

            async def cut() -> bool:
                await asyncio.sleep(0)
                return len(cancels) >= left

            # every left search cancelled on the server, once (the lock still held)
            await asyncio.wait_for(_until(cut), GUARD_S)
            assert len(cancels) == left
        finally:
            await locked.rollback()
        assert len(await store.search("parrot", user_id="bo", any_word=True)) == 1
    finally:
        await asyncio.wait_for(store.close(), GUARD_S)
        await holder.close()
    assert store._leases.in_use == 0


async def test_attack_a_close_with_every_connection_held_by_left_searches(dsn):
    # CANCEL_AFTER_S as shipped (1 s): the close must not wait for it
    holder = await asyncpg.connect(dsn)
    store = PostgresMemoryStore(dsn, min_size=2, max_size=2)
    try:
        await store.open()
        locked = await _locked(holder)
        try:
            await _leave(store, holder)
            # one more caller whose search waits for a connection, then leaves too
            before = store._leases.in_use
            third = asyncio.ensure_future(store.search("beagle", user_id="al", any_word=True))

            async def queued() -> bool:
                await asyncio.sleep(0)
                return store._leases.in_use > before  # its lease asked for

            await asyncio.wait_for(_until(queued), GUARD_S)
            third.cancel()
            with pytest.raises(asyncio.CancelledError):
                await third
            await asyncio.wait_for(store.close(), GUARD_S)
            # the close returned with the lock still held: nothing left on the server
            assert await _waiting(holder) == 0
            assert store._leases.in_use == 0
            assert not store._cut_at_close
        finally:
            await locked.rollback()
    finally:
        await store.close()
        await holder.close()

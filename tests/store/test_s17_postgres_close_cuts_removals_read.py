"""A PostgreSQL store's close while its removals timer's read waits for a lock on ``removals``
(an operator's ``LOCK TABLE``, a ``VACUUM FULL``, a migration's ``ALTER``): the close cancels
that read instead of waiting for it (S16-A-7(b)). Before, the close waited for the lease
(``drained``, 5 s), then for the pool's close (5 s more), then terminated the pool: ~10 s for
a read nobody waits for. Counted, not timed: the pool is closed, never terminated, and the
lock is still held when the close returns; the store reads its removals again once reopened.
"""

from __future__ import annotations

import asyncio

import pytest
from loguru import logger

from pipecat_summarizer.store import PostgresMemoryStore, _forgets
from tests.support.store_fixtures import database_with_one_line

asyncpg = pytest.importorskip("asyncpg")

PERIOD_S = 0.05  # the timer's period here (DELETES_CHECK_S, shortened)
GUARD_S = 30.0  # a guard against a hang only: every wait below is on an event


@pytest.fixture(scope="module")
def dsn(pg_server) -> str:
    return database_with_one_line(pg_server, "pgclosecut")


async def _waiting_on(holder, table: str) -> int:
    """The lock requests on ``table`` not granted (another backend waits for the holder)."""
    return await holder.fetchval(
        "SELECT count(*) FROM pg_locks WHERE relation = $1::regclass AND NOT granted", table
    )


async def _until_waiting(holder, table: str) -> None:
    while not await _waiting_on(holder, table):
        await asyncio.sleep(0.005)


async def test_a_close_cuts_the_removals_read_waiting_for_a_lock(dsn, monkeypatch):
    monkeypatch.setattr(_forgets, "DELETES_CHECK_S", PERIOD_S)
    holder = await asyncpg.connect(dsn)
    store = PostgresMemoryStore(dsn)
    try:
        await store.open()
        pool = store._pool
        terminated: list[object] = []
        terminate = asyncpg.pool.Pool.terminate

        def counted(self) -> None:
            terminated.append(self)
            terminate(self)

        monkeypatch.setattr(asyncpg.pool.Pool, "terminate", counted)
        warnings: list[str] = []
        sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING")
        locked = holder.transaction()
        await locked.start()
        try:
            await holder.execute("LOCK TABLE removals IN ACCESS EXCLUSIVE MODE")
            # the timer's next read of the removals now waits for the lock
            await asyncio.wait_for(_until_waiting(holder, "removals"), GUARD_S)
            assert store._leases.in_use == 1
            await asyncio.wait_for(store.close(), GUARD_S)
            # the close returned with the lock still held: the read was cut, not waited for
            assert await _waiting_on(holder, "removals") == 0
            assert not terminated  # before: drained (5 s), pool.close (5 s), then terminate
            assert pool.is_closing()
            assert store._leases.in_use == 0
            assert not warnings  # nor failed: a close is no outage (before: one WARNING)
        finally:
            logger.remove(sink)
            await locked.rollback()
        # a later use opens the store again, and its timer reads the removals again
        reads = store._deletes.reads
        assert len(await store.search("beagle", user_id="al")) == 1
        while store._deletes.reads == reads:
            await asyncio.sleep(PERIOD_S / 5)
    finally:
        await store.close()
        await holder.close()


async def test_a_removals_read_still_answers_when_nothing_closes(dsn, monkeypatch):
    """The read waiting for the lock is not cut by anything but a close: it answers once
    the lock goes."""
    monkeypatch.setattr(_forgets, "DELETES_CHECK_S", PERIOD_S)
    holder = await asyncpg.connect(dsn)
    store = PostgresMemoryStore(dsn)
    try:
        await store.open()
        reads = store._deletes.reads
        locked = holder.transaction()
        await locked.start()
        try:
            await holder.execute("LOCK TABLE removals IN ACCESS EXCLUSIVE MODE")
            await asyncio.wait_for(_until_waiting(holder, "removals"), GUARD_S)
        finally:
            await locked.rollback()
        while store._deletes.reads == reads:
            await asyncio.sleep(PERIOD_S / 5)
    finally:
        await store.close()
        await holder.close()

"""A PostgreSQL search whose caller stops waiting (a recall search let go at the turn's
deadline and dropped at the next turn, an early search superseded, a forget) runs on to its
end instead of being cancelled on the server: asyncpg's cancel opens a connection of its own
for the cancel request and the server forks a process for it (~0.6 ms of the loop's CPU and
~2.6 ms of the server's at 100k archived messages, on the CPUs the next turn's own search
shares), more than the few ms of search it saves. Counted: asyncpg's cancel requests. The
search is held on the server by a lock on ``removals`` (which a caller's search reads), so it
is certainly under way when its caller leaves. A close still cuts it (the close never waits
for it), and one still running ``CANCEL_AFTER_S`` later is cancelled after all.
"""

from __future__ import annotations

import asyncio

import pytest
from loguru import logger

from pipecat_summarizer.store import PostgresMemoryStore
from tests.support.store_fixtures import database_with_one_line

asyncpg = pytest.importorskip("asyncpg")

from pipecat_summarizer.store import _postgres_pool  # noqa: E402  (asyncpg is there)

GUARD_S = 30.0  # a guard against a hang only: every wait below is on an event


@pytest.fixture(scope="module")
def dsn(pg_server) -> str:
    return database_with_one_line(pg_server, "pgleftsearch")


@pytest.fixture
def cancels(monkeypatch) -> list[int]:
    """asyncpg's cancel requests (each a connection of its own to the server), counted."""
    import asyncpg.connect_utils as connect_utils

    sent: list[int] = []
    original = connect_utils._cancel

    async def counted(*args, **kwargs):
        sent.append(1)
        return await original(*args, **kwargs)

    monkeypatch.setattr(connect_utils, "_cancel", counted)
    return sent


async def _waiting(holder) -> int:
    """Lock requests on ``removals`` not granted: the store's statements held by the lock."""
    return await holder.fetchval(
        "SELECT count(*) FROM pg_locks WHERE relation = 'removals'::regclass AND NOT granted"
    )


async def _until(check) -> None:
    while not await check():
        await asyncio.sleep(0.005)


async def _left_search(store: PostgresMemoryStore, holder) -> None:
    """A caller's search held by the lock, then left by its caller (cancelled)."""
    search = asyncio.ensure_future(store.search("beagle", user_id="al", any_word=True))

    async def held() -> bool:
        return await _waiting(holder) > 0

    await asyncio.wait_for(_until(held), GUARD_S)
    search.cancel()
    with pytest.raises(asyncio.CancelledError):
        await search  # the caller leaves at once


async def _locked(holder):
    locked = holder.transaction()
    await locked.start()
    await holder.execute("LOCK TABLE removals IN ACCESS EXCLUSIVE MODE")
    return locked


async def test_a_search_its_caller_left_runs_on_without_a_cancel_request(dsn, cancels):
    holder = await asyncpg.connect(dsn)
    store = PostgresMemoryStore(dsn)
    try:
        await store.open()
        locked = await _locked(holder)
        try:
            await _left_search(store, holder)
            assert store._leases.in_use == 1  # its statement still runs on its connection
        finally:
            await locked.rollback()

        async def back() -> bool:
            return store._leases.in_use == 0

        await asyncio.wait_for(_until(back), GUARD_S)  # it ended; its lease went back
        assert not cancels  # before: one cancel request (a connection, a server process)
        assert len(await store.search("beagle", user_id="al", any_word=True)) == 1
    finally:
        await store.close()
        await holder.close()


async def test_a_close_cuts_a_search_its_caller_left(dsn, cancels, monkeypatch):
    holder = await asyncpg.connect(dsn)
    store = PostgresMemoryStore(dsn)
    terminated: list[object] = []
    terminate = asyncpg.pool.Pool.terminate

    def counted(self) -> None:
        terminated.append(self)
        terminate(self)

    monkeypatch.setattr(asyncpg.pool.Pool, "terminate", counted)
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING")
    try:
        await store.open()
        locked = await _locked(holder)
        try:
            await _left_search(store, holder)
            await asyncio.wait_for(store.close(), GUARD_S)
            # the close returned with the lock still held: the search was cut, not waited for
            assert await _waiting(holder) == 0
            assert not terminated
            assert store._leases.in_use == 0
        finally:
            await locked.rollback()
        assert len(cancels) == 1  # the close's own cancel of it
        assert not warnings
    finally:
        logger.remove(sink)
        await store.close()
        await holder.close()


async def test_a_search_left_running_too_long_is_cancelled_after_all(dsn, cancels, monkeypatch):
    monkeypatch.setattr(_postgres_pool, "CANCEL_AFTER_S", 0.05)
    holder = await asyncpg.connect(dsn)
    store = PostgresMemoryStore(dsn)
    try:
        await store.open()
        locked = await _locked(holder)
        try:
            await _left_search(store, holder)

            async def cut() -> bool:
                return await _waiting(holder) == 0 and store._leases.in_use == 0

            await asyncio.wait_for(_until(cut), GUARD_S)  # with the lock still held
            assert len(cancels) == 1
        finally:
            await locked.rollback()
        assert len(await store.search("beagle", user_id="al", any_word=True)) == 1
    finally:
        await store.close()
        await holder.close()

"""A PostgreSQL store's new connection is warmed (a recall turn's statements run once, see
``_postgres_pool.warm``); the warm-up's searches read ``removals``. With a lock held on it
(an operator's ``LOCK TABLE``, a ``VACUUM FULL``, a migration's ``ALTER``) the warm-up waited
for asyncpg's 30 s command timeout, and the store's opening (or a pool's new connection, a
turn's search behind it) with it (S17-B-1). The warm-up now gives up the lock's wait after
``WARM_STATEMENT_S``: the connection serves unwarmed, the opening ends while the lock is still
held, and once it is released searches find what they found. Counted, not timed: the test
waits on the server's own lock table, with a guard against a hang only."""

from __future__ import annotations

import asyncio

import pytest

from pipecat_summarizer.store import PostgresMemoryStore, _postgres_pool
from tests.store.test_s17_postgres_close_cuts_removals_read import _waiting_on
from tests.support.store_fixtures import database_with_one_line

asyncpg = pytest.importorskip("asyncpg")

GUARD_S = 20.0  # under asyncpg's 30 s: before the fix the warm-up's wait outlasted it


@pytest.fixture(scope="module")
def dsn(pg_server) -> str:
    return database_with_one_line(pg_server, "pgwarmlock")


async def test_an_opening_ends_while_a_lock_on_removals_holds_its_warm_up(dsn, monkeypatch):
    monkeypatch.setattr(_postgres_pool, "WARM_STATEMENT_S", 0.3)
    holder = await asyncpg.connect(dsn)
    store = PostgresMemoryStore(dsn, min_size=1, max_size=2)
    try:
        locked = holder.transaction()
        await locked.start()
        await holder.execute("LOCK TABLE removals IN ACCESS EXCLUSIVE MODE")
        opening = asyncio.ensure_future(store.open())
        waited = False
        async with asyncio.timeout(GUARD_S):
            while not opening.done():
                waited = waited or bool(await _waiting_on(holder, "removals"))
                await asyncio.sleep(0.01)
        await opening
        assert waited  # the warm-up did meet the lock
        assert await _waiting_on(holder, "removals") == 0  # nothing left waiting on it
        await locked.rollback()
        hits = await store.search("beagle", user_id="al")
        assert [h.content for h in hits] == ["my beagle Rex walks on Dune Bay beach"]
    finally:
        await store.close()
        await holder.close()


def test_a_timed_out_statement_leaves_its_connection_whole():
    # asyncpg's timeout is the builtin TimeoutError, an OSError since Python 3.11: it was
    # taken for a lost backend, the connection terminated (and a new one opened and warmed)
    # where asyncpg's release waits for the statement's cancel (bb05e9f's intent)
    assert not _postgres_pool.broken(TimeoutError())
    assert _postgres_pool.broken(ConnectionResetError())  # a lost backend still is

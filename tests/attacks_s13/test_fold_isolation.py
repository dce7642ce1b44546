"""Attack on the fold (dad1c4c) under a database whose default isolation is not READ
COMMITTED (``ALTER DATABASE ... SET default_transaction_isolation``: a deployment choice
the store does not override: its transactions are a plain ``BEGIN``).

Two workers open at once with ``retention_days``: each purges in ``open()``, and with
nothing old to delete (a fleet's steady state) both used to succeed. Since the fold, a
purge whose snapshot was taken before another purge's fold committed, and which takes the
try-lock after that commit, deletes rows the other deleted: under REPEATABLE READ or
SERIALIZABLE that is a serialization failure, and the worker's purge (its open) raises.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from pipecat_summarizer.store import _postgres_writes, open_store
from tests.attacks_s13.test_store_removals import _msg

asyncpg = pytest.importorskip("asyncpg")
pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)

DAY = 86400.0


class _Paused:
    """A connection whose first ``execute`` (a purge's first statement: its snapshot taken
    under REPEATABLE READ) is followed by ``then()`` before the purge goes on."""

    def __init__(self, conn, then) -> None:
        self._conn, self._then, self._done = conn, then, False

    def __getattr__(self, name):
        return getattr(self._conn, name)

    async def execute(self, *args, **kwargs):
        status = await self._conn.execute(*args, **kwargs)
        if not self._done:
            self._done = True
            await self._then()
        return status


@pytest.mark.parametrize(
    "isolation",
    [
        "read committed",
        "repeatable read",  # S13-B-1: failed before the purge ran at READ COMMITTED (1054ee1)
        "serializable",  # S13-B-1: failed before the purge ran at READ COMMITTED (1054ee1)
    ],
)
async def test_fold_two_purges_deleting_nothing_under_isolation(store_target, isolation):
    # rows to fold in two buckets (deletes of al's and bo's), nothing old to purge; purge B
    # takes its snapshot, purge A (another worker's open) deletes nothing, folds, commits;
    # B goes on: deletes nothing, takes the try-lock (free now) and folds
    conn = await asyncpg.connect(store_target)
    now = time.time()
    store = open_store(store_target)
    try:
        dbname = await conn.fetchval("SELECT current_database()")
        await conn.execute(
            f"ALTER DATABASE {dbname} SET default_transaction_isolation = '{isolation}'"
        )
        await store.write(
            [
                _msg(f"{u}-x", i, f"card {i}", now - DAY + i, u)
                for u in ("al", "bo")
                for i in range(4)
            ]
        )
        for u in ("al", "bo"):
            for i in range(2):
                await conn.execute(
                    "DELETE FROM messages WHERE call_id = $1 AND position = $2", f"{u}-x", i
                )
        assert await conn.fetchval("SELECT count(*) FROM removals") == 4
        b = await asyncpg.connect(store_target)  # a new session: the database's default
        try:
            assert await b.fetchval("SHOW transaction_isolation") == isolation

            async def worker_a_opens() -> None:
                a = open_store(store_target, retention_days=30)
                try:
                    await a.open()
                finally:
                    await a.close()

            paused = _Paused(b, worker_a_opens)
            assert await asyncio.wait_for(_postgres_writes.purge(paused, 30), 30) == 0
        finally:
            await b.close()
        rows = await conn.fetch("SELECT bucket, n FROM removals ORDER BY bucket")
        assert [r["n"] for r in rows] == [2, 2]
    finally:
        await store.close()
        await conn.close()

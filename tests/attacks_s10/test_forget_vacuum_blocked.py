"""PostgreSQL forget: the deletes and the tombstone commit first, then VACUUM runs on the
tables it touched. When that VACUUM cannot run (another session holds a lock VACUUM
conflicts with: a concurrent forget's VACUUM, an ANALYZE, an index build; and the operator
set a ``lock_timeout`` for the database, as many do), the forget has already happened: it
must say so (the rows deleted), not raise as if nothing was forgotten."""

from __future__ import annotations

import os

import pytest

from pipecat_summarizer.store import PostgresMemoryStore
from tests.recall.test_attacks_dates import archived, utc

asyncpg = pytest.importorskip("asyncpg")


@pytest.mark.xfail(
    strict=True,
    reason="S10-A-4: forget raises when its VACUUM after the commit fails (lock_timeout), "
    "though the caller's rows are deleted and the tombstone written",
)
async def test_a_vacuum_that_cannot_run_does_not_fail_a_committed_forget(pg_server):
    name = f"s10_vaclock_{os.getpid()}"
    dsn = pg_server.create_database(name)
    admin = await asyncpg.connect(dsn)
    store = PostgresMemoryStore(dsn)
    try:
        await store.write(
            archived(["my code word is zanzibar", "Noted."], call_id="a1", at=utc(2026, 5, 2))
        )
        await admin.execute(f"ALTER DATABASE \"{name}\" SET lock_timeout = '200ms'")
        await store.close()  # new connections take the database's setting
        other = admin.transaction()
        await other.start()  # what a concurrent VACUUM or ANALYZE of the table holds
        await admin.execute("LOCK TABLE message_words IN SHARE UPDATE EXCLUSIVE MODE")
        try:
            outcome: object
            try:
                outcome = await store.forget("alice")
            except Exception as e:  # noqa: BLE001 - what the caller of forget sees
                outcome = e
        finally:
            await other.rollback()
        assert await store.forgotten_at("alice") is not None  # the forget happened
        assert await store.calls("alice") == []
        assert isinstance(outcome, int) and outcome > 0, f"forget reported {outcome!r}"
    finally:
        await store.close()
        await admin.close()

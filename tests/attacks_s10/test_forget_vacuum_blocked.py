"""PostgreSQL forget: the deletes and the tombstone commit first, then VACUUM runs on the
tables it touched. When that VACUUM cannot run (another session holds a lock VACUUM
conflicts with: a concurrent forget's VACUUM, an ANALYZE, an index build; and the operator
set a ``lock_timeout`` for the database, as many do), the forget has already happened: it
must say so (the rows deleted), not raise as if nothing was forgotten (S10-A-4)."""

from __future__ import annotations

import os

import pytest

from pipecat_summarizer.store import PostgresMemoryStore, _postgres_writes
from tests.recall.test_attacks_dates import archived, utc

asyncpg = pytest.importorskip("asyncpg")


@pytest.mark.parametrize("bound", ["lock_timeout", "vacuum_timeout"])
async def test_a_vacuum_that_cannot_run_does_not_fail_a_committed_forget(
    pg_server, logs, monkeypatch, bound
):
    # the database's lock_timeout fails the VACUUM; without one, the forget's own bound
    # (VACUUM_TIMEOUT_S, short here) cancels it
    name = f"s10_vaclock_{bound}_{os.getpid()}"
    dsn = pg_server.create_database(name)
    if bound == "vacuum_timeout":
        monkeypatch.setattr(_postgres_writes, "VACUUM_TIMEOUT_S", 0.3)
    admin = await asyncpg.connect(dsn)
    store = PostgresMemoryStore(dsn)
    try:
        await store.write(
            archived(["my code word is zanzibar", "Noted."], call_id="a1", at=utc(2026, 5, 2))
        )
        if bound == "lock_timeout":
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
        warned = [r["message"] for r in logs if r["level"].name == "WARNING"]
        error = "LockNotAvailableError" if bound == "lock_timeout" else "TimeoutError"
        assert warned == [f"PostgreSQL VACUUM after a forget failed ({error})"]
    finally:
        await store.close()
        await admin.close()

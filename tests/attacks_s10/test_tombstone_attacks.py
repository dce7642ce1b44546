"""Session-10 attacks on PostgreSQL's tombstone wait (``_postgres_pool.read_tombstone``): a
session reset dropping the connection's state, its backend killed mid-read, many callers
forgotten at once, and a forget that never commits during a live call (the call answers
every turn at once, recall places nothing, the store closes)."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from pipecat_summarizer.store import PostgresMemoryStore, StoreError
from pipecat_summarizer.store import _postgres_pool as pool
from pipecat_summarizer.store.records import user_hash
from tests.recall.test_attacks_dates import archived, utc

asyncpg = pytest.importorskip("asyncpg")

#: A short bound for the store-level reads (set before the store opens).
WAIT_S = 0.2
LOCK = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))"


@pytest.fixture(scope="module")
def dsn(pg_server) -> str:
    dsn = pg_server.create_database(f"s10_tomb_{os.getpid()}")

    async def migrate() -> None:
        store = PostgresMemoryStore(dsn)
        await store.open()
        await store.write(
            archived(
                ["I rented a red Fiat at the airport.", "Noted."],
                call_id="a1",
                at=utc(2026, 5, 1),
                user_id="alice",
            )
        )
        await store.close()

    asyncio.run(migrate())
    return dsn


@pytest.fixture
async def one(dsn, monkeypatch):
    """A store of one connection, and another process's connection."""
    monkeypatch.setattr(pool, "TOMBSTONE_WAIT_S", WAIT_S)
    store = PostgresMemoryStore(dsn, min_size=1, max_size=1)
    await store.open()
    other = await asyncpg.connect(dsn)
    try:
        yield store, other
    finally:
        await other.close()
        await store.close()


async def _holding(other, user_id: str):
    """Another process's forget of ``user_id`` under way (its lock held, nothing committed)."""
    tx = other.transaction()
    await tx.start()
    await other.execute(LOCK, user_hash(user_id))
    return tx


async def _answers(call) -> bool:
    try:
        await call()
    except Exception:  # noqa: BLE001 - the attack's first read may fail
        return False
    return True


@pytest.mark.parametrize("reset", ["DISCARD ALL", "DEALLOCATE ALL"])
async def test_a_discard_all_costs_no_read(one, reset):
    # S10-A-1: what a pooler's server_reset_query runs drops the connection's prepared
    # statements, which asyncpg's cache still names (SQLSTATE 26000): the read that finds
    # it so runs again on a new connection; every read answers, and so do the next writes
    store, _ = one
    assert await store.forgotten_at("alice") is None  # the statements cached
    assert await store.messages_at([("a1", 0)])
    assert await store.search("fiat airport", user_id="alice")
    for read in (
        lambda: store.forgotten_at("alice"),
        lambda: store.messages_at([("a1", 0)]),
        lambda: store.search("fiat airport", user_id="alice"),
    ):
        async with store._pool.acquire() as conn:
            await conn.execute(reset)
        await read()  # never raises
    assert await store.forgotten_at("alice") is None
    assert await store.messages_at([("a1", 0)])
    assert await store.search("fiat airport", user_id="alice")
    record = archived(["A blue Vespa."], call_id="a2", at=utc(2026, 5, 2), user_id="alice")
    await store.write(record)  # its statements cached on this connection
    async with store._pool.acquire() as conn:
        await conn.execute(reset)
    # a write is not retried by the store (the writer retries it): it fails at most once
    await _answers(lambda: store.write(record))
    await store.write(record)


async def test_a_discard_temp_costs_no_read(one):
    # the function alone gone (DISCARD TEMP): every read answers, the wait still works
    store, other = one
    assert await store.forgotten_at("alice") is None
    async with store._pool.acquire() as conn:
        await conn.execute("DISCARD TEMP")
    assert await store.forgotten_at("alice") is None
    assert await store.search("fiat airport", user_id="alice")
    tx = await _holding(other, "alice")
    try:
        with pytest.raises(StoreError):
            await asyncio.wait_for(store.forgotten_at("alice"), 5)
    finally:
        await tx.rollback()
    assert await store.forgotten_at("alice") is None


async def test_a_backend_killed_mid_wait_fails_that_read_only(one):
    # the connection waiting for a forget's lock is terminated by an operator: that read
    # fails (never hangs, never answers "not forgotten"), the store's next reads answer
    store, other = one
    tx = await _holding(other, "alice")
    read = asyncio.ensure_future(store.forgotten_at("alice"))
    pid = None
    for _ in range(200):
        pid = await other.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND pid <> pg_backend_pid() AND datname = current_database()"
        )
        if pid is not None:
            break
        await asyncio.sleep(0.01)
    assert pid is not None, "the read never waited for the lock"
    # an admin's kill, on a connection of its own (the forget's holds the lock)
    admin = await asyncpg.connect(store.dsn)
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()
    with pytest.raises(Exception) as failed:  # noqa: PT011 - any failure, never an answer
        await asyncio.wait_for(read, 5)
    assert not isinstance(failed.value, asyncio.TimeoutError)
    await tx.rollback()
    assert await asyncio.wait_for(store.forgotten_at("alice"), 5) is None
    assert await asyncio.wait_for(store.search("fiat airport", user_id="alice"), 5)
    assert await asyncio.wait_for(store.messages_at([("a1", 0)]), 5)


async def test_many_callers_forgotten_at_once_while_their_watches_read(dsn, monkeypatch):
    # 12 callers forgotten together by one store while a second store (another process's
    # calls) reads each caller's tombstone, twice: every forget ends, every read answers
    # or gives up with StoreError, and afterwards each watch counts its caller's forget once
    monkeypatch.setattr(pool, "TOMBSTONE_WAIT_S", 1.0)
    users = [f"many-{i}" for i in range(12)]
    admin = PostgresMemoryStore(dsn, min_size=1, max_size=4)
    calls = PostgresMemoryStore(dsn, min_size=1, max_size=3)
    await admin.open()
    await calls.open()
    try:
        since = time.time()
        for u in users:
            await calls.write(
                archived([f"{u} keeps a blue Vespa.", "Noted."], call_id=u, at=since, user_id=u)
            )
            await calls.forget_baseline(u, since)

        async def watch(u: str) -> bool | str:
            try:
                return await calls.noticed_forget(u, since)
            except StoreError:
                return "late"

        forgets = [asyncio.ensure_future(admin.forget(u)) for u in users]
        watches = [asyncio.ensure_future(watch(u)) for u in users]
        done = await asyncio.wait_for(asyncio.gather(*forgets, *watches), 60)
        assert all(n > 0 for n in done[: len(users)])
        # each caller's forget is counted by the other store exactly once
        again = await asyncio.wait_for(asyncio.gather(*(watch(u) for u in users)), 30)
        for u, first, second in zip(users, done[len(users) :], again, strict=True):
            assert (first, second) in {(True, False), (False, True), ("late", True)}, u
            assert calls.forget_generation(u) == 1, u
        assert await calls.search("blue vespa", user_id=users[0]) == []
    finally:
        await calls.close()
        await admin.close()


async def test_a_recycled_pool_connection_waits_through_its_new_function(one):
    # the pool recycles its connections (expire_connections: as after a failover or a
    # setting's change): the new backend gets its own function, the wait still holds
    store, other = one
    assert await store.forgotten_at("alice") is None
    old = set(store._functions)
    await store._pool.expire_connections()
    assert await store.forgotten_at("alice") is None  # a new connection, warmed
    assert store._functions and store._functions != old
    tx = await _holding(other, "alice")
    try:
        with pytest.raises(StoreError):
            await asyncio.wait_for(store.forgotten_at("alice"), 5)
    finally:
        await tx.rollback()
    assert await store.search("fiat airport", user_id="alice")

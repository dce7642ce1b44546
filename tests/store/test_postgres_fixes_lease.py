"""PostgreSQL store: a connection whose use broke is never reused, a search never takes
another statement's rows, the search function is known per connection, a search limit
no database takes is a clear error (bugs.md S7-ATTACK-4, S7-ATTACK-8)."""

from __future__ import annotations

import asyncio
import os

import pytest

from pipecat_summarizer.store import ArchivedMessage, PostgresMemoryStore, StoreError
from pipecat_summarizer.store._rows import MESSAGE_COLS

asyncpg = pytest.importorskip("asyncpg")

from pipecat_summarizer.store import postgres  # noqa: E402


def _said(i: int) -> ArchivedMessage:
    text = f"my beagle Rex walks on Dune Bay beach number {i}"
    return ArchivedMessage("c1", i, "user", text, "{}", turn=i, at=1.7e9 + i, user_id="al")


@pytest.fixture(scope="module")
def dsn(pg_server) -> str:
    """A database holding five messages of ``al``."""
    dsn = pg_server.create_database(f"pgfixes_{os.getpid()}")

    async def fill() -> None:
        store = PostgresMemoryStore(dsn)
        try:
            await store.write([_said(i) for i in range(5)])
        finally:
            await store.close()

    asyncio.run(fill())
    return dsn


async def _pid(store: PostgresMemoryStore) -> int:
    return (await store._fetch("SELECT pg_backend_pid() AS pid"))[0]["pid"]


async def test_a_search_never_returns_another_statements_rows(dsn, monkeypatch):
    """Rows of another statement (the batched read's 12 columns, as a connection handed
    out mid-operation once gave) are refused, never built into hits."""
    store = PostgresMemoryStore(dsn, min_size=1, max_size=1)
    try:
        before = await _pid(store)
        other = (f"SELECT {MESSAGE_COLS} FROM messages WHERE call_id = $1", "c1")
        monkeypatch.setattr(postgres, "search_sql", lambda *a, **k: other)
        with pytest.raises(StoreError, match="another statement"):
            await store.search("beagle", user_id="al", any_word=True)
        monkeypatch.undo()
        assert await _pid(store) != before  # that connection is not trusted again
        assert len(await store.search("beagle", user_id="al", any_word=True)) == 5
    finally:
        await store.close()


async def test_a_connection_that_lost_its_search_function_learns_it_once(dsn):
    """A connection without the function (a pooler's or a server's session reset) falls
    back to the statement itself, after one failed call, not one per search."""
    store = PostgresMemoryStore(dsn, min_size=1, max_size=1)
    sent: list[str] = []
    fetch = store._fetch

    async def capture(sql, *values):
        sent.append(sql)
        return await fetch(sql, *values)

    try:
        first = await store.search("beagle Rex", user_id="al", any_word=True)
        await store._fetch("DISCARD TEMP")
        store._fetch = capture  # type: ignore[method-assign]
        later = [await store.search("beagle Rex", user_id="al", any_word=True) for _ in range(4)]
    finally:
        store._fetch = fetch  # type: ignore[method-assign]
        await store.close()
    assert all(hits == first for hits in later) and len(first) == 5
    assert sum("pcs_caller_search" in sql for sql in sent) == 1, len(sent)


async def test_warm_up_gives_up_on_a_lost_connection_not_on_a_missing_schema():
    """A new connection's warm-up raises a lost backend's error (the pool then closes the
    connection rather than keep it half-warmed) and stops quietly before the schema."""
    from pipecat_summarizer.store import _postgres_pool

    class Conn:
        def __init__(self, error: Exception):
            self.error = error

        async def execute(self, sql: str) -> None:
            pass

        async def fetch(self, sql: str, *args, timeout: float | None = None) -> list:
            raise self.error

    lost = asyncpg.ConnectionDoesNotExistError("connection was closed in the middle")
    with pytest.raises(asyncpg.ConnectionDoesNotExistError):
        await _postgres_pool.warm(Conn(lost), "english", True)
    missing = asyncpg.UndefinedTableError('relation "forgotten" does not exist')
    assert await _postgres_pool.warm(Conn(missing), "english", True) is True


async def test_a_search_limit_past_what_postgresql_binds_reads_every_match(dsn):
    """S7-ATTACK-8: a limit past int4 was asyncpg's DataError; past 2**63 - 1 it is a
    ValueError naming it (as calls() and caller_memory())."""
    store = PostgresMemoryStore(dsn)
    try:
        assert len(await store.search("beagle", user_id="al", limit=2**31)) == 5
        assert len(await store.search("beagle", user_id="al", limit=2**63 - 1)) == 5
        with pytest.raises(ValueError, match="limit must be at most"):
            await store.search("beagle", user_id="al", limit=2**63)
    finally:
        await store.close()


async def test_close_waits_for_a_use_in_flight_and_refuses_one_that_starts_meanwhile(dsn):
    """S7-ATTACK-3: the use on a connection ends whole; one started while the store closes
    is StoreError("store closed") (it opened a second pool); a later use opens it again."""
    store = PostgresMemoryStore(dsn, min_size=1, max_size=2)
    try:
        slow = asyncio.ensure_future(store._fetch("SELECT pg_sleep(0.5) AS slept"))
        admin = await asyncpg.connect(dsn)
        try:
            while not await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(0.5)%' "
                "AND pid <> pg_backend_pid()"
            ):  # on its connection
                await asyncio.sleep(0.01)
        finally:
            await admin.close()
        closing = asyncio.ensure_future(store.close())
        for _ in range(3):  # the close under way
            await asyncio.sleep(0)
        with pytest.raises(StoreError, match="store closed"):
            await store.search("beagle", user_id="al")
        assert [tuple(r) for r in await slow] == [(None,)]  # pg_sleep returns void
        await closing
        assert store._pool is None
        assert len(await store.search("beagle", user_id="al")) == 5
    finally:
        await store.close()


async def test_reads_right_after_the_pools_backends_were_killed_answer(dsn):
    """An idle pooled connection whose backend was killed still looks open to the pool:
    its next use failed (ConnectionDoesNotExistError, or InternalClientError "another
    operation (2) is in progress": the backend's FATAL error already read). A read runs
    again on another connection (S7-ATTACK-4)."""
    store = PostgresMemoryStore(dsn, min_size=2, max_size=2)
    admin = await asyncpg.connect(dsn)
    try:
        for _ in range(3):
            await asyncio.gather(*(store._fetch("SELECT 1") for _ in range(2)))  # both open
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            assert len(await store.search("beagle Rex", user_id="al", any_word=True)) == 5
            assert await store.forgotten_at("al") is None
            assert [m.position for m in await store.messages_at([("c1", 3)])] == [3]
    finally:
        await admin.close()
        await store.close()


async def test_a_connection_whose_function_was_not_created_sends_the_statement(dsn, monkeypatch):
    """The function is known per connection: one whose TEMP create failed (a role without
    the privilege) sends the statement itself from its first search, never a failed call."""
    from pipecat_summarizer.store import _postgres_pool

    monkeypatch.setattr(_postgres_pool, "function_sql", lambda cfg: "CREATE FUNCTION nope(")
    store = PostgresMemoryStore(dsn, min_size=1, max_size=1)
    sent: list[str] = []
    fetch = store._fetch

    async def capture(sql, *values):
        sent.append(sql)
        return await fetch(sql, *values)

    try:
        await store.open()
        store._fetch = capture  # type: ignore[method-assign]
        hits = await store.search("beagle Rex", user_id="al", any_word=True)
    finally:
        store._fetch = fetch  # type: ignore[method-assign]
        await store.close()
    assert len(hits) == 5 and store._functions == set()
    assert len(sent) == 1 and "pcs_caller_search" not in sent[0]

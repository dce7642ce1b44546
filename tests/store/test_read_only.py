"""``read_only=True``: a store opened for reading only (what ``inspect`` uses) never creates,
migrates or switches anything, and refuses what is not a memory store."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from pipecat_summarizer.store import StoreError, open_store
from pipecat_summarizer.store.base import SCHEMA_VERSION
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord


def _run(coro):
    return asyncio.run(coro)


async def _fill(target: str) -> None:
    async with open_store(target) as store:
        await store.write(
            [
                CallRecord("c1", "alice", started_at=1_700_000_000),
                ArchivedMessage("c1", 0, "user", "late pears", "{}", user_id="alice"),
            ]
        )


def test_read_only_reads_and_refuses_writes(store_target):
    async def go():
        await _fill(store_target)
        async with open_store(store_target, read_only=True) as store:
            assert [c.call_id for c in await store.calls("alice")] == ["c1"]
            assert [h.position for h in await store.search("pears", user_id="alice")] == [0]
            with pytest.raises(StoreError, match="read-only"):
                await store.write([CallRecord("c2", "bob")])
            with pytest.raises(StoreError, match="read-only"):
                await store.forget("alice")
            with pytest.raises(StoreError, match="read-only"):
                await store.purge_older_than(0)
        async with open_store(store_target) as store:
            assert await store.calls("bob") == []

    _run(go())


def test_read_only_sqlite_leaves_another_apps_file_alone(tmp_path):
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()
    before = path.read_bytes()

    async def go():
        store = open_store(str(path), read_only=True)
        with pytest.raises(StoreError, match="not a memory store"):
            await store.open()
        await store.close()

    _run(go())
    assert path.read_bytes() == before  # no tables created, still in rollback-journal mode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


def test_read_only_refuses_missing_file_and_garbage(tmp_path):
    garbage = tmp_path / "notes.txt"
    garbage.write_bytes(b"hello, this is not a database at all" * 200)

    async def go():
        for path in (tmp_path / "missing.db", garbage):
            store = open_store(str(path), read_only=True)
            with pytest.raises(StoreError):
                await store.open()
            await store.close()

    _run(go())
    assert not (tmp_path / "missing.db").exists()


def test_read_only_refuses_unknown_schema_versions(store_target, backend):
    async def bump(version: int):
        if backend == "sqlite":
            conn = sqlite3.connect(store_target)
            conn.execute(
                "UPDATE schema_version SET version = ? WHERE version = ?", (version, SCHEMA_VERSION)
            )
            conn.commit()
            conn.close()
        else:
            import asyncpg

            conn = await asyncpg.connect(store_target)
            await conn.execute(
                "UPDATE schema_version SET version = $1 WHERE version = $2",
                version,
                SCHEMA_VERSION,
            )
            await conn.close()

    async def go():
        await _fill(store_target)
        await bump(SCHEMA_VERSION + 1)
        store = open_store(store_target, read_only=True)
        with pytest.raises(StoreError, match="not one this code knows"):
            await store.open()
        await store.close()

    _run(go())


def test_read_only_postgres_refuses_a_database_without_the_store(pg_server):  # noqa: F811
    dsn = pg_server.create_database("ro_empty")

    async def go():
        store = open_store(dsn, read_only=True)
        with pytest.raises(StoreError, match="not a memory store"):
            await store.open()
        await store.close()
        import asyncpg

        conn = await asyncpg.connect(dsn)
        try:
            tables = await conn.fetch(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema()"
            )
        finally:
            await conn.close()
        assert tables == []

    _run(go())

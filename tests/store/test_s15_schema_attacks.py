"""Attacks on the pinned schema (S15-S-1's fix) and the removals timer, as a careless operator
would make them: two stores in two schemas of one database, a schema dropped while the store
is open, a role without USAGE on the store's schema, a forked process's timer.
"""

from __future__ import annotations

import asyncio
import itertools
import os

import pytest

from pipecat_summarizer.store import PostgresMemoryStore, StoreError, _forgets
from tests.recall.test_attacks_dates import archived, utc
from tests.store.test_s15_schema_pinned import _sql, _tables

asyncpg = pytest.importorskip("asyncpg")

_names = itertools.count(1)


def _kayak(user: str, call: str) -> list:
    return archived(
        ["My kayak is the Quillfeather.", "Noted."], call_id=call, at=utc(2026, 5, 1), user_id=user
    )


async def _database(pg_server, tag: str) -> str:
    return pg_server.create_database(f"s15_att_{tag}_{os.getpid()}_{next(_names)}")


async def test_two_stores_in_two_schemas_of_one_database_stay_apart(pg_server):
    # one database, a store per tenant schema (the DSN's search_path): alice in both; a
    # forget in one deletes nothing of the other; each store's definer functions are its own
    owner = await _database(pg_server, "two")
    await _sql(owner, "CREATE SCHEMA tenant1", "CREATE SCHEMA tenant2")
    one = PostgresMemoryStore(f"{owner}?search_path=tenant1")
    two = PostgresMemoryStore(f"{owner}?search_path=tenant2")
    try:
        await one.write(_kayak("alice", "t1-a"))
        await two.write(_kayak("alice", "t2-a"))
        assert await one.forget("alice") >= 2
        assert await one.search("kayak", user_id="alice") == []
        hits = await two.search("kayak", user_id="alice")
        assert [h.call_id for h in hits] == ["t2-a"]
        assert await two.forgotten_at("alice") is None
    finally:
        await one.close()
        await two.close()
    assert "messages" not in await _tables(owner, "public")
    (rows,) = await _sql(
        owner,
        "SELECT n.nspname, p.proname, p.proconfig FROM pg_proc p "
        "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE p.prosecdef ORDER BY 1, 2",
    )
    by_schema: dict[str, list] = {}
    for schema, _, config in rows:
        by_schema.setdefault(schema, []).append(config)
    assert sorted(by_schema) == ["tenant1", "tenant2"]
    for schema, configs in by_schema.items():
        assert all(c == [f"search_path={schema}, pg_temp"] for c in configs), (schema, configs)
    (left,) = await _sql(owner, "SELECT count(*) FROM tenant2.messages")
    assert left[0][0] == 2


async def test_a_schema_dropped_while_the_store_is_open(pg_server, monkeypatch, logs):
    # the operator drops the store's schema (CASCADE) while it is open: the store's uses fail
    # (none creates a store elsewhere: its connections know only that schema), the timer's
    # failing read is logged once; a new opening is refused: no schema to create it in
    monkeypatch.setattr(_forgets, "DELETES_CHECK_S", 0.05)
    owner = await _database(pg_server, "drop")
    await _sql(owner, "CREATE SCHEMA tenant")
    store = PostgresMemoryStore(f"{owner}?search_path=tenant")
    try:
        await store.write(_kayak("alice", "a1"))
        await _sql(owner, "DROP SCHEMA tenant CASCADE")
        with pytest.raises(asyncpg.UndefinedTableError):
            await store.write(_kayak("bob", "b1"))
        with pytest.raises(asyncpg.PostgresError):
            await store.forget("alice")
        while not any("removals not read" in r["message"] for r in logs):
            await asyncio.sleep(0.05)  # the timer's next read (bounded by the test's timeout)
        await asyncio.sleep(0.3)  # a few more failing reads
        warned = [r for r in logs if r["level"].name == "WARNING" and "removals" in r["message"]]
        assert len(warned) == 1
    finally:
        await store.close()
    assert "messages" not in await _tables(owner, "public")
    again = PostgresMemoryStore(f"{owner}?search_path=tenant")
    try:
        with pytest.raises(StoreError, match="no schema on the search path"):
            await again.open()
    finally:
        await again.close()


async def test_a_role_without_usage_on_the_stores_schema(pg_server, logs):
    # an erasure job's role granted the tables' rights but not USAGE on public: without a
    # schema of its own, its opening is refused in words (before: "no schema has been
    # selected to create in" from the migration); with one (created for it), a new store
    # goes there and the opening WARNs that the database holds one in public
    owner = await _database(pg_server, "usage")
    name = owner.rsplit("/", 1)[1]
    store = PostgresMemoryStore(owner)
    try:
        await store.write(_kayak("alice", "a1"))
    finally:
        await store.close()
    role = f"{name}_job"
    await _sql(
        owner,
        f"CREATE ROLE {role} LOGIN",
        f"GRANT CONNECT, TEMPORARY ON DATABASE {name} TO {role}",
        f"GRANT SELECT, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
        "REVOKE ALL ON SCHEMA public FROM PUBLIC",
    )
    job_dsn = owner.replace("postgres@", f"{role}@", 1)
    job = PostgresMemoryStore(job_dsn)
    try:
        with pytest.raises(StoreError, match="no schema on the search path"):
            await job.open()
    finally:
        await job.close()
    await _sql(owner, f"CREATE SCHEMA {role} AUTHORIZATION {role}")
    job = PostgresMemoryStore(job_dsn)
    try:
        assert await job.forget("alice") == 0  # a new, empty store: nothing of public's
    finally:
        await job.close()
    warned = [r["message"] for r in logs if r["level"].name == "WARNING"]
    assert any(
        "no memory store on this role's search path" in m and "'public'" in m for m in warned
    )
    (left,) = await _sql(owner, "SELECT count(*) FROM public.messages")
    assert left[0][0] == 2


async def test_a_forked_childs_store_arms_its_own_timer(monkeypatch):
    # a process forked while a store's timer was armed: the child's copy of the running loop
    # runs nothing; the child's first use on its own loop arms a timer there (the pid tells)
    deletes = _forgets.Deletes()
    calls: list[int] = []

    async def read() -> int:
        calls.append(1)
        return 0

    def reader():
        return read

    deletes.watch(reader, lambda: None)
    assert deletes.watching
    parent = os.getpid()
    monkeypatch.setattr(_forgets.os, "getpid", lambda: parent + 1)  # "the child"
    assert not deletes.watching
    deletes._tasks.add(asyncio.get_running_loop().create_future())  # a read that never ends
    deletes.watch(reader, lambda: None)
    assert deletes.watching
    assert not deletes._tasks  # the parent's read under way is not waited for
    deletes.stop()


async def test_a_schema_name_that_needs_quoting(pg_server):
    # the role's default path (ALTER ROLE ... SET search_path) names a schema with capitals,
    # a space and a double quote: the store is made, pinned, forgotten in there, and its
    # definer functions' fixed path names it exactly
    owner = await _database(pg_server, "quote")
    name = owner.rsplit("/", 1)[1]
    schema = 'Ten "ant" A'
    quoted = '"Ten ""ant"" A"'
    await _sql(
        owner,
        f"CREATE ROLE {name}_r LOGIN",
        f"GRANT CONNECT, TEMPORARY ON DATABASE {name} TO {name}_r",
        f"CREATE SCHEMA {quoted} AUTHORIZATION {name}_r",
        f"ALTER ROLE {name}_r SET search_path = {quoted}",
    )
    store = PostgresMemoryStore(owner.replace("postgres@", f"{name}_r@", 1))
    try:
        await store.write(_kayak("alice", "a1"))
        assert store._schema == schema
        assert len(await store.search("kayak", user_id="alice")) == 1
        assert await store.forget("alice") >= 2
    finally:
        await store.close()
    (rows,) = await _sql(
        owner,
        "SELECT n.nspname, p.proconfig FROM pg_proc p "
        "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE p.prosecdef",
    )
    assert rows and all(n == schema for n, _ in rows)
    assert all(c == [f"search_path={quoted}, pg_temp"] for _, c in rows), rows
    (left,) = await _sql(owner, f"SELECT count(*) FROM {quoted}.messages")
    assert left[0][0] == 0

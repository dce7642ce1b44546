"""Attacks on the upgrade to schema v9 (6eff03e) of a PostgreSQL database with separate roles:
the owner (created the v8 tables), the application's role (SELECT, INSERT, UPDATE, DELETE on
every table, granted before the upgrade) and an erasure job's (SELECT and DELETE on every
table, the tombstone's INSERT and UPDATE, UPDATE on calls), and one more erasure role granted
the same after the upgrade (no EXECUTE on ``removals_fold``: its fold is refused and skipped
quietly, the documented behaviour).

Whoever upgrades (the owner's deploy, or the application itself opening first), afterwards
each role must do what it did on v8: the application searches, writes, forgets and purges,
the erasure jobs forget; no WARNING; the removals' sums right; the word index exactly a fresh
one's.
"""

from __future__ import annotations

import random
import time

import pytest

from pipecat_summarizer.store import open_store
from pipecat_summarizer.store._postgres_schema import EVERYONE
from pipecat_summarizer.store.base import SCHEMA_VERSION
from tests.attacks_s13.test_removals_roles import _sql
from tests.store.test_s14_forget_linear import _fill, _make_v8, _words

asyncpg = pytest.importorskip("asyncpg")

DAY = 86400.0


async def _v8_with_roles(
    pg_server, tag: str, create: str = ", CREATE"
) -> tuple[str, dict[str, str]]:
    """A v8 database (the v8 code's migrations, run by the owner) holding al's, bo's, cy's,
    di's and ed's messages (ed's 90 days old), and three roles; their DSNs by name."""
    name = f"s14_a_roles_{tag}_{random.randrange(10**9)}"
    dsn = pg_server.create_database(name)
    await _make_v8(dsn)
    now = time.time()
    conn = await asyncpg.connect(dsn)
    try:
        for user in ("al", "bo", "cy", "di"):
            await _fill(conn, user, 20, now - DAY, "card {i} zebra")
        await _fill(conn, "ed", 20, now - 90 * DAY, "card {i}")
    finally:
        await conn.close()
    roles = {k: f"pcs_{name}_{k}" for k in ("app", "job", "late")}
    erasure = (
        "GRANT SELECT, DELETE ON ALL TABLES IN SCHEMA public TO {r}",
        "GRANT INSERT, UPDATE ON forgotten TO {r}",
        "GRANT UPDATE ON calls TO {r}",
    )
    await _sql(
        dsn,
        *(f"CREATE ROLE {r} LOGIN" for r in roles.values()),
        *(f"GRANT CONNECT, TEMPORARY ON DATABASE {name} TO {r}" for r in roles.values()),
        # CREATE: every role's store.open() runs the migration's CREATE TABLE IF NOT EXISTS
        # (refused without it even at the current version before 24e8da6: S14-A-2)
        *(f"GRANT USAGE{create} ON SCHEMA public TO {r}" for r in roles.values()),
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {roles['app']}",
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {roles['app']}",
        *(g.format(r=roles["job"]) for g in erasure),
    )
    dsns = {k: dsn.replace("postgres@", f"{r}@", 1) for k, r in roles.items()}
    dsns["owner"] = dsn
    dsns["late_grants"] = ";".join(g.format(r=roles["late"]) for g in erasure)
    return dsn, dsns


async def _sum(dsn: str, user: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(
            "SELECT COALESCE(sum(n), 0) FROM removals WHERE bucket IN (left(md5($1), 3), $2)",
            user,
            EVERYONE,
        )
    finally:
        await conn.close()


@pytest.mark.parametrize("upgrader", ["owner", "app"])
async def test_attack_v9_each_role_works_after_the_upgrade(pg_server, logs, upgrader):
    dsn, dsns = await _v8_with_roles(pg_server, upgrader)
    if upgrader == "app":
        # a non-owner cannot replace the owner's trigger functions: the application's open
        # is refused, the migration rolled back whole (still v8, the old code runs on),
        # until the owner's deploy migrates (as for v8: its triggers need the owner too)
        first = open_store(dsns["app"])
        try:
            with pytest.raises(asyncpg.InsufficientPrivilegeError, match="must be owner"):
                await first.open()
        finally:
            await first.close()
        conn = await asyncpg.connect(dsn)
        try:
            assert await conn.fetchval("SELECT MAX(version) FROM schema_version") == 8
            assert (
                await conn.fetchval("SELECT count(*) FROM pg_proc WHERE proname = 'removals_fold'")
                == 0
            )
        finally:
            await conn.close()
    first = open_store(dsn)
    try:
        await first.open()  # the owner's deploy
    finally:
        await first.close()
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT MAX(version) FROM schema_version") == SCHEMA_VERSION
    finally:
        await conn.close()
    await _sql(dsn, *dsns["late_grants"].split(";"))  # after the upgrade
    app = open_store(dsns["app"])
    try:
        assert len(await app.search("card zebra", user_id="al", any_word=True, limit=50)) == 20
        assert await app.forget("al") == 20 + 1  # its messages and its call
        assert await app.purge_older_than(30) == 20 + 1  # ed's
        assert await app.search("card", user_id="al", limit=5) == []
    finally:
        await app.close()
    for who, user in (("job", "bo"), ("late", "cy")):
        store = open_store(dsns[who])
        try:
            assert await store.forget(user) == 20 + 1
        finally:
            await store.close()
    warnings = [r["message"] for r in logs if r["level"].name in ("WARNING", "ERROR")]
    assert warnings == []
    conn = await asyncpg.connect(dsn)
    try:
        have, fresh = await _words(conn)
        assert have == fresh and len(have) == 3 * 20  # di's three lexemes a message
        rows = await conn.fetch("SELECT bucket, n FROM removals ORDER BY bucket")
        print(f"\nremovals after the forgets and the purge: {[tuple(r) for r in rows]}")
    finally:
        await conn.close()
    # each forget, and the purge, one delete statement in its callers' buckets
    for user, want in (("al", 1), ("bo", 1), ("cy", 1), ("ed", 1)):
        assert await _sum(dsn, user) >= want


async def test_attack_v9_a_role_without_create_on_the_schema_opens_a_current_store(pg_server):
    # the least privilege an application or erasure job needs on an upgraded database:
    # USAGE on the schema, its tables' rights; nothing to create. S14-A-2: refused
    # ("permission denied for schema public") before 24e8da6
    dsn, dsns = await _v8_with_roles(pg_server, "nocreate", create="")
    owner = open_store(dsn)
    try:
        await owner.open()  # the owner's deploy: v9
    finally:
        await owner.close()
    for who in ("app", "job"):
        store = open_store(dsns[who])
        try:
            await store.open()
        finally:
            await store.close()

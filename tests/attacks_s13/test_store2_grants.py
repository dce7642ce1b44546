"""Migration 8 on PostgreSQL gives each role on ``removals`` what it holds on ``messages``
(S13-A-5): roles granted table by table before the upgrade, one with fewer privileges than
another, one with the grant option, and ``PUBLIC``; a read-only role (``SELECT`` on every
table) still searches by caller, which reads ``removals``.
"""

from __future__ import annotations

import json
import random
import time

import pytest

from pipecat_summarizer.store import open_store
from pipecat_summarizer.store.records import ArchivedMessage
from tests.attacks_s13.test_store_removals import _make_v7

asyncpg = pytest.importorskip("asyncpg")

PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")
TABLES = ("calls", "messages", "compactions", "facts", "caller_facts", "forgotten")


def _msg(i: int, at: float) -> ArchivedMessage:
    text = f"card {i}"
    return ArchivedMessage(
        call_id="a",
        position=i,
        role="user",
        content=text,
        message_json=json.dumps({"role": "user", "content": text}),
        turn=i // 2,
        at=at + i,
        user_id="al",
    )


async def test_store2_migration_8_copies_each_roles_grants_on_messages(pg_server):
    name = f"s13_grants_{random.randrange(10**9)}"
    dsn = pg_server.create_database(name)
    await _make_v7(dsn, [_msg(i, time.time() - 3600) for i in range(5)])
    app, reader, auditor, other = (f"pcs_{name}_{r}" for r in ("app", "reader", "aud", "other"))
    tables = ", ".join(TABLES)
    conn = await asyncpg.connect(dsn)
    try:
        for role in (app, reader, auditor, other):
            await conn.execute(f"CREATE ROLE {role} LOGIN")
            await conn.execute(f"GRANT CONNECT ON DATABASE {name} TO {role}")
        await conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {tables} TO {app}")
        await conn.execute(f"GRANT SELECT ON {tables}, message_words, schema_version TO {reader}")
        await conn.execute(f"GRANT SELECT ON messages TO {auditor} WITH GRANT OPTION")
        await conn.execute("GRANT REFERENCES ON messages TO PUBLIC")
        owner = open_store(dsn)
        try:
            await owner.open()  # the owner migrates to v8
        finally:
            await owner.close()
        held = {
            (role, table, p): await conn.fetchval(
                "SELECT has_table_privilege($1, $2, $3)", role, table, p
            )
            for role in (app, reader, auditor, other)
            for table in ("messages", "removals")
            for p in (*PRIVILEGES, "SELECT WITH GRANT OPTION")
        }
    finally:
        await conn.close()
    for role in (app, reader, auditor, other):
        on = {
            table: {p for p in (*PRIVILEGES, "SELECT WITH GRANT OPTION") if held[role, table, p]}
            for table in ("messages", "removals")
        }
        assert on["removals"] == on["messages"], role
    # what they were granted, and PUBLIC's REFERENCES: not more
    assert held[other, "removals", "REFERENCES"] and not held[other, "removals", "SELECT"]
    assert held[auditor, "removals", "SELECT WITH GRANT OPTION"]
    assert not held[reader, "removals", "INSERT"] and held[app, "removals", "DELETE"]

    store = open_store(dsn.replace("postgres@", f"{reader}@", 1), read_only=True)
    try:
        hits = await store.search("card", user_id="al")
    finally:
        await store.close()
    assert len(hits) == 5

"""A role that may only read and delete (``SELECT, DELETE ON ALL TABLES``: an operator's
retention or erasure job, which writes nothing) deletes a caller's messages. On v7 it
could; on v8 every delete of messages runs the removals trigger, which INSERTs into
``removals`` with the deleting role's rights (a2f1c83's form: INSERT only; 6a866ff's:
INSERT and UPDATE). Migration 8 copies the grants of ``messages`` onto ``removals``
(11db213): SELECT and DELETE, not INSERT, so the job's delete is refused.
"""

from __future__ import annotations

import random
import time

import pytest

from pipecat_summarizer.store import open_store
from tests.attacks_s13.test_removals_roles import _msg, _sql
from tests.attacks_s13.test_store_removals import _make_v7

asyncpg = pytest.importorskip("asyncpg")


@pytest.mark.parametrize(
    "schema",
    [
        "v7",  # the control: before the upgrade
        "v8",  # S13-B-3: refused before the removals triggers ran as their owner (1054ee1)
    ],
)
async def test_fold_a_delete_only_role_deletes_a_callers_messages(pg_server, schema):
    name = f"s13_fold_roles_{schema}_{random.randrange(10**9)}"
    dsn = pg_server.create_database(name)
    now = time.time()
    await _make_v7(dsn, [_msg("a", i, f"card {i}", now - 3600 + i, "al") for i in range(5)])
    role = f"pcs_{name}"
    await _sql(
        dsn,
        f"CREATE ROLE {role} LOGIN",
        f"GRANT CONNECT ON DATABASE {name} TO {role}",
        f"GRANT USAGE ON SCHEMA public TO {role}",
        f"GRANT SELECT, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
    )
    if schema == "v8":
        owner = open_store(dsn)
        try:
            await owner.open()  # the deploy: the owner migrates (grants copied)
        finally:
            await owner.close()
    conn = await asyncpg.connect(dsn.replace("postgres@", f"{role}@", 1))
    try:
        assert await conn.execute("DELETE FROM messages WHERE user_id = 'al'") == "DELETE 5"
    finally:
        await conn.close()

"""A retention purge run by an erasure job's role (SELECT and DELETE on every table, the
tombstone's INSERT and UPDATE: no INSERT on ``removals``) on an upgraded PostgreSQL store: the
purge must delete what is older than the retention, whoever folds ``removals`` afterwards. A
purge that fails leaves records kept past their retention."""

from __future__ import annotations

import pytest

from pipecat_summarizer.store import open_store
from tests.attacks_s14.test_attack_v9_roles import _sum, _v8_with_roles

asyncpg = pytest.importorskip("asyncpg")


async def test_attack_purge_by_an_erasure_role_deletes_what_is_past_retention(pg_server, logs):
    dsn, dsns = await _v8_with_roles(pg_server, "purge_job")
    owner = open_store(dsn)
    try:
        await owner.open()  # the owner's deploy migrates to the current version
    finally:
        await owner.close()
    job = open_store(dsns["job"])
    try:
        assert await job.purge_older_than(30) == 20 + 1  # ed's messages and call
        assert await job.search("card", user_id="ed", limit=5) == []
    finally:
        await job.close()
    assert await _sum(dsn, "ed") >= 1  # the purge's delete counted in ed's bucket
    errors = [r["message"] for r in logs if r["level"].name == "ERROR"]
    assert errors == []

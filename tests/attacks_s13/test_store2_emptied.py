"""PostgreSQL's removals rows deleted by anything but a purge's fold, or truncated (an
operator's "reset", S13-A-4), make everyone's removals jump by a random amount: a sum that
restarted from what was left would come back to a value a count was kept at. The fold,
which puts each bucket's sum back, changes no sum.
"""

from __future__ import annotations

import json
import time

import pytest

from pipecat_summarizer.store import open_store
from pipecat_summarizer.store._postgres_schema import EVERYONE, REMOVALS_OF
from pipecat_summarizer.store.records import ArchivedMessage

DAY = 86400.0


def _msg(call: str, i: int, at: float, user: str) -> ArchivedMessage:
    return ArchivedMessage(
        call_id=call,
        position=i,
        role="user",
        content=f"card {i}",
        message_json=json.dumps({"role": "user", "content": f"card {i}"}),
        at=at,
        user_id=user,
    )


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("reset", ["none", "DELETE", "DELETE al", "TRUNCATE"])
async def test_store2_postgres_removals_reset_jumps_everyones(store_target, reset):
    import asyncpg

    store = open_store(store_target)
    conn = await asyncpg.connect(store_target)
    old = time.time() - 90 * DAY
    sums = (
        f"SELECT COALESCE(sum(n), 0)::int8 FROM removals WHERE bucket IN "
        f"({REMOVALS_OF.format(user='$1')}, '{EVERYONE}')"
    )
    try:
        for user in ("al", "bo"):
            for k in range(3):  # three deletes each: three rows in their buckets
                await store.write([_msg(f"{user}{k}", 0, old, user)])
                await conn.execute("DELETE FROM messages WHERE call_id = $1", f"{user}{k}")
        before = {u: await conn.fetchval(sums, u) for u in ("al", "bo")}
        await store.write([_msg("old", 0, old, "cy")])
        assert await store.purge_older_than(30) == 1  # folds the rows: sums unchanged
        folded = {u: await conn.fetchval(sums, u) for u in ("al", "bo")}
        rows = await conn.fetchval("SELECT count(*) FROM removals")
        if reset == "DELETE":
            await conn.execute("DELETE FROM removals")
        elif reset == "DELETE al":
            await conn.execute(
                f"DELETE FROM removals WHERE bucket = {REMOVALS_OF}".format(user="'al'")
            )
        elif reset == "TRUNCATE":
            await conn.execute("TRUNCATE removals")
        after = {u: await conn.fetchval(sums, u) for u in ("al", "bo")}
        everyone = await conn.fetch("SELECT n FROM removals WHERE bucket = $1", EVERYONE)
    finally:
        await conn.close()
        await store.close()
    assert before == {"al": 3, "bo": 3}
    assert folded == {"al": 3, "bo": 3} and rows == 3  # al's, bo's, cy's
    if reset == "none":
        assert after == folded and everyone == []
    else:
        assert len(everyone) == 1 and everyone[0]["n"] >= 1
        # a jump no run of deletes from where the sums were left would make by chance
        assert all(after[u] != folded[u] for u in after)

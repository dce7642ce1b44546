"""PostgreSQL's removals grow by a row per deleting statement and bucket (a2f1c83) until a
purge folds them: a fleet that forgets and deletes but never purges (no retention_days)
never folded (S13-B-2) until a forget folded its own bucket once committed (S14). How many
rows a bucket gets, what a caller can add to their own bucket, and what a search's read of
the sum costs as the rows grow (figures printed with -s, never asserted: a noisy machine).

A caller's turns delete nothing (writes are upserts; recall only reads): their messages go
only by a forget (the application's, on their request), a purge or an operator's delete.
A forget adds one row to the caller's bucket when it deletes a message of theirs, none
when it deletes none: a caller grows their bucket by one row per forget after at least
one new message, i.e. at most one per call they make.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import pytest

from pipecat_summarizer.store import open_store
from pipecat_summarizer.store._postgres_schema import EVERYONE, REMOVALS_OF
from pipecat_summarizer.store.records import CallRecord
from tests.attacks_s13.test_fold_races import _at, _fresh
from tests.attacks_s13.test_store_removals import _backfilled, _keys, _msg

asyncpg = pytest.importorskip("asyncpg")
pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)

DAY = 86400.0
_SUM = (
    f"SELECT COALESCE(sum(n), 0)::int8 FROM removals "
    f"WHERE bucket IN ({REMOVALS_OF.format(user='$1')}, '{EVERYONE}')"
)


async def test_fold_rows_per_forget_without_a_purge(store_target):
    # each forget that deletes a message of the twin's (al's bucket) adds one row, and folds
    # the bucket once committed (S13-B-2: a row each until a purge folded them); one that
    # deletes nothing adds none; a purge (even deleting nothing) keeps the folded row
    twin = "al-twin-4325"
    store = open_store(store_target)
    conn = await asyncpg.connect(store_target)
    try:
        for k in range(5):
            await asyncio.sleep(0.05)  # a new call, started after the last forget: written
            start = time.time()
            await store.write(
                [CallRecord(f"t-{k}", user_id=twin, started_at=start)]
                + [_msg(f"t-{k}", i, f"card {i}", start, twin) for i in range(3)]
            )
            await asyncio.sleep(0.05)
            assert await store.forget(twin) == 4  # the call and its messages
            assert await store.forget(twin) == 0  # nothing of theirs left: no row
        rows = await conn.fetch("SELECT bucket, n FROM removals")
        assert [tuple(r) for r in rows] == [("972", 5)]
        assert await conn.fetchval(_SUM, "al") == 5
        assert await store.purge_older_than(365) == 0
        assert [tuple(r) for r in await conn.fetch("SELECT bucket, n FROM removals")] == [
            ("972", 5)
        ]
    finally:
        await conn.close()
        await store.close()


async def _plan(conn) -> str:
    """The sum's plan (al's bucket), its scan node, heap fetches and buffers."""
    sql = "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, SUMMARY ON) " + _SUM.replace("$1", "'al'")
    lines = [r[0] for r in await conn.fetch(sql)]
    keep = ("Scan", "Heap Fetches", "Execution Time")
    return " | ".join(line.strip() for line in lines if any(k in line for k in keep))


async def test_fold_search_cost_as_al_bucket_grows(store_target):
    # al's bucket at 10, 1,000 and 50,000 rows (inserted as the trigger would, by many
    # deleting statements): each search by al sums them. Printed: the sum's plan (index
    # only? heap fetches?) before and after a VACUUM, and a search's median time with its
    # counts kept; the sum and the hits stay right
    store = open_store(store_target)
    conn = await asyncpg.connect(store_target)
    now = time.time()
    try:
        await _backfilled(store, now)
        bucket = await conn.fetchval(f"SELECT {REMOVALS_OF.format(user='$1')}", "al")
        # other buckets' rows as a fleet's: 4,000 callers' forgets
        await conn.execute(
            "INSERT INTO removals SELECT left(md5('c' || g), 3), 1 FROM generate_series(1, 4000) g"
        )
        have = 0
        print()
        for rows in (10, 1_000, 50_000):
            await conn.execute(
                "INSERT INTO removals SELECT $1, 1 FROM generate_series(1, $2)", bucket, rows - have
            )
            have = rows
            total = await conn.fetchval(_SUM, "al")
            assert total >= rows
            for vacuumed in (False, True):
                if vacuumed:
                    await conn.execute("VACUUM (ANALYZE) removals")
                await store.search("card zebra", user_id="al", any_word=True, limit=20)
                assert _at(store) == total
                times = []
                for _ in range(15):
                    t = time.perf_counter()
                    hits = await store.search("card zebra", user_id="al", any_word=True, limit=20)
                    times.append((time.perf_counter() - t) * 1000)
                assert _keys(hits) == await _fresh(store_target)
                print(
                    f"al's bucket {rows:>6} rows, vacuumed={vacuumed!s:5}: search median "
                    f"{statistics.median(times):7.2f} ms; sum: {await _plan(conn)}"
                )
    finally:
        await conn.close()
        await store.close()


async def test_fold_a_fleet_that_never_purges_keeps_few_rows(store_target):
    # a fleet without retention_days (no purge ever runs): 10 forgets of callers of al's
    # bucket (each after a call of theirs). S13-B-2: al's bucket held a row per forget, the
    # rows a search by al sums grew without bound (see the figures above for their cost);
    # now each forget folds its bucket once it committed (FOLD_BUCKETS)
    store = open_store(store_target)
    conn = await asyncpg.connect(store_target)
    twin = "al-twin-4325"
    try:
        for k in range(10):
            await asyncio.sleep(0.05)
            start = time.time()
            await store.write(
                [
                    CallRecord(f"t-{k}", user_id=twin, started_at=start),
                    _msg(f"t-{k}", 0, "hi", start, twin),
                ]
            )
            await asyncio.sleep(0.05)
            assert await store.forget(twin) == 2
        assert await conn.fetchval(_SUM, "al") == 10
        assert await conn.fetchval("SELECT count(*) FROM removals") <= 2
    finally:
        await conn.close()
        await store.close()

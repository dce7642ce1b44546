"""Attacks on PostgreSQL's fold after a forget (S13-B-2 fixed): once a forget committed, the
store folds the forgotten caller's bucket of ``removals`` (and ``EVERYONE``'s) in a short
transaction of its own, under the try-lock a purge folds under (``FOLD_KEY``), never
waiting (``_postgres_writes.fold_after_forget``, ``FOLD_BUCKETS``).

What must stay true (as for a purge's fold, tests/attacks_s13/test_fold_races.py): the sum a
search reads never goes down nor stands still across a delete, a delete racing the fold is
counted once, a worker that kept its counts finds what a fresh store finds at every step, a
forget rolled back folds nothing, a fold that finds the lock taken waits for nothing, and a
role that may forget but not write ``removals`` still forgets, and folds (schema v9).
SQLite needs no fold: its removals are one count per file, bumped in place.

The twins: callers whose bucket is al's (``left(md5(id), 3)``), so that their forgets add to
the sum al's searches read.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import random
import time

import pytest

from pipecat_summarizer.store import _postgres_writes, open_store
from pipecat_summarizer.store._postgres_schema import EVERYONE, FOLD_BUCKETS, FOLD_KEY
from pipecat_summarizer.store.records import CallRecord
from tests.attacks_s13.test_fold_races import (
    HANG_S,
    IMPORT,
    _at,
    _hold_fold,
    _rows,
    _same,
    _setup,
    _Sums,
)
from tests.attacks_s13.test_removals_roles import _sql
from tests.attacks_s13.test_store_removals import _al_says_zebra, _kept, _make_v7, _msg

asyncpg = pytest.importorskip("asyncpg")

AL = hashlib.md5(b"al").hexdigest()[:3]  # al's bucket: "972"


def _twins(n: int) -> list[str]:
    """``n`` callers of al's bucket."""
    found = []
    for k in itertools.count():
        name = f"twin-{k}"
        if hashlib.md5(name.encode()).hexdigest()[:3] == AL:
            found.append(name)
            if len(found) == n:
                return found
    raise AssertionError("unreachable")


async def _a_call_of(store, twin: str, call: str) -> None:
    """A finished call of ``twin`` (before now: a forget deletes it), one message."""
    at = time.time() - 10
    await store.write(
        [CallRecord(call, user_id=twin, started_at=at), _msg(call, 0, "hi", at, twin)]
    )


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_fold_a_forget_finds_the_fold_lock_held(store_target):
    # a purge's fold holds the try-lock (folded, not committed): a twin's forget deletes,
    # commits, finds the lock taken and returns without waiting for the purge (a hang
    # detector, no timing); its row is left unfolded and counts. Once the purge commits,
    # the next forget folds the bucket into one row; the sum moves only with the deletes
    folder, conn = await asyncpg.connect(store_target), await asyncpg.connect(store_target)
    sums, now = _Sums(store_target), time.time()
    worker = await _setup(store_target, conn, now)
    first, second = _twins(2)
    try:
        await _a_call_of(worker, first, "t1")
        await _a_call_of(worker, second, "t2")
        assert await _hold_fold(folder)
        assert await asyncio.wait_for(worker.forget(first), HANG_S) == 2
        assert await _rows(conn) == [(AL, 1)] * 4  # the fold's deletes not committed
        assert await sums.read() == 4
        await _al_says_zebra(worker, now)
        await _same(worker, store_target)
        await folder.execute("COMMIT")
        assert await _rows(conn) == [(AL, 1), (AL, 3)]
        assert await sums.read() == 4
        await _same(worker, store_target)
        assert await worker.forget(second) == 2
        assert await _rows(conn) == [(AL, 5)]  # folded by the forget, no purge
        assert await sums.read() == 5
        await _same(worker, store_target)
    finally:
        if folder.is_in_transaction():
            await folder.execute("ROLLBACK")
        await worker.close()
        await folder.close()
        await conn.close()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_fold_a_delete_held_open_in_the_bucket_while_a_forget_folds(store_target):
    # al's delete of the import is held open (not committed) in the bucket a twin's forget
    # folds: the fold neither waits for it nor reads its row; once it commits its row is
    # there, counted once: the sum is every deleting statement's
    held, conn = await asyncpg.connect(store_target), await asyncpg.connect(store_target)
    sums, now = _Sums(store_target), time.time()
    worker = await _setup(store_target, conn, now)
    (twin,) = _twins(1)
    try:
        await _a_call_of(worker, twin, "t1")
        await held.execute("BEGIN")
        assert await held.execute(IMPORT) == "DELETE 3050"
        assert await asyncio.wait_for(worker.forget(twin), HANG_S) == 2
        assert await _rows(conn) == [(AL, 4)]  # the setup's 3 and the forget's, folded
        assert await sums.read() == 4
        await _same(worker, store_target)
        await held.execute("COMMIT")
        assert sorted(await _rows(conn)) == [(AL, 1), (AL, 4)]
        assert await sums.read() == 5
        await _al_says_zebra(worker, now)
        await _same(worker, store_target)
    finally:
        if held.is_in_transaction():
            await held.execute("ROLLBACK")
        await worker.close()
        await held.close()
        await conn.close()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_fold_forgets_deletes_and_purges_at_once_count_every_delete(store_target):
    # six twins forgotten by three store objects, al's single deletes and two purges, all at
    # once and again: every fold that runs keeps the sum, none takes a delete's row away or
    # counts it twice; at the end the sum is the number of deleting statements, and the
    # bucket is folded by the next forget
    conn = await asyncpg.connect(store_target)
    deleter = await asyncpg.connect(store_target)
    sums, now = _Sums(store_target), time.time()
    worker = await _setup(store_target, conn, now)
    stores = [open_store(store_target) for _ in range(3)]
    twins = _twins(7)
    try:
        for i, twin in enumerate(twins):
            await _a_call_of(worker, twin, f"t{i}")
        positions = iter(range(3, 40))

        async def al_deletes() -> None:
            for _ in range(3):
                status = await deleter.execute(
                    "DELETE FROM messages WHERE call_id = 'recent-0' AND position = $1",
                    next(positions),
                )
                assert status == "DELETE 1"

        for round_ in range(2):
            batch = twins[3 * round_ : 3 * round_ + 3]
            await asyncio.wait_for(
                asyncio.gather(
                    *(s.forget(t) for s, t in zip(stores, batch, strict=True)),
                    al_deletes(),
                    stores[round_].purge_older_than(365),
                ),
                HANG_S,
            )
            await sums.read()
            await _same(worker, store_target)
        assert await sums.read() == 3 + 6 + 6  # the setup's, the forgets', al's deletes
        assert await worker.forget(twins[6]) == 2
        assert await _rows(conn) == [(AL, 16)]
        assert await sums.read() == 16
        await _al_says_zebra(worker, now)
        await _same(worker, store_target)
    finally:
        for s in stores:
            await s.close()
        await worker.close()
        await deleter.close()
        await conn.close()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_fold_a_search_between_the_forget_and_its_fold(store_target, monkeypatch):
    # the fold held back after the forget committed: a search then reads the forget's row
    # unfolded (the sum moved: the kept count is counted again), one after the fold reads
    # the folded row (the same sum: the count kept between the two stands and is right)
    conn = await asyncpg.connect(store_target)
    sums, now = _Sums(store_target), time.time()
    worker = await _setup(store_target, conn, now)
    (twin,) = _twins(1)
    fold = _postgres_writes.fold_after_forget
    committed, go = asyncio.Event(), asyncio.Event()
    folded: list[bool] = []

    async def held_fold(c, user_id: str) -> bool:
        committed.set()
        await go.wait()
        folded.append(await fold(c, user_id))
        return folded[-1]

    monkeypatch.setattr(_postgres_writes, "fold_after_forget", held_fold)
    try:
        await _a_call_of(worker, twin, "t1")
        await conn.execute(IMPORT)  # "card" rare again: a stale count would rank it wrongly
        assert await sums.read() == 4
        await _same(worker, store_target)
        forgetting = asyncio.ensure_future(worker.forget(twin))
        await asyncio.wait_for(committed.wait(), HANG_S)
        assert await _rows(conn) == [(AL, 1)] * 5  # committed, not folded
        assert await sums.read() == 5
        await _al_says_zebra(worker, now)
        await _same(worker, store_target)
        assert _at(worker) in (None, 5)
        kept = _kept(worker, "card")
        go.set()
        assert await asyncio.wait_for(forgetting, HANG_S) == 2
        assert folded == [True]
        assert await _rows(conn) == [(AL, 5)]
        assert await sums.read() == 5
        await _same(worker, store_target)
        assert _kept(worker, "card") == kept  # the same sum: reused
    finally:
        go.set()
        await worker.close()
        await conn.close()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_fold_a_search_while_a_forgets_fold_is_open(store_target, monkeypatch):
    # a forget's fold run by hand as the store runs it (the try-lock, then FOLD_BUCKETS) and
    # left open: a search meanwhile reads the unfolded rows, one after its commit the folded
    # row: one sum, so the count kept after the forget stands (and is right); a delete
    # committed while the fold is open is left out of it and counted
    folder, conn = await asyncpg.connect(store_target), await asyncpg.connect(store_target)
    sums, now = _Sums(store_target), time.time()
    worker = await _setup(store_target, conn, now)
    (twin,) = _twins(1)

    async def no_fold(c, user_id: str) -> bool:
        return False

    monkeypatch.setattr(_postgres_writes, "fold_after_forget", no_fold)
    try:
        await _a_call_of(worker, twin, "t1")
        assert await worker.forget(twin) == 2
        assert await sums.read() == 4
        await _same(worker, store_target)
        kept = _kept(worker, "card")
        await folder.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        assert await folder.fetchval("SELECT pg_try_advisory_xact_lock($1)", FOLD_KEY)
        assert await folder.execute(FOLD_BUCKETS, twin) == "INSERT 0 1"
        assert await _rows(conn) == [(AL, 1)] * 4  # not committed: the old rows
        assert await sums.read() == 4
        await _same(worker, store_target)
        assert _kept(worker, "card") == kept
        assert await conn.execute(IMPORT) == "DELETE 3050"  # committed during the fold
        assert await sums.read() == 5
        await _al_says_zebra(worker, now)
        await _same(worker, store_target)
        kept = _kept(worker, "card")
        await folder.execute("COMMIT")
        assert await _rows(conn) == [(AL, 1), (AL, 4)]
        assert await sums.read() == 5
        await _same(worker, store_target)
        assert _kept(worker, "card") == kept
    finally:
        if folder.is_in_transaction():
            await folder.execute("ROLLBACK")
        await worker.close()
        await folder.close()
        await conn.close()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_fold_a_forget_rolled_back_folds_nothing(store_target, monkeypatch):
    # the forget's last statement (its tombstone) fails: the transaction is rolled back, its
    # deletes and their row with it; no fold runs (the setup's three rows stay as they are)
    conn = await asyncpg.connect(store_target)
    sums, now = _Sums(store_target), time.time()
    worker = await _setup(store_target, conn, now)
    (twin,) = _twins(1)
    folds: list[str] = []
    fold = _postgres_writes.fold_after_forget

    async def spied(c, user_id: str) -> bool:
        folds.append(user_id)
        return await fold(c, user_id)

    monkeypatch.setattr(_postgres_writes, "fold_after_forget", spied)
    monkeypatch.setattr(
        _postgres_writes, "tombstone_statement", lambda mark: "SELECT $1::text, $2::float8, 1 / 0"
    )
    try:
        await _a_call_of(worker, twin, "t1")
        with pytest.raises(asyncpg.DivisionByZeroError):
            await worker.forget(twin)
        assert folds == []
        assert await _rows(conn) == [(AL, 1)] * 3
        assert await sums.read() == 3
        assert [c.call_id for c in await worker.calls(twin)] == ["t1"]
        await _same(worker, store_target)
    finally:
        await worker.close()
        await conn.close()


async def test_fold_a_role_that_may_not_write_removals_still_forgets(pg_server, logs):
    # an erasure job's role, granted before the upgrade what a forget uses (SELECT and DELETE
    # on every table, the tombstone's INSERT and UPDATE, UPDATE on calls for its row locks):
    # migration 8 gives it SELECT and DELETE on removals (what it holds on messages), not
    # INSERT. Since v9 (S14-S-2) its forget folds all the same, through removals_fold (the
    # owner's rights, EXECUTE granted to the roles holding DELETE on messages). A role
    # granted DELETE after the upgrade has no EXECUTE: its forget deletes and commits, the
    # fold is refused and skipped quietly (a DEBUG line, no WARNING), the sum right; the
    # next fold by a role that may folds its row.
    name = f"s14_fold_role_{random.randrange(10**9)}"
    dsn = pg_server.create_database(name)
    now = time.time()
    first, second, third, fourth = _twins(4)
    await _make_v7(
        dsn,
        [_msg("a", i, f"card {i}", now - 3600 + i, "al") for i in range(3)]
        + [_msg(f"t-{t}", 0, "hi", now - 60, t) for t in (first, second, third, fourth)],
    )
    role, late = f"pcs_{name}", f"pcs_{name}_late"
    grants = (
        "GRANT SELECT, DELETE ON ALL TABLES IN SCHEMA public TO {r}",
        "GRANT INSERT, UPDATE ON forgotten TO {r}",
        "GRANT UPDATE ON calls TO {r}",
    )
    await _sql(
        dsn,
        *(f"CREATE ROLE {r} LOGIN" for r in (role, late)),
        *(f"GRANT CONNECT, TEMPORARY ON DATABASE {name} TO {r}" for r in (role, late)),
        *(f"GRANT USAGE, CREATE ON SCHEMA public TO {r}" for r in (role, late)),
        *(g.format(r=role) for g in grants),
    )
    owner = open_store(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        await owner.open()  # the deploy: the owner migrates to v9 (grants copied)
        assert await conn.fetchval(
            "SELECT has_table_privilege($1, 'removals', 'DELETE') "
            "AND NOT has_table_privilege($1, 'removals', 'INSERT')",
            role,
        )
        await _sql(dsn, *(g.format(r=late) for g in grants))  # after the upgrade
        assert await owner.forget(first) == 1  # the owner's: one row, nothing to fold
        job = open_store(dsn.replace("postgres@", f"{role}@", 1))
        try:
            assert await job.forget(second) == 1
        finally:
            await job.close()
        assert await _rows(conn) == [(AL, 2)]  # folded by the job's forget
        assert not [r for r in logs if "fold" in r["message"].lower()]
        job = open_store(dsn.replace("postgres@", f"{late}@", 1))
        try:
            assert await job.forget(third) == 1
        finally:
            await job.close()
        assert sorted(await _rows(conn)) == [(AL, 1), (AL, 2)]  # not folded: refused
        assert [r for r in logs if "not folded" in r["message"]]
        assert not [
            r for r in logs if r["level"].name == "WARNING" and "fold" in r["message"].lower()
        ]
        assert await owner.forget(fourth) == 1
        assert await _rows(conn) == [(AL, 4)]
        assert (
            await conn.fetchval(
                f"SELECT sum(n) FROM removals WHERE bucket IN ($1, '{EVERYONE}')", AL
            )
            == 4
        )
        assert len(await owner.search("card", user_id="al")) == 3
    finally:
        await conn.close()
        await owner.close()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_fold_a_forget_folds_everyones_rows_too(store_target):
    # an operator's UPDATE of content (a redaction) counts as everyone's removal, a row each
    # time, read by every caller's search: a forget folds EVERYONE's rows with its own bucket's
    conn = await asyncpg.connect(store_target)
    now = time.time()
    worker = await _setup(store_target, conn, now)
    (twin,) = _twins(1)
    try:
        await _a_call_of(worker, twin, "t1")
        for i in range(3):
            await conn.execute(
                "UPDATE messages SET content = 'redacted' WHERE call_id = 'recent-1' "
                "AND position = $1",
                i,
            )
        assert await worker.forget(twin) == 2
        assert sorted(await _rows(conn)) == [(EVERYONE, 3), (AL, 4)]
        await _same(worker, store_target)
    finally:
        await worker.close()
        await conn.close()

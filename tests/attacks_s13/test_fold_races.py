"""Attacks on PostgreSQL's removals in their second form (a2f1c83, dad1c4c): the trigger only
inserts ``(bucket, 1)`` per deleting statement, a search sums its bucket's rows and
EVERYONE's in its one statement, and a purge folds each bucket's committed rows into one
(``FOLD_REMOVALS``) under a try-lock (``FOLD_KEY``).

The promise attacked: after a removal, the sum a search reads never comes back to a value a
kept count was taken at, whatever a fold races (a search, a delete committing during it, a
delete held open, a rollback, another purge); and after each case a worker that kept its
counts finds what a fresh store finds. A fold is held open by running a purge's statements
by hand on a connection of the test's.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from pipecat_summarizer.store import open_store
from pipecat_summarizer.store._postgres_schema import FOLD_KEY, FOLD_REMOVALS, REMOVALS_OF
from pipecat_summarizer.store._statements import purge_cutoff, purge_statements
from tests.attacks_s13.test_store_removals import (
    _al_says_zebra,
    _backfilled,
    _kept,
    _keys,
    _removals,
)

asyncpg = pytest.importorskip("asyncpg")
pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)

#: A hang detector, far past any wait the operation could have by design.
HANG_S = 30.0
#: al's old "card" messages (``_backfilled``'s import, 90 days back): deleting them makes
#: "card" rare again, so a count kept from before ranks it wrongly (misses al's new ones).
IMPORT = "DELETE FROM messages WHERE user_id = 'al' AND call_id LIKE 'import-%'"


async def _fresh(target: str, query: str = "card zebra") -> list[tuple[str, int]]:
    """What a store object that kept nothing finds."""
    fresh = open_store(target)
    try:
        return _keys(await fresh.search(query, user_id="al", any_word=True, limit=20))
    finally:
        await fresh.close()


async def _same(worker, target: str) -> None:
    """The worker (kept counts) finds what a fresh store finds."""
    got = _keys(await worker.search("card zebra", user_id="al", any_word=True, limit=20))
    assert got == await _fresh(target)


async def _rows(conn) -> list[tuple[str, int]]:
    return [tuple(r) for r in await conn.fetch("SELECT bucket, n FROM removals ORDER BY 1, 2")]


async def _hold_fold(conn, days: float | None = None) -> bool:
    """Start a transaction on ``conn`` running a purge's statements (``days``; none without)
    and its fold, as ``_postgres_writes.purge`` does, and leave it open; whether it folded."""
    await conn.execute("BEGIN")
    if days is not None:
        for sql, _ in purge_statements("$"):
            await conn.execute(sql, purge_cutoff(days))
    if await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", FOLD_KEY):
        await conn.execute(FOLD_REMOVALS)
        return True
    return False


async def _setup(target: str, conn, now: float):
    """al's archive (``_backfilled``), three single deletes of al's (three rows in al's
    bucket to fold), and a worker that counted "card" (kept at their sum, 3)."""
    worker = open_store(target)
    await _backfilled(worker, now)
    for i in range(3):
        await conn.execute(
            "DELETE FROM messages WHERE call_id = 'recent-0' AND position = $1", 40 + i
        )
    assert await conn.fetchval("SELECT count(*) FROM removals") == 3
    await worker.search("card zebra", user_id="al", any_word=True, limit=20)
    assert _at(worker) == 3
    return worker


def _at(worker) -> int | None:
    """The removals the worker's kept count of "card" was taken at (``None``: none kept)."""
    kept = _kept(worker, "card")
    return None if kept is None else kept[3]


class _Sums:
    """The sums al's searches read, in order: once past a value, never back to it."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.seen: list[int] = []

    async def read(self) -> int:
        n = await _removals(self.target)
        assert not self.seen or n >= self.seen[-1], (self.seen, n)
        self.seen.append(n)
        return n


async def test_fold_a_delete_commits_while_a_fold_is_open(store_target):
    # the fold's snapshot is taken before al's delete of the import commits; the delete's
    # row is not the fold's, is left, and counts: the sum after the fold's commit is the
    # folded 3 plus it, 4: the worker's count kept at 3 is counted again, its count kept at
    # 4 (taken between the two commits) stands and is right. A search runs at each step.
    folder, deleter = await asyncpg.connect(store_target), await asyncpg.connect(store_target)
    sums, now = _Sums(store_target), time.time()
    worker = await _setup(store_target, deleter, now)
    try:
        assert await _hold_fold(folder)
        assert await sums.read() == 3  # the fold's deletes not committed: the old rows
        await _same(worker, store_target)
        assert await asyncio.wait_for(deleter.execute(IMPORT), HANG_S) == "DELETE 3050"
        assert await sums.read() == 4
        await _al_says_zebra(worker, now)
        await _same(worker, store_target)  # counted again at 4
        assert _at(worker) in (None, 4)
        await folder.execute("COMMIT")
        assert await _rows(folder) == [("972", 1), ("972", 3)]
        assert await sums.read() == 4
        await _same(worker, store_target)
        assert await worker.purge_older_than(30) > 0  # the mid messages: folds again
        assert await _rows(folder) == [("972", 5)]
        assert await sums.read() == 5
        await _same(worker, store_target)
    finally:
        await worker.close()
        await folder.close()
        await deleter.close()


async def test_fold_a_search_before_and_after_a_fold_reads_one_sum(store_target):
    # a search whose snapshot is before the fold's commit reads the rows, one after it the
    # folded row: the same sum, so the kept count stands (and is right: nothing went)
    folder, conn = await asyncpg.connect(store_target), await asyncpg.connect(store_target)
    sums, now = _Sums(store_target), time.time()
    worker = await _setup(store_target, conn, now)
    try:
        kept = _kept(worker, "card")
        assert await _hold_fold(folder)
        await _same(worker, store_target)
        assert _kept(worker, "card") == kept  # reused, not counted again
        # a search held open over the commit: its snapshot (REPEATABLE READ) from before
        await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        assert await conn.fetchval("SELECT sum(n) FROM removals") == 3
        await folder.execute("COMMIT")
        assert await conn.fetchval("SELECT sum(n) FROM removals") == 3
        assert await conn.fetchval("SELECT count(*) FROM removals") == 3  # the old rows
        await conn.execute("COMMIT")
        assert await _rows(conn) == [("972", 3)]
        assert await sums.read() == 3
        await _same(worker, store_target)
        assert _kept(worker, "card") == kept
        await conn.execute(IMPORT)
        assert await sums.read() == 4
        await _al_says_zebra(worker, now)
        await _same(worker, store_target)
    finally:
        await worker.close()
        await folder.close()
        await conn.close()


async def test_fold_a_purge_folds_while_a_delete_is_held_open(store_target):
    # al's delete of the import is held open (a forget-like transaction never committed):
    # the store's purge does not wait for it (its fold reads no row of it), folds the rest;
    # once the delete commits its row is there, counted once: the worker counts again
    held, conn = await asyncpg.connect(store_target), await asyncpg.connect(store_target)
    sums, now = _Sums(store_target), time.time()
    worker = await _setup(store_target, conn, now)
    try:
        await held.execute("BEGIN")
        assert await held.execute(IMPORT) == "DELETE 3050"
        admin = open_store(store_target)
        try:
            # (365: none of the held rows, which a purge deleting them would wait for, as before v8)
            assert await asyncio.wait_for(admin.purge_older_than(365), HANG_S) == 0
        finally:
            await admin.close()
        assert await _rows(conn) == [("972", 3)]  # folded, the held row not seen
        assert await sums.read() == 3
        await _same(worker, store_target)  # nothing committed went: the count stands
        await held.execute("COMMIT")
        assert sorted(await _rows(conn)) == [("972", 1), ("972", 3)]
        assert await sums.read() == 4
        await _al_says_zebra(worker, now)
        await _same(worker, store_target)
    finally:
        if held.is_in_transaction():
            await held.execute("ROLLBACK")
        await worker.close()
        await held.close()
        await conn.close()


async def test_fold_a_purge_rolled_back_after_its_fold(store_target):
    # a purge (al's import and mid messages, 90 and 45 days back) that folded, rolled back:
    # rows, sums and messages as before; the kept count stands and is right; the next
    # purge's fold counts its own delete once
    folder, conn = await asyncpg.connect(store_target), await asyncpg.connect(store_target)
    sums, now = _Sums(store_target), time.time()
    worker = await _setup(store_target, conn, now)
    try:
        kept = _kept(worker, "card")
        assert await _hold_fold(folder, 30)
        assert await folder.fetchval("SELECT sum(n) FROM removals") == 4  # its own row
        await folder.execute("ROLLBACK")
        assert await _rows(conn) == [("972", 1)] * 3
        assert await sums.read() == 3
        await _al_says_zebra(worker, now)
        await _same(worker, store_target)
        assert _kept(worker, "card") == kept
        assert await worker.purge_older_than(30) == 3550
        assert await _rows(conn) == [("972", 4)]
        assert await sums.read() == 4
        await _same(worker, store_target)
    finally:
        await worker.close()
        await folder.close()
        await conn.close()


async def test_fold_two_purges_at_once_one_folds(store_target):
    # a purge holds the try-lock (folded, not committed); another purge at once deletes al's
    # old messages, finds the lock taken, folds nothing and waits for nothing; each
    # commit adds to the sum, none takes it back; a third purge folds the lot
    folder, conn = await asyncpg.connect(store_target), await asyncpg.connect(store_target)
    sums, now = _Sums(store_target), time.time()
    worker = await _setup(store_target, conn, now)
    try:
        assert await _hold_fold(folder, 365)
        admin = open_store(store_target)
        try:
            assert await asyncio.wait_for(admin.purge_older_than(30), HANG_S) == 3550
        finally:
            await admin.close()
        assert await _rows(conn) == [("972", 1)] * 4  # not folded
        assert await sums.read() == 4
        await _al_says_zebra(worker, now)
        await _same(worker, store_target)
        await folder.execute("COMMIT")
        assert await _rows(conn) == [("972", 1), ("972", 3)]
        assert await sums.read() == 4
        await _same(worker, store_target)
        assert await worker.purge_older_than(30) == 0
        assert await _rows(conn) == [("972", 4)]
        assert await sums.read() == 4
        await _same(worker, store_target)
    finally:
        if folder.is_in_transaction():
            await folder.execute("ROLLBACK")
        await worker.close()
        await folder.close()
        await conn.close()


async def test_fold_a_purge_that_deletes_nothing_folds(store_target):
    # chosen (dad1c4c): a purge folds whether or not it deleted anything, so a fleet whose
    # only deletes are forgets still folds at each worker's start (retention_days); the
    # sums stay, no kept count is counted again. It rewrites every bucket's row, one-row
    # buckets too (printed: the dead rows each such purge leaves)
    conn = await asyncpg.connect(store_target)
    now = time.time()
    worker = await _setup(store_target, conn, now)
    try:
        kept = _kept(worker, "card")
        bo = await conn.fetchval(f"SELECT {REMOVALS_OF.format(user='$1')}", "bo")
        await conn.execute("INSERT INTO removals VALUES ($1, 7)", bo)  # one row: nothing to fold
        assert await worker.purge_older_than(365) == 0
        assert sorted(await _rows(conn)) == sorted([("972", 3), (bo, 7)])
        await _al_says_zebra(worker, now)
        await _same(worker, store_target)
        assert _kept(worker, "card") == kept
        before = await conn.fetchval("SELECT xmin::text FROM removals WHERE bucket = $1", bo)
        assert await worker.purge_older_than(365) == 0
        after = await conn.fetchval("SELECT xmin::text FROM removals WHERE bucket = $1", bo)
        print(f"\nbo's one row rewritten by a purge that deleted nothing: {before != after}")
    finally:
        await worker.close()
        await conn.close()

"""Attacks on the fold after a forget (af275a3, 6eff03e's ``removals_fold``): a forget
cancelled (asyncio) between its commit and its fold, and a forget whose fold runs while
another forget of the same bucket holds the fold (the try-lock). The forget's rows must be
gone, nothing left inconsistent (the sum al's searches read is every deleting statement's,
a worker's kept counts find what a fresh store finds), the pool usable, and the next forget
folds the bucket.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from pipecat_summarizer.store import _postgres_writes
from tests.attacks_s13.test_fold_races import HANG_S, _rows, _same, _setup, _Sums
from tests.attacks_s14.test_fold_after_forget import AL, _a_call_of, _twins

asyncpg = pytest.importorskip("asyncpg")


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_attack_fold_a_forget_cancelled_between_its_commit_and_its_fold(
    store_target, monkeypatch
):
    conn = await asyncpg.connect(store_target)
    sums, now = _Sums(store_target), time.time()
    worker = await _setup(store_target, conn, now)
    first, second = _twins(2)
    fold = _postgres_writes.fold_after_forget
    reached, folds = asyncio.Event(), []

    async def held(c, user_id: str) -> bool:
        reached.set()
        await asyncio.Event().wait()  # cancelled here: after the commit, before the fold
        return await fold(c, user_id)

    try:
        await _a_call_of(worker, first, "t1")
        await _a_call_of(worker, second, "t2")
        monkeypatch.setattr(_postgres_writes, "fold_after_forget", held)
        forgetting = asyncio.ensure_future(worker.forget(first))
        await asyncio.wait_for(reached.wait(), HANG_S)
        forgetting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await forgetting
        # committed: the twin's call and message gone, its tombstone there
        assert await worker.calls(first) == []
        assert await conn.fetchval("SELECT count(*) FROM messages WHERE user_id = $1", first) == 0
        assert await conn.fetchval("SELECT count(*) FROM forgotten") >= 1
        assert await _rows(conn) == [(AL, 1)] * 4  # not folded: the setup's 3, the forget's
        assert await sums.read() == 4
        await _same(worker, store_target)  # the pool usable, the kept counts right

        async def spied(c, user_id: str) -> bool:
            folds.append(await fold(c, user_id))
            return folds[-1]

        monkeypatch.setattr(_postgres_writes, "fold_after_forget", spied)
        assert await asyncio.wait_for(worker.forget(second), HANG_S) == 2
        assert folds == [True]  # the try-lock not left held by the cancelled one
        assert await _rows(conn) == [(AL, 5)]
        assert await sums.read() == 5
        await _same(worker, store_target)
    finally:
        await worker.close()
        await conn.close()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_attack_fold_two_forgets_of_one_bucket_fold_at_once(store_target, monkeypatch):
    # the first twin's fold holds the try-lock (its statement done, not committed) while the
    # second twin's forget commits and tries to fold: it folds nothing and returns at once;
    # once the first commits, the bucket holds its folded row and the second's row; the
    # next forget folds all; the sum moves only with the deletes
    conn = await asyncpg.connect(store_target)
    sums, now = _Sums(store_target), time.time()
    worker = await _setup(store_target, conn, now)
    other = await asyncpg.connect(store_target)
    first, second, third = _twins(3)
    folds: list[tuple[str, bool]] = []
    fold = _postgres_writes.fold_after_forget
    inside, go = asyncio.Event(), asyncio.Event()

    async def spied(c, user_id: str) -> bool:
        if user_id == first:
            # as removals_fold runs it, left open: the lock and the fold, not committed
            async with c.transaction(isolation="read_committed"):
                done = await c.fetchval("SELECT removals_fold($1)", user_id)
                inside.set()
                await go.wait()
        else:
            done = await fold(c, user_id)
        folds.append((user_id, done))
        return done

    monkeypatch.setattr(_postgres_writes, "fold_after_forget", spied)
    try:
        for i, t in enumerate((first, second, third)):
            await _a_call_of(worker, t, f"t{i}")
        one = asyncio.ensure_future(worker.forget(first))
        await asyncio.wait_for(inside.wait(), HANG_S)
        assert await asyncio.wait_for(worker.forget(second), HANG_S) == 2
        assert folds == [(second, False)]
        assert await sums.read() == 5
        await _same(worker, store_target)
        go.set()
        assert await asyncio.wait_for(one, HANG_S) == 2
        assert folds[-1] == (first, True)
        assert sorted(await _rows(conn)) == [(AL, 1), (AL, 4)]
        assert await sums.read() == 5
        assert await worker.forget(third) == 2
        assert await _rows(conn) == [(AL, 6)]
        assert await sums.read() == 6
        await _same(worker, store_target)
    finally:
        go.set()
        await worker.close()
        await other.close()
        await conn.close()

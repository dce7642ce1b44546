"""A live call's forget watch compares the caller's tombstone by value with the one read at
the call's start (``forget_baseline``), never by its time: a forget by another process whose
clock is ahead, made before the call, does not stop the call; one made during it counts
whatever that process's clock says. Without a baseline, a generous margin holds."""

from __future__ import annotations

import asyncio
import sqlite3
import time

import pytest

from pipecat_summarizer.store import open_store
from pipecat_summarizer.store.base import FORGET_SKEW_S


def _shift(path: str, by_s: float) -> None:
    """The other process's clock: its tombstone's time moved by ``by_s``."""
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE forgotten SET at = at + ?", (by_s,))


@pytest.fixture
async def stores(tmp_path):
    path = str(tmp_path / "m.db")
    store, other = open_store(path), open_store(path)
    await store.open()
    await other.open()
    yield path, store, other
    await store.close()
    await other.close()


async def test_a_forget_before_the_call_never_counts_even_from_a_clock_ahead(stores):
    path, store, other = stores
    await other.forget("al")
    _shift(path, 3600.0)  # the other process's clock is an hour ahead
    since = time.time()
    await store.forget_baseline("al", since)
    assert await store.noticed_forget("al", since) is False
    assert store.forget_generation("al") == 0  # the call goes on recording


async def test_a_forget_during_the_call_counts_from_a_clock_behind(stores):
    path, store, other = stores
    await other.forget("al")  # before the call: its baseline
    since = time.time()
    await store.forget_baseline("al", since)
    await other.forget("al")
    _shift(path, -2 * FORGET_SKEW_S)  # behind, by more than any margin
    assert await store.noticed_forget("al", since) is True
    assert await store.noticed_forget("al", since) is False  # counted once
    assert store.forget_generation("al") == 1


async def test_without_a_baseline_a_margin_holds(stores):
    path, store, other = stores
    since = time.time()
    await other.forget("al")
    _shift(path, -5.0)
    assert await store.noticed_forget("al", since) is True  # no baseline read: the margin
    await other.forget("bo")
    _shift(path, -2 * FORGET_SKEW_S)
    assert await store.noticed_forget("bo", since) is False  # long before the call


async def test_postgres_a_tombstone_read_waits_for_a_forget_under_way(pg_server):
    """Another process's forget holds the caller's lock until it commits: the live call's
    watch reads after the commit (its tombstone), never the moment before."""
    import asyncpg

    from pipecat_summarizer.store.records import user_hash

    target = pg_server.create_database(f"s8_baseline_{time.monotonic_ns()}")
    store = open_store(target)
    await store.open()
    other = await asyncpg.connect(target)
    try:
        since = time.time()
        await store.forget_baseline("al", since)
        forgetting = other.transaction()
        await forgetting.start()
        key = user_hash("al")
        await other.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key)
        await other.execute("INSERT INTO forgotten (user_hash, at) VALUES ($1, $2)", key, since)
        watch = asyncio.ensure_future(store.noticed_forget("al", since))
        await asyncio.sleep(0.05)
        assert not watch.done()  # waits for the forget's commit
        await forgetting.commit()
        assert await asyncio.wait_for(watch, 5) is True
    finally:
        await other.close()
        await store.close()

"""A store's forget bookkeeping (``store._forgets.Forgets``, held by each store object):
``forget_generation`` is a token compared for equality only; while a forget is under way
each read answers a new value, so that nothing read during it matches any other read."""

from __future__ import annotations

import asyncio
import os

import pytest

from pipecat_summarizer.store import PostgresMemoryStore, SQLiteMemoryStore, base
from pipecat_summarizer.store._forgets import Forgets
from pipecat_summarizer.store.records import user_hash


def test_a_forget_under_way_answers_a_new_value_at_each_read_until_all_end():
    told: list[str] = []
    forgets = Forgets(told.append)
    assert forgets.generation("al") == 0
    forgets.counted("al")
    first = forgets.under_way("al")
    forgets.counted("al")
    second = forgets.under_way("al")  # two forgets of al overlap
    during = [forgets.generation("al") for _ in range(4)]
    first()
    during.append(forgets.generation("al"))  # the second still runs
    assert len(set(during)) == len(during) and all(v < 0 for v in during)
    second()
    second()  # ending twice does nothing
    assert forgets.generation("al") == forgets.generation("al") == 2
    assert forgets.generation("bo") == 0  # another caller's reads never move
    assert told == ["al"] * 4  # counted twice, ended twice


class _Bare(SQLiteMemoryStore):
    def __init__(self, path):  # never calls the base's (there is none): made on first use
        super().__init__(path)


async def test_each_store_object_keeps_its_own_bookkeeping(tmp_path):
    one, two = _Bare(tmp_path / "m.db"), SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await one.forget("al")
        assert (one.forget_generation("al"), two.forget_generation("al")) == (1, 0)
        assert one._forgets is one._forgets and one._forgets is not two._forgets
    finally:
        await one.close()
        await two.close()
    assert base.FORGET_SKEW_S > 0 and callable(base.on_forget)  # still imported from base


@pytest.fixture(scope="module")
def dsn(pg_server) -> str:
    return pg_server.create_database(f"s9_forgets_{os.getpid()}")


async def test_postgres_reads_during_a_forget_match_nothing_before_during_or_after(dsn):
    asyncpg = pytest.importorskip("asyncpg")
    store = PostgresMemoryStore(dsn, min_size=1, max_size=2)
    await store.open()
    writer = await asyncpg.connect(dsn)  # another process's write for al, under way
    try:
        holding = writer.transaction()
        await holding.start()
        key = user_hash("al")
        await writer.execute("SELECT pg_advisory_xact_lock_shared(hashtextextended($1, 0))", key)
        before = store.forget_generation("al")
        forget = asyncio.ensure_future(store.forget("al"))
        await asyncio.sleep(0.05)
        assert not forget.done()  # waits for the write's lock: counted, rows not deleted
        during = [store.forget_generation("al") for _ in range(3)]
        await holding.rollback()
        await asyncio.wait_for(forget, 10)
        after = store.forget_generation("al")
        assert len({before, *during, after}) == 5  # no read matches another
        assert (before, after) == (0, 1) and store.forget_generation("al") == after
    finally:
        await writer.close()
        await store.close()

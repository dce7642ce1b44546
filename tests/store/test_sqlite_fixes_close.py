"""The SQLite store's close against the calls around it (bugs.md S7-ATTACK-7): a close retires
the store's thread after the calls issued before it; a call issued while it runs opens the
store again on a new thread, after the close, never with the old thread's connection. Two
closes at once both wait for the connection to close; a close races a forget, a purge,
writes and searches (seeded schedules) and every call is whole, in the order issued."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import threading
import time

from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.store._sqlite_schema import scope_of, scope_range
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord


def _said(i: int, user: str = "al", call: str = "c1") -> ArchivedMessage:
    text = f"my beagle Rex walks on Dune Bay beach number {i}"
    return ArchivedMessage(call, i, "user", text, "{}", turn=i, at=time.time(), user_id=user)


def _ended(summary: str, started: float) -> CallRecord:
    return CallRecord(
        "c1",
        user_id="al",
        started_at=started,
        ended_at=time.time(),
        ended_by="end",
        summary=summary,
    )


async def _turns(rng: random.Random) -> None:
    for _ in range(rng.randint(0, 3)):
        await asyncio.sleep(0)


async def test_two_closes_at_once_both_wait_for_the_connection_to_close(tmp_path):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    wal = tmp_path / "m.db-wal"
    await store.write([_said(0)])
    assert wal.exists()  # open: WAL mode keeps its file until the last connection closes
    held, release = threading.Event(), threading.Event()

    def hold(conn: sqlite3.Connection) -> None:
        held.set()
        release.wait(5)

    job = asyncio.ensure_future(store._run(hold))
    await asyncio.get_running_loop().run_in_executor(None, held.wait, 5)
    first = asyncio.ensure_future(store.close())
    second = asyncio.ensure_future(store.close())
    await asyncio.sleep(0.02)
    assert not first.done() and not second.done()  # the close waits for the job before it
    release.set()
    await asyncio.wait_for(second, 5)
    assert not wal.exists()  # the second close returned once the connection had closed
    await asyncio.wait_for(asyncio.gather(first, job), 5)
    await store.close()  # a third, after: nothing left to close
    # and the store opens again
    try:
        assert len(await store.search("beagle", user_id="al")) == 1
    finally:
        await store.close()


async def test_a_cancelled_close_still_closes_and_the_next_call_waits_for_it(tmp_path):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    await store.write([_said(0)])
    held, release = threading.Event(), threading.Event()
    job = asyncio.ensure_future(store._run(lambda conn: (held.set(), release.wait(5))))
    await asyncio.get_running_loop().run_in_executor(None, held.wait, 5)
    closing = asyncio.ensure_future(store.close())
    await asyncio.sleep(0)
    closing.cancel()
    write = asyncio.ensure_future(store.write([_said(1)]))
    await asyncio.sleep(0.02)
    assert not write.done()  # queued behind the retired thread's job and close
    release.set()
    await asyncio.wait_for(write, 5)
    await asyncio.gather(job, closing, return_exceptions=True)
    try:
        assert [m.position for m in await store.messages("c1")] == [0, 1]
    finally:
        await store.close()
    assert not (tmp_path / "m.db-wal").exists()  # the cancelled close's connection closed too


async def test_a_write_after_a_close_lands_after_the_writes_before_it(tmp_path):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    started = time.time()
    await store.write([CallRecord("c1", user_id="al", started_at=started)])
    held, release = threading.Event(), threading.Event()
    job = asyncio.ensure_future(store._run(lambda conn: (held.set(), release.wait(5))))
    await asyncio.get_running_loop().run_in_executor(None, held.wait, 5)
    before = asyncio.ensure_future(store.write([_ended("before the close", started)]))
    closing = asyncio.ensure_future(store.close())
    after = asyncio.ensure_future(store.write([_ended("after the close", started)]))
    await asyncio.sleep(0.02)  # a new thread that did not wait would have written by now
    release.set()
    await asyncio.wait_for(asyncio.gather(job, before, closing, after), 5)
    try:
        call = await store.call("c1")
        assert call is not None and call.summary == "after the close"
    finally:
        await store.close()


async def test_closes_racing_a_forget_and_a_purge_in_seeded_orders(tmp_path):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await store.write([CallRecord("c1", user_id="al", started_at=time.time())])
        position = 0
        for seed in range(16):
            rng = random.Random(seed)
            bo, call = f"bo{seed}", f"b{seed}"
            await store.write([CallRecord(call, user_id=bo, started_at=time.time())])
            await store.write([_said(i, bo, call) for i in range(3)])
            ops = ["forget", "purge", "close", "close", "write"]
            rng.shuffle(ops)
            futures = []
            for op in ops:
                if op == "forget":
                    futures.append(asyncio.ensure_future(store.forget(bo)))
                elif op == "purge":
                    futures.append(asyncio.ensure_future(store.purge_older_than(365)))
                elif op == "close":
                    futures.append(asyncio.ensure_future(store.close()))
                else:
                    position += 1
                    futures.append(asyncio.ensure_future(store.write([_said(position)])))
                await _turns(rng)
            done = await asyncio.wait_for(asyncio.gather(*futures), 10)  # raises what one raised
            assert done[ops.index("forget")] >= 4, seed  # the call's row and its messages
            assert done[ops.index("purge")] == 0, seed
            assert await store.messages(call) == [], seed
        keys = [("c1", p) for p in range(1, position + 1)]
        assert None not in await store.messages_at(keys)
    finally:
        await store.close()


async def test_writes_closes_and_searches_in_seeded_schedules_are_whole_and_in_order(tmp_path):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    started = time.time()
    try:
        await store.write([CallRecord("c1", user_id="al", started_at=started)])
        await store.write([_said(i) for i in range(20)])
        position, summary = 19, ""
        for seed in range(40):
            rng = random.Random(seed)
            writes, others = [], []
            for _ in range(rng.randint(3, 8)):
                op = rng.choice(["write", "write", "close", "search", "cancelled search"])
                if op == "write":
                    position += 1
                    summary = f"summary {position}"  # the call's end, written again: the last wins
                    records = [_said(position), _ended(summary, started)]
                    writes.append(asyncio.ensure_future(store.write(records)))
                elif op == "close":
                    others.append(asyncio.ensure_future(store.close()))
                else:
                    search = asyncio.ensure_future(
                        store.search("beagle Rex walks", user_id="al", any_word=True)
                    )
                    if op == "cancelled search":
                        await _turns(rng)
                        search.cancel()
                    others.append(search)
                await _turns(rng)
            await asyncio.wait_for(asyncio.gather(*writes), 10)  # raises what a write raised
            for result in await asyncio.gather(*others, return_exceptions=True):
                if isinstance(result, BaseException):
                    assert isinstance(result, asyncio.CancelledError), (seed, result)
        keys = [("c1", p) for p in range(position + 1)]
        assert None not in await store.messages_at(keys)
        call = await store.call("c1")
        assert call is not None and call.summary == summary  # issued last, written last
    finally:
        await store.close()


class _SlowCounts(dict):
    """The store's cached word counts, walked slowly (the GIL changes hands at each key, as
    it may at any point of a walk of 20,000): a walk on the loop while a search on the
    store's thread adds a count raises "dictionary changed size during iteration"."""

    def __iter__(self):
        for key in dict.__iter__(self):
            time.sleep(0.001)
            yield key


async def test_a_forget_while_another_callers_search_counts_words_is_whole(tmp_path):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    al = scope_range(scope_of("al", ""))
    filler = {((0, 1), f"word{i}"): (1, 0, 0.0, 0) for i in range(30)}
    try:
        await store.write([CallRecord("c9", user_id="bo", started_at=time.time())])
        await store.write([_said(i, "bo", "c9") for i in range(250)])
        for k in range(3):
            call = f"a{k}"
            await store.write([CallRecord(call, user_id="al", started_at=time.time())])
            await store.write([_said(i, "al", call) for i in range(250)])
            await store.search("dune bay", user_id="al", any_word=True)  # counts cached
            assert [key for key in store._df if key[0] == al]
            store._df = _SlowCounts({**store._df, **filler})
            # the forget's end, and a search of bo's right behind it (new counts)
            forget = asyncio.ensure_future(store.forget("al"))
            search = asyncio.ensure_future(store.search(f"walks {k}", user_id="bo", any_word=True))
            assert await asyncio.wait_for(forget, 10) >= 251
            assert len(await search) == 10
            assert not [key for key in dict.keys(store._df) if key[0] == al]  # their words went
            assert [
                key for key in dict.keys(store._df) if key[1].startswith("walk")
            ]  # bo's counted
            store._df = {}
    finally:
        await store.close()

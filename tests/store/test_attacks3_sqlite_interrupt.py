"""Attack on the SQLite store's interrupt of a read nobody waits for (``_run(read=True)``):
sqlite3's interrupt aborts whatever runs on the connection at that moment, so a stale one
must never reach the job queued next on the store's thread (an archive write of a turn, a
forget, a retention purge, a resume's reads). The read is held at each of its SQLite VM
steps in turn (a progress handler blocks the store's thread there), cancelled from the
loop, released, and the next job must do all of its work; then the same at random moments
without a hold, many seeded schedules. Also: a read cancelled before it starts, cancelled
twice, cancelled while the store closes."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial

import pytest

from pipecat_summarizer.store import SQLiteMemoryStore, _sqlite_search
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord, FactEvent

#: The hold after the read's last statement (before its job ends), not at a VM step.
AFTER = -1


def _said(i: int, user: str = "al") -> ArchivedMessage:
    text = f"my beagle Rex walks on Dune Bay beach number {i}"
    return ArchivedMessage("c1", i, "user", text, "{}", turn=i, at=time.time(), user_id=user)


class _Hold:
    """Blocks the store's thread at the read's ``step``-th VM step (or ``AFTER`` its last
    statement) until released; ``steps`` counts a read's steps when ``step`` is 0."""

    def __init__(self) -> None:
        self.step = 0
        self.steps = 0
        self.held = 0  # holds reached
        self.interrupted = 0  # reads the interrupt stopped
        self.reached = threading.Event()
        self.release = threading.Event()

    def arm(self, step: int) -> None:
        self.step, self.steps = step, 0
        self.reached.clear()
        self.release.clear()

    def _at(self) -> int:
        self.steps += 1
        if self.steps == self.step:
            self._wait()
        return 0

    def _wait(self) -> None:
        self.held += 1
        self.reached.set()
        self.release.wait(5)

    def wrap(self, read: Callable) -> Callable:
        def held(conn: sqlite3.Connection, *args):
            conn.set_progress_handler(self._at, 1)
            try:
                rows = read(conn, *args)
            except sqlite3.OperationalError as e:
                self.interrupted += "interrupted" in str(e)
                raise
            finally:
                conn.set_progress_handler(None, 1)
            if self.step == AFTER:
                self._wait()
            return rows

        return held


@pytest.fixture
def hold(monkeypatch) -> _Hold:
    hold = _Hold()
    monkeypatch.setattr(_sqlite_search, "find", hold.wrap(_sqlite_search.find))
    return hold


async def _held_then_cancelled(
    store: SQLiteMemoryStore,
    hold: _Hold,
    step: int,
    job: Callable[[], Awaitable],
    read: Callable[[], Awaitable] | None = None,
) -> object:
    """A search (or ``read``) held at ``step``, ``job`` queued behind it, the read
    cancelled and the hold released: ``job``'s result (raises what it raised)."""
    hold.arm(step)
    search = asyncio.ensure_future(
        read() if read else store.search("beagle Rex", user_id="al", any_word=True)
    )
    loop = asyncio.get_running_loop()
    reached = loop.run_in_executor(None, hold.reached.wait, 5)
    await asyncio.wait([search, reached], return_when=asyncio.FIRST_COMPLETED)
    queued = asyncio.ensure_future(job())
    await asyncio.sleep(0)  # on the store's queue, behind the search
    search.cancel()
    search.cancel()  # twice: one interrupt at most, and only of the search
    await asyncio.gather(search, return_exceptions=True)
    hold.release.set()
    hold.reached.set()  # a search that ended before the step: nothing waits any more
    await reached
    return await asyncio.wait_for(queued, 10)


async def test_a_held_search_cancelled_at_each_step_never_aborts_the_write_after_it(tmp_path, hold):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await store.write([CallRecord("c1", user_id="al", started_at=time.time())])
        await store.write([_said(i) for i in range(3)])
        hold.arm(0)
        await store.search("beagle Rex", user_id="al", any_word=True)
        total = hold.steps
        assert total > 20  # the hold sees the read's steps
        position = 2
        # every step of the read's end (where a stale interrupt would outlive it), every
        # fourth before
        steps = [*range(1, total - 100, 4), *range(max(1, total - 100), total + 1), AFTER]
        for step in steps:
            position += 1
            write = [_said(position)]
            await _held_then_cancelled(store, hold, step, partial(store.write, write))
            archived = await store.message("c1", position)
            assert archived is not None, f"the write after a search cancelled at {step} lost"
        # each step held the read, and the interrupt stopped it there
        assert hold.held == len(steps) and hold.interrupted == len(steps) - 1
        hold.arm(0)
        assert len(await store.search("beagle", user_id="al", limit=1000)) == position + 1
    finally:
        await store.close()


async def test_a_held_search_cancelled_never_aborts_a_forget_a_purge_or_a_resume(tmp_path, hold):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    rng = random.Random(7)
    try:
        await store.write([CallRecord("c1", user_id="al", started_at=time.time())])
        await store.write([_said(i) for i in range(3)])
        hold.arm(0)
        await store.search("beagle Rex", user_id="al", any_word=True)
        total = hold.steps
        # the read's steps change as the index does (a forget merges it): the first half
        for step in [*rng.sample(range(1, total // 2 + 1), 8), AFTER]:
            # a resume's reads (plain reads, never interrupted on purpose)
            resumed = await _held_then_cancelled(store, hold, step, lambda: store.messages("c1"))
            assert len(resumed) >= 3  # type: ignore[arg-type]
            memory = await _held_then_cancelled(
                store, hold, step, lambda: store.caller_memory("al")
            )
            assert memory is not None
            # a retention purge (nothing old enough: it must still run to its end)
            assert (
                await _held_then_cancelled(store, hold, step, lambda: store.purge_older_than(365))
                == 0
            )
            # a forget of another caller, then of a fact's row: every row goes
            await store.write(
                [
                    CallRecord("c9", user_id="bo", started_at=time.time()),
                    _said(0, "bo").__class__("c9", 0, "user", "bo's beagle", "{}", user_id="bo"),
                    FactEvent("c9", 0, "k", "set", "bo's beagle", at=time.time(), user_id="bo"),
                ]
            )
            gone = await _held_then_cancelled(store, hold, step, lambda: store.forget("bo"))
            assert gone > 0 and await store.messages("c9") == []
            assert await store.fact_history(user_id="bo") == []
        # a hold at a statement's last check lets it finish (never the next job's harm)
        assert hold.held == 4 * 9 and hold.interrupted >= 4 * 6
    finally:
        await store.close()


async def test_searches_cancelled_at_random_moments_lose_no_write(tmp_path):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await store.write([CallRecord("c1", user_id="al", started_at=time.time())])
        await store.write([_said(i) for i in range(40)])
        started = time.perf_counter()
        await store.search("beagle Rex walks", user_id="al", any_word=True)
        took = time.perf_counter() - started
        position = 39
        for seed in range(60):
            rng = random.Random(seed)
            jobs = []
            for _ in range(rng.randint(1, 3)):
                search = asyncio.ensure_future(
                    store.search("beagle Rex walks", user_id="al", any_word=True)
                )
                position += 1
                jobs.append((search, asyncio.ensure_future(store.write([_said(position)]))))
            for search, _ in jobs:
                if rng.random() < 0.5:
                    await asyncio.sleep(rng.uniform(0, 1.5 * took))
                else:
                    for _ in range(rng.randint(0, 4)):
                        await asyncio.sleep(0)
                search.cancel()
            for search, write in jobs:
                await asyncio.gather(search, return_exceptions=True)
                await asyncio.wait_for(write, 10)  # raises what the write raised
        keys = [("c1", p) for p in range(position + 1)]
        assert None not in await store.messages_at(keys)
    finally:
        await store.close()


async def test_a_search_cancelled_before_it_starts_never_runs(tmp_path, hold):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await store.write([_said(i) for i in range(3)])
        hold.arm(1)  # the first search holds the thread
        first = asyncio.ensure_future(store.search("beagle", user_id="al"))
        await asyncio.get_running_loop().run_in_executor(None, hold.reached.wait, 5)
        hold.step = 10**9  # the second would never be held
        second = asyncio.ensure_future(store.search("beagle", user_id="al"))
        write = asyncio.ensure_future(store.write([_said(3)]))
        await asyncio.sleep(0)
        second.cancel()
        await asyncio.gather(second, return_exceptions=True)
        hold.release.set()
        assert len(await first) == 3
        await write
        assert second.cancelled()
        assert await store.message("c1", 3) is not None
    finally:
        await store.close()


async def test_a_search_cancelled_while_the_store_closes(tmp_path, hold):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    await store.write([_said(i) for i in range(3)])
    hold.arm(5)
    search = asyncio.ensure_future(store.search("beagle", user_id="al"))
    await asyncio.get_running_loop().run_in_executor(None, hold.reached.wait, 5)
    closing = asyncio.ensure_future(store.close())
    await asyncio.sleep(0)
    search.cancel()
    await asyncio.gather(search, return_exceptions=True)
    hold.release.set()
    await asyncio.wait_for(closing, 5)
    hold.arm(0)
    # the store opens again and serves: the write after the close is whole
    try:
        await store.write([_said(3)])
        assert len(await store.search("beagle", user_id="al")) == 4
    finally:
        await store.close()


@pytest.fixture
def hold_reads(monkeypatch) -> _Hold:
    """A hold on the store's interruptible reads themselves (``messages_at``'s and the
    search's job on the store's thread, whatever they call)."""
    hold = _Hold()
    real = SQLiteMemoryStore._call

    def _call(self, fn, job=None):
        name = fn.__qualname__  # (the search's job is made in its ``_search``)
        if ".messages_at." in name or ".search." in name or "._search." in name:
            return real(self, hold.wrap(fn), job)
        return real(self, fn, job)

    monkeypatch.setattr(SQLiteMemoryStore, "_call", _call)
    return hold


@pytest.mark.parametrize("kind", ["messages_at", "call_search"])
async def test_other_reads_cancelled_at_their_end_never_abort_the_write_after(
    tmp_path, hold_reads, kind
):
    hold = hold_reads
    store = SQLiteMemoryStore(tmp_path / "m.db")
    keys = [("c1", p) for p in range(3)]

    def read() -> Awaitable:
        if kind == "messages_at":  # the hits' neighbours, the corrected values
            return store.messages_at(keys)
        return store.search("beagle Rex", call_id="c1", any_word=True)  # no caller id

    try:
        await store.write([CallRecord("c1", started_at=time.time())])
        await store.write([_said(i, None) for i in range(3)])  # type: ignore[arg-type]
        hold.arm(0)
        await read()
        total = hold.steps
        assert total > 10
        position = 2
        steps = [*range(max(1, total - 60), total + 1), AFTER]  # its end
        for step in steps:
            position += 1
            write = [_said(position, None)]  # type: ignore[arg-type]
            await _held_then_cancelled(store, hold, step, partial(store.write, write), read)
            assert await store.message("c1", position) is not None, step
        assert hold.held == len(steps) and hold.interrupted >= len(steps) // 2
    finally:
        await store.close()


async def test_a_write_while_the_store_closes_is_whole(tmp_path):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await store.write([_said(i) for i in range(400)])
        for k in range(8):
            search = asyncio.ensure_future(
                store.search("beagle Rex walks", user_id="al", any_word=True, limit=400)
            )
            await asyncio.sleep(0.001)  # the search runs on the store's thread
            closing = asyncio.ensure_future(store.close())
            await asyncio.sleep(0)  # the close has let the thread go
            write = asyncio.ensure_future(store.write([_said(1000 + k)]))
            await asyncio.gather(search, closing, return_exceptions=True)
            await write  # a store used after close opens again: the write is whole
        assert all([await store.message("c1", 1000 + k) for k in range(8)])
    finally:
        await store.close()

"""The store's removals timer (S15, S14-S-1's rest): while a store is open in a running event
loop it reads the database's removals every ``_forgets.DELETES_CHECK_S`` whether or not a call
is live, so another process's forget reaches this process's text caches without a call here.

Its promises: it reads with no call live; one read at a time; a close stops it and it never
opens the closed store again; a failing read is logged once (a WARNING) and tried again,
never raising into the application; no timer without a running loop; a store used on a new
loop (its first loop gone) gets its timer there. The forget itself reaching the caches:
tests/attacks_s14/test_forget_empties_caches.py.
"""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from pipecat_summarizer.store import PostgresMemoryStore, SQLiteMemoryStore, _forgets

PERIOD_S = 0.05  # the timer's period in these tests (DELETES_CHECK_S, shortened)


class _Counting:
    """A store that counts its removals reads (answered, failed) and can be made to fail."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.answered = 0
        self.failed = 0
        self.in_flight = 0
        self.most_in_flight = 0
        self.fail = False
        self._answer = asyncio.Event()

    async def _removals(self) -> int | None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(PERIOD_S * 3)  # a slow read: the next tick comes meanwhile
            if self.fail:
                self.failed += 1
                raise ConnectionResetError("the server went away")
            value = await super()._removals()  # type: ignore[misc]
            self.answered += 1
            return value
        finally:
            self.in_flight -= 1
            self._answer.set()

    async def until(self, done) -> None:
        """Wait until ``done()`` holds (checked after each read, answered or failed)."""
        while not done():
            self._answer.clear()
            await self._answer.wait()


class _SQLite(_Counting, SQLiteMemoryStore):
    pass


class _Postgres(_Counting, PostgresMemoryStore):
    pass


def _store(target: str) -> _Counting:
    return _Postgres(target) if "://" in target else _SQLite(target)


@pytest.fixture
def fast(monkeypatch):
    monkeypatch.setattr(_forgets, "DELETES_CHECK_S", PERIOD_S)


async def test_the_timer_reads_with_no_call_and_stops_at_close(fast, store_target):
    # opened, no call at all: reads come on their own, one at a time (each is slower than
    # the period); closed: the timer is stopped, and no read opens the store again
    store = _store(store_target)
    await store.open()
    try:
        await asyncio.wait_for(store.until(lambda: store.answered >= 3), 60)
        assert store.most_in_flight == 1
        assert store._deletes.watching
    finally:
        await store.close()
    assert not store._deletes.watching
    await asyncio.wait_for(store.until(lambda: store.in_flight == 0), 60)
    before = store.answered + store.failed
    await asyncio.sleep(PERIOD_S * 10)  # ten periods: a timer left would have read
    assert store.answered + store.failed == before
    assert not store._is_open()  # never opened again by a read


async def test_a_closed_store_opened_again_gets_its_timer_again(fast, store_target):
    store = _store(store_target)
    try:
        await store.open()
        await store.close()
        assert not store._deletes.watching
        await store.calls()  # a use after a close opens the store again
        assert store._deletes.watching
        n = store.answered
        await asyncio.wait_for(store.until(lambda: store.answered > n), 60)
    finally:
        await store.close()


async def test_a_failing_read_is_logged_once_and_tried_again(fast, store_target, logs):
    # the database away for the timer's reads: one WARNING for the streak, nothing raised
    # into the application (its own use of the store works), reads tried again; once a read
    # answers, one INFO, and a next streak is logged again
    store = _store(store_target)
    await store.open()
    try:
        store.fail = True
        await asyncio.wait_for(store.until(lambda: store.failed >= 4), 60)
        assert await store.calls() == []
        warned = [r for r in logs if r["level"].name == "WARNING" and "removals" in r["message"]]
        assert len(warned) == 1, [r["message"] for r in warned]
        assert "ConnectionResetError" in warned[0]["message"]
        store.fail = False
        n = store.answered
        await asyncio.wait_for(store.until(lambda: store.answered > n), 60)
        assert any(r["level"].name == "INFO" and "read again" in r["message"] for r in logs)
        store.fail = True
        f = store.failed
        await asyncio.wait_for(store.until(lambda: store.failed > f), 60)
        warned = [r for r in logs if r["level"].name == "WARNING" and "removals" in r["message"]]
        assert len(warned) == 2
    finally:
        store.fail = False
        await store.close()


def test_no_timer_without_a_running_loop():
    deletes = _forgets.Deletes()

    def reader():
        raise AssertionError("never read")

    deletes.watch(reader, lambda: None)
    assert not deletes.watching


def test_a_store_used_on_a_new_loop_gets_its_timer_there(tmp_path, monkeypatch):
    # opened on a first loop, never closed there (the loop ends: its timer with it); used on
    # a second loop: its first use there arms the timer there
    monkeypatch.setattr(_forgets, "DELETES_CHECK_S", PERIOD_S)
    store = _SQLite(str(tmp_path / "memory.db"))

    async def first() -> None:
        await store.open()
        assert store._deletes.watching

    asyncio.run(first())
    assert not store._deletes.watching  # its loop is closed

    async def second() -> None:
        store._answer = asyncio.Event()  # (the first loop's event)
        await store.calls()  # still open (its thread): its first use here arms the timer
        assert store._deletes.watching
        n = store.answered
        await asyncio.wait_for(store.until(lambda: store.answered > n + 1), 60)
        await store.close()

    asyncio.run(second())


async def test_a_store_dropped_unclosed_is_collected_and_its_timer_ends(fast, tmp_path):
    # the timer holds its store weakly: a store the application drops without closing is
    # still collected, and its timer's next tick ends it
    store = SQLiteMemoryStore(str(tmp_path / "memory.db"))
    await store.open()
    deletes = store._deletes
    assert deletes.watching
    gone = weakref.ref(store)
    del store
    # a job still running on the store's thread (the opening's removals read) holds the store
    # until it ends: collected once it has, never while the timer holds it (bounded wait)
    for _ in range(200):
        gc.collect()
        if gone() is None:
            break
        await asyncio.sleep(PERIOD_S)
    assert gone() is None
    while deletes.watching:  # the next tick (bounded by the test's timeout)
        await asyncio.sleep(PERIOD_S)

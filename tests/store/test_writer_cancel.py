"""A flush cancelled (a close's wait ending) while a failed write settles stops there.

On Python 3.11, ``asyncio.wait_for`` that is cancelled in the same loop turn as the future it
waits for settles returns that future's result and loses the cancellation. The writer waited
for its in-flight batch that way, so a close whose flush timeout ended just as a write
failed (a full disk, a locked file) went on retrying the batch forever: the process never
exited. Each case cancels the flush a different number of loop turns after the real SQLite
write fails, which sweeps that moment deterministically.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sqlite3
from collections.abc import Callable, Sequence

import pytest

from pipecat_summarizer.store import SQLiteMemoryStore, StoreWriter, WriterOptions
from pipecat_summarizer.store.records import ArchivedMessage, Record


class _Watched(SQLiteMemoryStore):
    """The real SQLite store, telling the test when its first write has failed and letting
    a second attempt through (a flush that goes on after its cancel then ends, not hangs)."""

    def __init__(self, path, first_failed: Callable[[], None], release: Callable[[], None]):
        super().__init__(path, busy_timeout_s=0)
        self.attempts = 0
        self._first_failed = first_failed
        self._release = release

    async def write(self, records: Sequence[Record]) -> None:
        self.attempts += 1
        if self.attempts > 1:
            self._release()
        try:
            await super().write(records)
        finally:
            if self.attempts == 1:
                self._first_failed()


def _later(turns: int, fn: Callable[[], object]) -> None:
    """Run ``fn`` after ``turns`` more turns of the event loop."""
    loop = asyncio.get_running_loop()
    if turns == 0:
        loop.call_soon(fn)
    else:
        loop.call_soon(_later, turns - 1, fn)


@pytest.mark.parametrize("timeout", [None, 60.0], ids=["flush", "flush-timeout"])
@pytest.mark.parametrize("turns", range(6))
async def test_a_flush_cancelled_as_a_failed_write_settles_stops(tmp_path, turns, timeout):
    path = tmp_path / "memory.db"
    lock = sqlite3.connect(path, isolation_level=None)
    flush: asyncio.Task | None = None

    def first_failed() -> None:
        assert flush is not None
        _later(turns, flush.cancel)

    def release() -> None:
        if lock.in_transaction:
            lock.execute("ROLLBACK")

    unhandled: list[str] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, c: unhandled.append(c["message"]))
    store = _Watched(path, first_failed, release)
    try:
        await store.open()
        lock.execute("BEGIN IMMEDIATE")  # another process holds the write lock: an outage
        writer = StoreWriter(store, WriterOptions(max_backoff_s=0.05), name="c1")
        writer.submit(ArchivedMessage("c1", 0, "user", "hello", json.dumps({}), user_id="u"))
        flush = asyncio.create_task(writer.flush(timeout))
        await asyncio.wait([flush])
        # before: the cancel was lost and the flush retried until the lock went (written)
        assert flush.cancelled(), (store.attempts, writer.written)
        assert store.attempts == 1 and len(writer) == 1
    finally:
        release()
        lock.close()
        await store.close()
    # the failed write nobody waited for any more is not reported as an unread error
    del writer
    flush = None  # its cancellation's traceback holds the write too
    gc.collect()
    assert unhandled == []


async def test_a_write_that_outlasts_its_timeout_is_kept_and_its_late_commit_counted(
    tmp_path, logs
):
    # the other side of the same wait: a write slower than write_timeout_s (SQLite waiting
    # for another process's lock) is an outage, not cancelled; once the lock goes it commits
    # and the next attempt counts it instead of writing it twice
    path = tmp_path / "memory.db"
    store = SQLiteMemoryStore(path, busy_timeout_s=30)
    lock = sqlite3.connect(path, isolation_level=None)
    try:
        await store.open()
        lock.execute("BEGIN IMMEDIATE")
        options = WriterOptions(flush_interval_s=0.02, max_backoff_s=0.05, write_timeout_s=0.05)
        writer = StoreWriter(store, options, name="c1")
        writer.submit(ArchivedMessage("c1", 0, "user", "hello", json.dumps({}), user_id="u"))
        writer.start()
        while not writer.failures:
            await asyncio.sleep(0.01)
        assert writer.outage and len(writer) == 1
        lock.execute("ROLLBACK")
        assert await writer.close(timeout=30)
        assert (writer.written, writer.dropped, len(writer)) == (1, 0, 0)
        assert [m.content for m in await store.messages("c1")] == ["hello"]
    finally:
        lock.close()
        await store.close()
    warnings = [r["message"] for r in logs if r["level"].name == "WARNING"]
    assert any("write timed out" in w for w in warnings), warnings

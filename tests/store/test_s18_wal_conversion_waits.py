"""A store file in the rollback journal (made by an older tool, or copied from one) is turned
into WAL by the first store that opens it. SQLite's conversion upgrades a read to a write
without calling the busy handler, so a worker opening it while another process held a write
lock failed at once with "database is locked" (a fleet restarted on one file: one worker of
three failed its opening, tests/attacks_s13/test_removals_migration.py). The opening now waits
for the lock as any write does, up to ``busy_timeout_s``."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager

import pytest

from pipecat_summarizer.store import SQLiteMemoryStore


def _rollback_file(path) -> None:
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("CREATE TABLE other (x)")
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def _hold_write_lock(path, held: threading.Event, release: threading.Event) -> None:
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO other VALUES (1)")
        held.set()
        release.wait(30)
        conn.execute("COMMIT")


@contextmanager
def _write_locked(path) -> Iterator[threading.Event]:
    """A rollback-journal file at ``path``, another connection holding a write lock on it
    until the event it yields is set."""
    _rollback_file(path)
    held, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(path, held, release))
    holder.start()
    try:
        assert held.wait(10)
        yield release
    finally:
        release.set()
        holder.join()


async def test_an_opening_waits_for_another_writer_to_turn_the_file_into_wal(tmp_path):
    path = tmp_path / "m.db"
    store = SQLiteMemoryStore(path, busy_timeout_s=10)
    try:
        with _write_locked(path) as release:
            opening = asyncio.ensure_future(store.open())
            await asyncio.sleep(0.3)
            assert not opening.done()  # waiting for the lock, not failed
            release.set()
            await asyncio.wait_for(opening, 30)
        assert await store.calls() == []
    finally:
        await store.close()
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT count(*) FROM other").fetchone()[0] == 1  # its write kept


async def test_an_opening_gives_up_after_its_busy_timeout_as_a_locked_write_does(tmp_path):
    path = tmp_path / "m.db"
    store = SQLiteMemoryStore(path, busy_timeout_s=0.5)
    try:
        with _write_locked(path):
            started = time.monotonic()
            with pytest.raises(sqlite3.OperationalError, match="locked"):  # as a write
                await asyncio.wait_for(store.open(), 30)
            assert time.monotonic() - started >= 0.45  # after its wait, not at once
    finally:
        await store.close()

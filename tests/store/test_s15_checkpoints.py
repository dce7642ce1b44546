"""The SQLite store's WAL checkpoints run off the store's thread (bugs.md S15-F-2).

SQLite's automatic checkpoint ran inside the write that took the WAL past 1,000 pages, on the
store's one thread, where recall's searches wait. The store's connection now has
``wal_autocheckpoint=0`` and a checkpointer (``_sqlite_checkpoint``) runs PASSIVE checkpoints
on a thread and a connection of its own. These tests count work (which thread checkpointed,
the database file's bytes, the WAL's size), never time.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pipecat_summarizer.store import SQLiteMemoryStore, _sqlite_checkpoint
from pipecat_summarizer.store.records import ArchivedMessage

ROOT = Path(__file__).resolve().parents[2]
PAGE = 4096
FRAME = PAGE + 24  # a WAL frame: its header and a page


def _batch(call_id: str, start: int, rng: random.Random, n: int = 12, word: str = "") -> list:
    """``n`` messages of ~3 KB of varied words each (their rows and index: a few pages)."""
    vocab = [f"w{i:05d}" for i in range(20000)]
    out = []
    for p in range(start, start + n):
        text = " ".join(rng.choice(vocab) for _ in range(500)) + (f" {word}" if word else "")
        out.append(
            ArchivedMessage(
                call_id=call_id,
                position=p,
                role="user",
                content=text,
                message_json='{"role": "user"}',
                user_id="caller-1",
            )
        )
    return out


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _wal_size(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


class _Gate:
    """Holds the checkpointer's checkpoints until opened (what the store's thread does
    meanwhile is then the store's alone)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.open = threading.Event()
        self.waiting = threading.Event()
        run = _sqlite_checkpoint.Checkpointer._checkpoint

        def gated(checkpointer, conn, **kwargs):
            self.waiting.set()
            self.open.wait()
            return run(checkpointer, conn, **kwargs)

        monkeypatch.setattr(_sqlite_checkpoint.Checkpointer, "_checkpoint", gated)


async def _write_pages(store: SQLiteMemoryStore, pages: int, rng: random.Random) -> int:
    """Write batches until the WAL has grown by ``pages`` frames (at most 300: a WAL that
    something else keeps starting over never grows that far); the batches written."""
    path = store.path
    assert path is not None
    written = 0
    start = _wal_size(path)
    while _wal_size(path) - start < pages * FRAME and written < 300:
        await store.write(_batch("call-1", written * 12, rng))
        written += 1
    return written


async def _store_thread_ident(store: SQLiteMemoryStore) -> int:
    return await store._run(lambda conn: threading.get_ident())


async def test_writes_past_the_threshold_leave_the_checkpoint_to_its_own_thread(
    tmp_path, monkeypatch
):
    """Writes past 1,000 WAL pages: the database file is untouched by the store's thread
    (no checkpoint there: with SQLite's autocheckpoint the write that passed the threshold
    copied the WAL into it); the checkpointer's thread copies it, and only that thread."""
    gate = _Gate(monkeypatch)
    path = tmp_path / "memory.db"
    store = SQLiteMemoryStore(path)
    await store.open()
    rng = random.Random(1)
    await store.write(_batch("call-1", 10_000, rng))
    before = _digest(path)
    await _write_pages(store, 2 * _sqlite_checkpoint.THRESHOLD_PAGES, rng)
    # nothing copied into the database file while the checkpointer was held
    assert _digest(path) == before
    assert _wal_size(path) > 2 * _sqlite_checkpoint.THRESHOLD_PAGES * FRAME

    thread = store._thread
    assert thread is not None and thread.checkpointer is not None
    checkpointer = thread.checkpointer
    assert gate.waiting.is_set()  # it was woken by the writes
    gate.open.set()
    await asyncio.to_thread(checkpointer.settled)
    assert checkpointer.runs >= 1
    assert _digest(path) != before  # the WAL copied, by the checkpointer
    assert checkpointer.thread_idents == {checkpointer.thread.ident}
    assert await _store_thread_ident(store) not in checkpointer.thread_idents
    # the store's connection never checkpoints by itself
    rows = await store._query("PRAGMA wal_autocheckpoint")
    assert rows == [(0,)]
    await store.close()


async def test_the_wal_stays_bounded_over_many_writes(tmp_path):
    """150 writes (several thousand WAL pages in all): each checkpoint lets the next write
    start the WAL over, so the file never grows much past the threshold."""
    path = tmp_path / "memory.db"
    store = SQLiteMemoryStore(path)
    await store.open()
    rng = random.Random(2)
    thread = store._thread
    assert thread is not None and thread.checkpointer is not None
    checkpointer = thread.checkpointer
    largest = 0
    for i in range(150):
        before = _wal_size(path)
        await store.write(_batch("call-1", i * 12, rng))
        largest = max(largest, _wal_size(path) - before)
        # the checkpoint this write woke, if any, has run (the bound is then the threshold
        # and one write's pages, however slow the machine)
        await asyncio.to_thread(checkpointer.settled)
    written_pages = 150 * 12 * 3  # at least ~3 pages a message (row, JSON, index)
    assert written_pages > 3 * _sqlite_checkpoint.THRESHOLD_PAGES
    assert checkpointer.runs >= 2
    bound = (_sqlite_checkpoint.THRESHOLD_PAGES + 2 * largest // FRAME + 10) * FRAME
    assert _wal_size(path) <= bound
    await store.close()


async def test_close_stops_and_joins_the_checkpointer(tmp_path):
    """A file's store has a checkpointer thread while open; a close stops it, joins it and
    closes its connection (the file's last connection gone, SQLite removes the WAL). An
    in-memory store and a read-only opening have none."""

    def checkpointers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith("sqlite-checkpoint")]

    assert checkpointers() == []
    path = tmp_path / "memory.db"
    store = SQLiteMemoryStore(path)
    await store.write(_batch("call-1", 0, random.Random(3)))
    running = checkpointers()
    assert len(running) == 1 and running[0].is_alive()
    await store.close()
    assert not running[0].is_alive()
    assert checkpointers() == []
    # both connections closed: the last one's close checkpointed and removed the WAL
    assert not Path(f"{path}-wal").exists()

    # opened again by a call after the close: a new checkpointer
    await store.write(_batch("call-1", 100, random.Random(4)))
    assert len(checkpointers()) == 1
    await store.close()
    assert checkpointers() == []

    memory = SQLiteMemoryStore()
    await memory.write(_batch("call-1", 0, random.Random(5)))
    assert memory._thread is not None and memory._thread.checkpointer is None
    assert checkpointers() == []
    await memory.close()

    reader = SQLiteMemoryStore(path, read_only=True)
    await reader.messages("call-1")
    assert reader._thread is not None and reader._thread.checkpointer is None
    assert checkpointers() == []
    await reader.close()


async def test_a_forget_still_truncates_the_wal(tmp_path):
    """With the checkpointer at work (writes past the threshold), a forget still truncates
    the WAL and leaves none of the forgotten text in the files."""
    path = tmp_path / "memory.db"
    store = SQLiteMemoryStore(path)
    rng = random.Random(6)
    await store.write(_batch("call-1", 0, rng, word="zebracrossing"))
    await _write_pages(store, 2 * _sqlite_checkpoint.THRESHOLD_PAGES, rng)
    thread = store._thread
    assert thread is not None and thread.checkpointer is not None
    checkpointer = thread.checkpointer
    await asyncio.to_thread(checkpointer.settled)
    assert checkpointer.runs >= 1
    await store.write(_batch("call-1", 50_000, rng, word="zebracrossing"))
    assert await store.forget("caller-1") > 0
    assert _wal_size(path) == 0
    assert b"zebracrossing" not in path.read_bytes()
    await store.close()
    assert b"zebracrossing" not in path.read_bytes()


FORK_SCRIPT = """
import asyncio, os, random, sys
from pipecat_summarizer.store import SQLiteMemoryStore
from tests.store.test_s15_checkpoints import _batch, _write_pages

store = SQLiteMemoryStore(sys.argv[1])
rng = random.Random(7)
asyncio.run(store.write(_batch("call-p", 0, rng)))  # open: its thread, its checkpointer
parent_checkpointer = store._thread.checkpointer
pid = os.fork()
if pid == 0:
    async def child():
        await asyncio.wait_for(_write_pages(store, 1500, rng), 120)
        mine = store._thread.checkpointer
        await asyncio.wait_for(asyncio.to_thread(mine.settled), 60)
        print("child", mine is not parent_checkpointer, mine.runs >= 1,
              mine.thread_idents == {mine.thread.ident}, flush=True)
        # the file's checkpoint lock is this process's own (a forget's truncation takes it)
        print("child forget", await asyncio.wait_for(store.forget("caller-1"), 60) > 0,
              flush=True)
        await asyncio.wait_for(store.close(), 60)
        print("child closed", mine.thread.is_alive(), flush=True)
    try:
        asyncio.run(child())
    except BaseException as e:
        print("child failed", type(e).__name__, e, flush=True)
        os._exit(1)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("child exit", os.waitstatus_to_exitcode(status), flush=True)

async def after():
    await store.write(_batch("call-p", 100, rng))
    print("parent", store._thread.checkpointer is parent_checkpointer, flush=True)
    await store.close()
    print("parent closed", parent_checkpointer.thread.is_alive(), flush=True)

asyncio.run(after())
"""


def test_a_forked_child_checkpoints_on_a_thread_of_its_own(tmp_path):
    """A store open when the process forks: the child's writes past the threshold are
    checkpointed by a checkpointer of its own (the parent's thread does not run there), its
    forget truncates (the file's checkpoint lock is not the parent's, maybe held), its close
    joins it; the parent's checkpointer goes on, and closes with the parent's store."""
    done = subprocess.run(
        [sys.executable, "-c", FORK_SCRIPT, str(tmp_path / "memory.db")],
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(("child", "parent"))]
    assert lines == [
        "child True True True",
        "child forget True",
        "child closed False",
        "child exit 0",
        "parent True",
        "parent closed False",
    ], (done.stdout[-2000:], done.stderr[-2000:])

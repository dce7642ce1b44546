"""S17 attack round (helper A): SQLite's owed WAL truncation (``truncation_owed``) when the
store closes, when the process dies, and with several forgets or store objects at once.

A forget's ``wal_checkpoint(TRUNCATE)`` is refused as busy while another connection reads an
older snapshot; the truncation is then owed to the file's checkpointers in this process
(S16-A-1). These tests ask what happens to the forgotten text's old pages in the ``-wal``
file when no checkpointer of this process is left to pay that debt. The other connection is
another process (a short Python script on ``sqlite3``), so that this process's close is the
close of every connection it has.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from pipecat_summarizer.store import SQLiteMemoryStore, _forgets, _sqlite_checkpoint
from tests.store.test_s15_checkpoints import _batch

ROOT = Path(__file__).resolve().parents[2]
SECRET = "quokkapassword"

# another process's connection: holds a read snapshot until told, then stays connected
# (idle, no transaction) until told to exit, then closes
_READER = r"""
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN")
conn.execute("SELECT count(*) FROM messages").fetchone()
print("held", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
print("released", flush=True)
sys.stdin.readline()
conn.close()
"""


def _in_wal(path: Path, secret: str = SECRET) -> bool:
    wal = Path(f"{path}-wal")
    return wal.exists() and secret.encode() in wal.read_bytes()


class Reader:
    """Another process's connection to the file (see ``_READER``)."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _READER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._line() == "held"

    def _line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def release(self) -> None:
        """End the snapshot; the connection stays open (idle)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        assert self._line() == "released"

    def exit(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write("\n\n")
                self.proc.stdin.flush()
            except BrokenPipeError:
                pass
            self.proc.wait(timeout=30)


@pytest.fixture
def fast_retry(monkeypatch):
    monkeypatch.setattr(_sqlite_checkpoint, "RETRY_S", 0.02)


async def _forgotten_under_reader(path: Path, seed: int) -> tuple[SQLiteMemoryStore, Reader]:
    store = SQLiteMemoryStore(path, busy_timeout_s=0.2)
    await store.write(_batch("call-1", 0, random.Random(seed), word=SECRET))
    reader = Reader(path)
    assert await store.forget("caller-1") > 0
    assert _in_wal(path)  # refused as busy: owed
    return store, reader


async def _gone_within(path: Path, polls: int = 300) -> bool:
    """Whether the secret leaves the -wal file within ``polls`` looks (a bound for the case
    where nothing takes it out; each look reads the file, between them a short pause)."""
    for _ in range(polls):
        if not _in_wal(path):
            return True
        await asyncio.sleep(0.02)
    return False


async def test_attack_store_closed_while_owed_then_the_reader_lets_go(tmp_path, fast_retry, logs):
    """The store closes while its truncation is owed (the other process still reads); the
    other process then ends its read and stays connected (an application's idle
    connection): no checkpointer of this process is left to pay the debt. The close says
    so (a WARNING), and the store's next opening (the next deploy) truncates the -wal."""
    path = tmp_path / "memory.db"
    store, reader = await _forgotten_under_reader(path, 1)
    try:
        await store.close()
        assert any(
            r["level"].name == "WARNING" and "forget's WAL truncation" in r["message"] for r in logs
        )
        reader.release()
        assert _in_wal(path)  # still there: nobody here to truncate
        again = SQLiteMemoryStore(path, busy_timeout_s=0.2)
        await again.open()
        try:
            assert await _gone_within(path), "the reopened store left the text in the -wal"
        finally:
            await again.close()
    finally:
        reader.exit()
    assert SECRET.encode() not in path.read_bytes()


async def test_attack_store_closed_while_owed_after_the_reader_let_go(tmp_path, monkeypatch):
    """The reader lets go between two retries (a retry a long way off) and the store closes
    then, the other process still connected (idle): the close's last try truncates (the
    close of the store's connection, the last of this process, does not always: 2 runs in
    3 here left the text)."""
    monkeypatch.setattr(_sqlite_checkpoint, "RETRY_S", 3600.0)
    path = tmp_path / "memory.db"
    store, reader = await _forgotten_under_reader(path, 2)
    try:
        reader.release()
        assert _in_wal(path)
        await store.close()
        left = _in_wal(path)
    finally:
        reader.exit()
    assert not left


_KILLED = r"""
import asyncio, random, sys
from pipecat_summarizer.store import SQLiteMemoryStore
from tests.store.test_s15_checkpoints import _batch

async def main():
    store = SQLiteMemoryStore(sys.argv[1], busy_timeout_s=0.2)
    await store.write(_batch("call-1", 0, random.Random(3), word=sys.argv[2]))
    print("written", flush=True)
    sys.stdin.readline()  # the reader holds its snapshot now
    await store.forget("caller-1")
    print("forgotten", flush=True)
    await asyncio.sleep(3600)  # killed here, the truncation owed

asyncio.run(main())
"""


async def test_attack_process_killed_while_owed(tmp_path, fast_retry):
    """A process is killed (SIGKILL) while its truncation is owed, another connection still
    open on the file (idle once its read ends): the next process to open the store
    truncates the -wal the dead one left."""
    path = tmp_path / "memory.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED, str(path), SECRET],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "written"
        reader = Reader(path)
        try:
            proc.stdin.write("\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "forgotten"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            reader.release()
            assert _in_wal(path)
            store = SQLiteMemoryStore(path, busy_timeout_s=0.2)
            await store.open()
            try:
                assert await _gone_within(path)
                assert await store.search(SECRET, user_id="caller-1") == []
            finally:
                await store.close()
        finally:
            reader.exit()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_attack_many_forgets_owed_at_once(tmp_path, fast_retry):
    """Five callers forgotten while the reader holds its snapshot: five truncations owed.
    Once it lets go, one truncation takes every text out, and the checkpointer stops
    retrying (no TRUNCATE for ever after)."""
    path = tmp_path / "memory.db"
    store = SQLiteMemoryStore(path, busy_timeout_s=0.2)
    rng = random.Random(4)
    secrets = [f"{SECRET}{chr(97 + i)}" for i in range(5)]
    for i, secret in enumerate(secrets):
        batch = [
            type(m)(**{**m.__dict__, "user_id": f"caller-{i}"})
            for m in _batch(f"call-{i}", 0, rng, n=3, word=secret)
        ]
        await store.write(batch)
    reader = Reader(path)
    try:
        for i in range(5):
            assert await store.forget(f"caller-{i}") > 0
        assert all(_in_wal(path, s) for s in secrets)
        reader.release()
        thread = store._thread
        assert thread is not None and thread.checkpointer is not None
        checkpointer = thread.checkpointer
        for _ in range(300):
            if not any(_in_wal(path, s) for s in secrets):
                break
            await asyncio.sleep(0.02)
        assert not any(_in_wal(path, s) for s in secrets)
        # paid: no more truncations (each retry would be one more run)
        await asyncio.to_thread(checkpointer.settled)
        runs = checkpointer.runs
        await asyncio.sleep(0.2)  # ten retry periods
        assert checkpointer.runs == runs
        assert checkpointer._signals.truncate == 0
    finally:
        reader.exit()
        await store.close()


async def test_attack_owed_with_two_store_objects_on_one_file(tmp_path, fast_retry):
    """Two store objects of this process on one file (two processors built separately):
    the one that forgot closes while its truncation is owed; the other, still open, pays
    it once the reader lets go."""
    path = tmp_path / "memory.db"
    other = SQLiteMemoryStore(path, busy_timeout_s=0.2)
    store = SQLiteMemoryStore(path, busy_timeout_s=0.2)
    await other.open()
    await store.open()  # finds the other's -wal: owes a truncation from the start
    for opened in (other, store):
        thread = opened._thread
        assert thread is not None and thread.checkpointer is not None
        await _paid(thread.checkpointer)
    try:
        await store.write(_batch("call-1", 0, random.Random(5), word=SECRET))
        reader = Reader(path)
        try:
            assert await store.forget("caller-1") > 0
            assert _in_wal(path)
            await store.close()
            reader.release()
            assert await _gone_within(path)
        finally:
            reader.exit()
    finally:
        await other.close()
        await store.close()


async def _paid(checkpointer: _sqlite_checkpoint.Checkpointer, polls: int = 500) -> None:
    """Wait until ``checkpointer`` owes no truncation (bounded)."""
    for _ in range(polls):
        if not checkpointer._signals.truncate:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the truncation owed was never paid")


async def test_attack_a_held_read_never_holds_the_forget_or_the_writes(tmp_path, fast_retry):
    """S17-A-2: another process holds a read snapshot (a search, an ``inspect``, a backup)
    while a caller is forgotten. A TRUNCATE checkpoint takes the writers' lock and then waits
    for that reader through the busy handler: the forget held the store's thread (where every
    turn's search queues) for the whole ``busy_timeout_s``, and each retry of the owed
    truncation made the next write wait as long (or fail, locked). Here the busy timeout is
    an hour: the forget and two writes must finish while the read is still held (the bound
    of 20 s each only ends the test when they do not)."""
    path = tmp_path / "memory.db"
    store = SQLiteMemoryStore(path, busy_timeout_s=3600.0)
    rng = random.Random(6)
    await store.write(_batch("call-1", 0, rng, word=SECRET))
    reader = Reader(path)
    try:
        assert await asyncio.wait_for(store.forget("caller-1"), 20) > 0
        for i in range(2):
            batch = [
                type(m)(**{**m.__dict__, "user_id": "caller-2"})
                for m in _batch("call-2", i, rng, n=1)
            ]
            await asyncio.wait_for(store.write(batch), 20)
        assert _in_wal(path)  # owed: the reader still holds its snapshot
        reader.release()
        assert await _gone_within(path)
    finally:
        reader.exit()
        await asyncio.wait_for(store.close(), 20)


_FORGETS_AND_CLOSES = r"""
import asyncio, random, sys
from loguru import logger
from pipecat_summarizer.store import SQLiteMemoryStore
from tests.store.test_s15_checkpoints import _batch

logger.remove()


async def main():
    store = SQLiteMemoryStore(sys.argv[1], busy_timeout_s=0.2)
    await store.write(_batch("call-1", 0, random.Random(7), word=sys.argv[2]))
    print("written", flush=True)
    sys.stdin.readline()  # the reader holds its snapshot now
    await store.forget("caller-1")
    await store.close()  # owed still: the reader holds on
    print("closed", flush=True)

asyncio.run(main())
"""


async def test_attack_owed_by_a_process_that_closed_is_paid_by_another_process(
    tmp_path, fast_retry, monkeypatch
):
    """Two processes of the application on one file; one forgets while a third connection
    reads, and closes (a rolling restart) while its truncation is still refused. The other
    process's store, open all along, learns of the delete from the file's removals (its
    timer) and truncates the -wal once the reader lets go."""
    monkeypatch.setattr(_forgets, "DELETES_CHECK_S", 0.05)
    path = tmp_path / "memory.db"
    here = SQLiteMemoryStore(path, busy_timeout_s=0.2)
    await here.write(_batch("call-0", 0, random.Random(8), n=1))
    thread = here._thread
    assert thread is not None and thread.checkpointer is not None
    await _paid(thread.checkpointer)
    proc = subprocess.Popen(
        [sys.executable, "-c", _FORGETS_AND_CLOSES, str(path), SECRET],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdin is not None and proc.stdout is not None
    reader = None
    try:
        assert proc.stdout.readline().strip() == "written"
        reader = sqlite3.connect(path, isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM messages").fetchone()
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "closed"
        proc.wait(timeout=30)
        assert _in_wal(path)
        reader.execute("COMMIT")  # the reader lets go, and stays connected
        assert await _gone_within(path), "no process truncated the -wal"
    finally:
        if reader is not None:
            reader.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        await here.close()

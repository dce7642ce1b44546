"""A forget whose WAL truncation is refused as busy left the forgotten text in the -wal file
(S16-A-1, helper A; fixed by helper L in 6559143 with the checkpointer's truncation_owed).

The forget deletes the caller's rows (secure_delete zeroes them in the pages), then runs
``PRAGMA wal_checkpoint(TRUNCATE)`` to take the old copies of those pages out of the WAL. When
another connection reads an older snapshot (another process's search, an ``inspect``) or
another process checkpoints, SQLite refuses it as busy; the WARNING said the text "leaves it
at the next checkpoint", but the checkpointer's checkpoints are PASSIVE: they copy frames
into the database and never erase the WAL's bytes. The text stayed on disk until the log was
overwritten or the last connection closed. Now the refused truncation is owed to the file's
checkpointers, which retry it. These tests read the -wal file's bytes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import sqlite3
from pathlib import Path

from pipecat_summarizer.store import SQLiteMemoryStore, _sqlite_checkpoint
from tests.store.test_s15_checkpoints import _batch

SECRET = "zebracrossing"


def _in_wal(path: Path) -> bool:
    wal = Path(f"{path}-wal")
    return wal.exists() and SECRET.encode() in wal.read_bytes()


async def _forget_while_read(path: Path, rng: random.Random) -> SQLiteMemoryStore:
    """A store with the secret archived and other callers' writes; a forget of its caller
    while another connection holds a read snapshot (released before this returns)."""
    store = SQLiteMemoryStore(path, busy_timeout_s=0.2)
    await store.write(_batch("call-1", 0, rng, word=SECRET))
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM messages").fetchone()  # its snapshot held
    assert await store.forget("caller-1") > 0
    assert _in_wal(path)  # refused as busy: the old pages still there
    reader.execute("COMMIT")
    reader.close()
    return store


async def _gone_within(path: Path, polls: int = 200) -> bool:
    """Whether the secret leaves the -wal file within ``polls`` looks (a bound for the case
    where nothing ever takes it out; each look is a read of the file)."""
    for _ in range(polls):
        if not _in_wal(path):
            return True
        await asyncio.sleep(0.02)
    return False


async def test_attack_a_forget_refused_by_a_reader_leaves_no_text_in_the_wal(tmp_path, monkeypatch):
    """The reader gone and the store still in use (another caller's writes, their
    checkpoints): the forgotten text must leave the -wal file."""
    monkeypatch.setattr(_sqlite_checkpoint, "RETRY_S", 0.02)
    path = tmp_path / "memory.db"
    rng = random.Random(21)
    store = await _forget_while_read(path, rng)
    for i in range(3):
        await store.write(
            [dataclasses.replace(m, user_id="caller-2") for m in _batch("call-2", i * 12, rng)]
        )
    thread = store._thread
    assert thread is not None and thread.checkpointer is not None
    await asyncio.to_thread(thread.checkpointer.settled)
    try:
        assert await _gone_within(path)
    finally:
        await store.close()
    assert not _in_wal(path) and SECRET.encode() not in path.read_bytes()


async def test_a_truncation_owed_is_run_by_the_checkpointer_once_the_reader_is_gone(
    tmp_path, monkeypatch
):
    """The fix's other half, in the checkpointer (``truncation_owed``, what the forget's
    refused truncation should call): the file's checkpointer runs TRUNCATE, retried while the
    reader holds its snapshot, and the text leaves the -wal file once it is gone."""
    monkeypatch.setattr(_sqlite_checkpoint, "RETRY_S", 0.02)
    path = tmp_path / "memory.db"
    rng = random.Random(22)
    store = SQLiteMemoryStore(path, busy_timeout_s=0.2)
    await store.write(_batch("call-1", 0, rng, word=SECRET))
    thread = store._thread
    assert thread is not None and thread.checkpointer is not None
    checkpointer = thread.checkpointer
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM messages").fetchone()
    assert await store.forget("caller-1") > 0
    assert _in_wal(path)
    runs = checkpointer.runs
    assert _sqlite_checkpoint.truncation_owed(path) == 1
    while checkpointer.runs < runs + 3:  # tried, refused while the snapshot is held
        await asyncio.sleep(0.01)
    assert _in_wal(path)
    reader.execute("COMMIT")
    reader.close()
    assert await _gone_within(path)
    assert SECRET.encode() not in path.read_bytes()
    assert _sqlite_checkpoint.truncation_owed(tmp_path / "other.db") == 0
    await store.close()

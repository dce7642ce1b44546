"""Store and memory options are validated at construction, naming the field; a DSN is never
taken for a SQLite path nor echoed; an outage WARNING says why."""

from __future__ import annotations

import asyncio
import math
import socket
import sqlite3

import pytest

from pipecat_summarizer.params import MemoryParams, WriterParams
from pipecat_summarizer.store import SQLiteMemoryStore, StoreError, StoreWriter, open_store
from pipecat_summarizer.store.records import ArchivedMessage

SECRET = "hun:ter2"


def test_memory_options_are_checked_by_name():
    with pytest.raises(TypeError, match="resume"):
        MemoryParams(resume="no")
    with pytest.raises(TypeError, match="earlier_calls_tokens"):
        MemoryParams(earlier_calls_tokens="300")
    with pytest.raises(ValueError, match="flush_interval_s"):
        WriterParams(flush_interval_s=1e-9)  # would spin the loop
    assert WriterParams(flush_interval_s=0.01).flush_interval_s == 0.01


def test_store_options_are_checked_by_name(tmp_path):
    for kwargs, error, field in (
        ({"retention_days": True}, TypeError, "retention_days"),
        ({"retention_days": "7"}, TypeError, "retention_days"),
        ({"retention_days": math.inf}, ValueError, "retention_days"),
        ({"busy_timeout_s": math.inf}, ValueError, "busy_timeout_s"),
        ({"busy_timeout_s": "5"}, TypeError, "busy_timeout_s"),
        ({"busy_timeout_s": True}, TypeError, "busy_timeout_s"),
    ):
        with pytest.raises(error, match=field):
            SQLiteMemoryStore(tmp_path / "m.db", **kwargs)
    dsn = "postgresql://bob:hunter2@127.0.0.1:5432/memory"
    for kwargs, error, field in (
        ({"retention_days": True}, TypeError, "retention_days"),
        ({"min_size": "1"}, TypeError, "min_size"),
        ({"max_size": 2.5}, TypeError, "max_size"),
        ({"connect_timeout_s": math.nan}, ValueError, "connect_timeout_s"),
        ({"text_search_config": 7}, ValueError, "text_search_config"),
    ):
        with pytest.raises(error, match=field):
            open_store(dsn, **kwargs)


def test_a_dsn_or_a_folder_is_never_a_sqlite_path(tmp_path):
    dsn = f"postgresql+asyncpg://bob:{SECRET}@127.0.0.1:5432/memory"
    with pytest.raises(ValueError, match="connection URL") as caught:
        SQLiteMemoryStore(dsn)
    assert SECRET not in str(caught.value) and "hunter" not in str(caught.value)
    with pytest.raises(ValueError, match="folder"):
        SQLiteMemoryStore(tmp_path)
    # SQLAlchemy's form is PostgreSQL, and its repr hides a password holding a colon
    store = open_store(dsn)
    assert store.backend == "postgres"
    assert "ter2" not in repr(store) and "hun" not in repr(store) and "bob" in repr(store)
    with pytest.raises(StoreError, match="mysql") as refused:
        open_store(f"mysql://bob:{SECRET}@db/memory")
    assert SECRET not in str(refused.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no file named after a URL


def _m(i: int) -> ArchivedMessage:
    return ArchivedMessage("c", i, "user", f"private words {i}", "{}", user_id="u")


async def _warning_of(store, logs) -> str:
    writer = StoreWriter(store, WriterParams(flush_interval_s=0.02, max_backoff_s=0.05))
    writer.start()
    writer.submit(_m(0))
    while writer.failures < 1:
        await asyncio.sleep(0.02)
    await writer.close(timeout=0.1)
    await store.close()
    warnings = [r["message"] for r in logs if r["level"].name == "WARNING"]
    assert not any("private" in w for w in warnings)
    failed = [w for w in warnings if "write failed" in w]
    assert len(failed) == 1
    return failed[0]


async def test_an_outage_warning_says_why(tmp_path, logs):
    garbage = tmp_path / "notes.db"
    garbage.write_bytes(b"these are my notes, not a database " * 300)
    assert "not a database" in await _warning_of(SQLiteMemoryStore(garbage), logs)
    logs.clear()

    path = tmp_path / "locked.db"
    await SQLiteMemoryStore(path).open()
    lock = sqlite3.connect(path, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        warning = await _warning_of(SQLiteMemoryStore(path, busy_timeout_s=0.01), logs)
        assert "locked" in warning
    finally:
        lock.close()
    logs.clear()

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = open_store(f"postgresql://bob:{SECRET}@127.0.0.1:{port}/m", connect_timeout_s=2)
    warning = await _warning_of(store, logs)
    assert "connection refused" in warning and "ter2" not in warning

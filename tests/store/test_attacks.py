"""The store, its writer and ``inspect`` attacked as a hostile caller and a careless operator
would: ids with query syntax, fact keys no index can hold, batches the database refuses
whole, a refused record during an outage, forget twice or of nobody, a caller who calls
again right after a forget, a file locked at start, and ``inspect`` pointed at the wrong
thing (a FIFO, an empty file, a folder, a closed port)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import sqlite3
import subprocess
import sys

import pytest

from pipecat_summarizer._session.recorder import CallRecorder
from pipecat_summarizer.params import MemoryParams, WriterParams
from pipecat_summarizer.store import SQLiteMemoryStore, StoreWriter, open_store
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord, FactEvent
from pipecat_summarizer_cli.main import main

FAST = WriterParams(flush_interval_s=0.02, max_backoff_s=0.1, write_timeout_s=5)


def _m(call: str, i: int, text: str, user: str | None = "u") -> ArchivedMessage:
    return ArchivedMessage(call, i, "user", text, json.dumps({"content": text}), user_id=user)


def _noise(n: int, seed: int = 7) -> str:
    """Incompressible text (PostgreSQL compresses index entries before it measures them)."""
    rng = random.Random(seed)
    return "".join(chr(rng.randrange(0x4E00, 0x9FA0)) for _ in range(n))


async def test_a_fact_whose_key_is_a_long_summary_bullet_is_kept(store_target):
    # a summary bullet without a "topic:" is keyed by its whole text: keys have no bound
    key = "text:" + _noise(3000)
    user = "\U0001d54f" * 512  # the longest id, four bytes a character
    store = open_store(store_target)
    try:
        await store.write(
            [
                CallRecord("s1", user, started_at=1000.0),
                FactEvent("s1", 1, key, "pinned", "the caller prefers mornings", user_id=user),
            ]
        )
        memory = await store.caller_memory(user)
        assert [f.get("text") for f in memory.facts] == ["the caller prefers mornings"]
    finally:
        await store.close()


async def test_ids_with_like_wildcards_and_quotes_touch_only_their_own_rows(store_target):
    # "\u0430lice" begins with a Cyrillic a: a confusable is another caller, never a match
    ids = ["a%", "a_", "\u0430lice", "ab", "a'b", 'a"b', "a\\b", "a%b", "alice"]
    store = open_store(store_target)
    try:
        await store.write(
            [r for i, u in enumerate(ids) for r in (CallRecord(f"s{i}", u), _m(f"s{i}", 0, "x", u))]
        )
        assert await store.forget("a%") == 2  # its call row and its message, nothing else
        assert await store.forget("a_") == 2
        assert await store.forget("\u0430lice") == 2
        for i, u in enumerate(ids[3:], start=3):
            assert [c.call_id for c in await store.calls(u)] == [f"s{i}"], u
            assert len(await store.search("x", user_id=u)) == 1, u
    finally:
        await store.close()


async def test_a_caller_forgotten_twice_or_never_seen_calls_again_at_once(store_target):
    store = open_store(store_target)
    try:
        assert await store.forget("nobody") == 0
        assert await store.forget("nobody") == 0
        # the same caller calls again right after the forget: the new session is recorded
        recorder = CallRecorder(
            store, call_id="room", user_id="nobody", options=MemoryParams(writer=FAST)
        )
        recorder.start()
        recorder.archive([{"role": "user", "content": "hello again"}], "evicted")
        await recorder.end(
            ended_by="end", summary=None, facts=[], messages_in_context=0, compactions=0
        )
        calls = await store.calls("nobody")
        assert [c.label for c in calls] == ["room"]
        assert [m.content for m in await store.messages(calls[0].call_id)] == ["hello again"]
    finally:
        await store.close()


def test_a_fifo_or_a_device_is_never_taken_for_a_database(tmp_path, capsys):
    fifo = tmp_path / "memory.db"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/null"):
        with pytest.raises(ValueError, match="path"):
            SQLiteMemoryStore(path)
        with pytest.raises(ValueError, match="path"):
            open_store(str(path))
        assert main(["inspect", str(path)]) == 2
        assert "inspect:" in capsys.readouterr().err


async def test_a_batch_the_database_refuses_whole_costs_only_its_records(store_target, logs):
    store = open_store(store_target)
    writer = StoreWriter(store, WriterParams(flush_interval_s=0.02, batch_size=8), name="c1")
    writer.start()
    for i in range(8):  # every record of the first batch: a position no database holds
        writer.submit(_m("c1", 2**70 + i, f"secret {i}"))
    writer.submit(_m("c1", 0, "after the poison"))
    try:
        assert await writer.close(timeout=10)
        assert [m.content for m in await store.messages("c1")] == ["after the poison"]
    finally:
        await store.close()
    assert (writer.refused, writer.written, writer.dropped) == (8, 1, 0)
    errors = [r["message"] for r in logs if r["level"].name == "ERROR"]
    assert len(errors) == 8 and not any("secret" in e for e in errors)


async def test_a_refused_record_during_an_outage_waits_for_the_database_then_goes_alone(
    tmp_path, logs
):
    path = tmp_path / "memory.db"
    store = SQLiteMemoryStore(path, busy_timeout_s=0.05)
    await store.open()
    lock = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    lock.execute("BEGIN EXCLUSIVE")  # another process holds the file
    writer = StoreWriter(store, FAST, name="c1")
    writer.start()
    for record in (_m("c1", 0, "one"), _m("c1", 2**70, "poison"), _m("c1", 1, "two")):
        writer.submit(record)
    try:
        for _ in range(100):
            if writer.failures >= 2:
                break
            await asyncio.sleep(0.02)
        # locked: nothing was set aside on a guess, all three wait
        assert writer.outage and writer.refused == 0 and len(writer) == 3
        lock.execute("ROLLBACK")
        assert await writer.close(timeout=10)
        assert [m.content for m in await store.messages("c1")] == ["one", "two"]
    finally:
        lock.close()
        await store.close()
    assert (writer.refused, writer.dropped) == (1, 0)
    warnings = [r["message"] for r in logs if r["level"].name == "WARNING"]
    assert any("locked" in w for w in warnings)


async def test_a_new_file_locked_at_start_loses_nothing_once_released(tmp_path, logs):
    path = tmp_path / "memory.db"
    held = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    held.execute("PRAGMA locking_mode=EXCLUSIVE")
    held.execute("BEGIN EXCLUSIVE")  # before the store ever created its tables
    store = SQLiteMemoryStore(path, busy_timeout_s=0.05)
    recorder = CallRecorder(store, call_id="room", user_id="u", options=MemoryParams(writer=FAST))
    try:
        recorder.start()
        for i in range(5):
            recorder.archive([{"role": "user", "content": f"turn {i}"}], "evicted")
            await asyncio.sleep(0.05)
        assert recorder.writer.outage and recorder.take_memory() is None
        held.execute("ROLLBACK")
        held.close()  # the lock goes with the connection (exclusive locking mode)
        assert await recorder.end(
            ended_by="end", summary=None, facts=[], messages_in_context=0, compactions=0
        )
        calls = await store.calls("u")
        assert [(c.label, c.ended_by) for c in calls] == [("room", "end")]
        got = [m.content for m in await store.messages(calls[0].call_id)]
        assert got == [f"turn {i}" for i in range(5)]
    finally:
        await store.close()
    assert any("locked" in r["message"] for r in logs if r["level"].name == "WARNING")


async def _reconnect(path) -> list[str]:
    """Alice's call under "room-1" drops and reconnects under the same id: two sessions."""
    store = SQLiteMemoryStore(path)
    keys = []
    try:
        for words in ("before the drop", "after the reconnect"):
            recorder = CallRecorder(
                store, call_id="room-1", user_id="alice", options=MemoryParams(writer=FAST)
            )
            recorder.start()
            recorder.archive([{"role": "user", "content": words}], "evicted")
            await recorder.end(
                ended_by="end", summary=None, facts=[], messages_in_context=0, compactions=0
            )
            keys.append(recorder.session_id)
    finally:
        await store.close()
    return keys


def test_inspect_after_a_reconnect_leads_to_both_sessions(tmp_path, capsys):
    path = tmp_path / "memory.db"
    first, second = asyncio.run(_reconnect(path))
    assert main(["inspect", str(path)]) == 0
    listing = capsys.readouterr().out
    # each session's line names the application's id it was recorded under
    assert listing.count("room-1") == 2 and first in listing and second in listing
    assert main(["inspect", str(path), "--call", "room-1"]) == 0
    shown = capsys.readouterr().out
    assert "after the reconnect" in shown and "before the drop" not in shown
    assert first in shown  # the earlier session under the same id is named, to look at
    assert main(["inspect", str(path), "--call", first]) == 0
    assert "before the drop" in capsys.readouterr().out


def test_a_writer_and_open_store_refuse_wrong_types_at_once_and_take_a_path(tmp_path):
    store = SQLiteMemoryStore()
    with pytest.raises(TypeError, match="store"):
        StoreWriter(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="options"):
        StoreWriter(store, {"max_queue": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="record"):
        # a non-record queued: before, the writer retried its batch forever (an "outage")
        StoreWriter(store).submit({"role": "user", "content": "hi"})  # type: ignore[arg-type]
    # a pathlib.Path is a SQLite path, as SQLiteMemoryStore takes it
    assert open_store(tmp_path / "memory.db").path == tmp_path / "memory.db"  # type: ignore[attr-defined, arg-type]


async def test_read_bounds_are_checked_by_name(store_target):
    store = open_store(store_target)
    try:
        await store.write([CallRecord(f"s{i}", "u", started_at=1000.0 + i) for i in range(3)])
        for bad in (-1, "5", 2.5, True):
            with pytest.raises((TypeError, ValueError), match="limit"):
                await store.calls("u", limit=bad)
            with pytest.raises((TypeError, ValueError), match="max_calls"):
                await store.caller_memory("u", max_calls=bad)
        with pytest.raises(TypeError, match="user_id"):
            await store.caller_memory(None)  # type: ignore[arg-type]
        assert len(await store.calls("u", limit=2)) == 2
        assert (await store.caller_memory("u", max_calls=1)).calls == 1
    finally:
        await store.close()


# A process whose files may not grow past 200 kB (RLIMIT_FSIZE: a full disk, without root):
# its writer's WARNING must say why, as it does for a lock.
_FULL_DISK = """
import asyncio, resource, signal, sys
from loguru import logger
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
logger.remove()
logger.add(sys.stdout, level="WARNING", format="{level} {message}")
from pipecat_summarizer.store import SQLiteMemoryStore, StoreWriter
from pipecat_summarizer.params import WriterParams
from pipecat_summarizer.store.records import ArchivedMessage

async def main():
    store = SQLiteMemoryStore(sys.argv[1])
    writer = StoreWriter(store, WriterParams(flush_interval_s=0.02), name="c1")
    writer.start()
    for i in range(300):
        writer.submit(ArchivedMessage("c1", i, "user", "x" * 2000, "{}", user_id="u"))
    # the first write has failed (its WARNING logged) before the close: under load a 0.3 s
    # close alone ended while that write still ran ("still being written")
    deadline = asyncio.get_running_loop().time() + 30
    while not writer.outage and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    await writer.close(timeout=0.3)
    await store.close()

asyncio.run(main())
"""


def test_a_disk_that_will_not_grow_is_named_in_the_outage_warning(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(tmp_path / "memory.db")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    warning = next(line for line in out.stdout.splitlines() if line.startswith("WARNING"))
    # SQLite reports a file over the limit as an I/O error (a full tmpfs: "disk full"); before,
    # its own rollback of the transaction hid the error and the WARNING named only the class
    assert re.search(r"write failed \((disk full|disk I/O error) \(", warning), out.stdout

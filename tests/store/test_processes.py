"""The store across processes: concurrent writers for one caller, and a call killed with
SIGKILL mid-way. Real child processes (tests/support/store_worker.py) on both backends."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
from pathlib import Path

from pipecat_summarizer.store import open_store
from pipecat_summarizer.store.records import ArchivedMessage

ROOT = Path(__file__).resolve().parents[2]


async def _spawn(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.store_worker",
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def test_concurrent_writers_for_one_caller(store_target, backend):
    store = open_store(store_target)
    await store.open()  # the schema first, as a deployed fleet has it
    workers = 3 if backend == "sqlite" else 2
    n = 150
    procs = [await _spawn("write", store_target, "dana", f"w{i}", str(n)) for i in range(workers)]
    codes = await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), 120)
    try:
        assert codes == [0] * workers
        calls = await store.calls("dana")
        assert sorted(c.call_id for c in calls) == [f"w{i}" for i in range(workers)]
        for i in range(workers):
            messages = await store.messages(f"w{i}")
            assert [m.position for m in messages] == list(range(n))
            assert len(await store.fact_history(call_id=f"w{i}")) == n
        assert len(await store.fact_history(user_id="dana")) == workers * n
        hits = await store.search("apples", user_id="dana", limit=1000)
        assert len(hits) == workers * n
    finally:
        await store.close()
    if backend == "sqlite":
        with sqlite3.connect(store_target) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


async def _count(store, call_id: str) -> int:
    return len(await store.messages(call_id))


async def test_a_call_killed_mid_way_keeps_what_was_flushed(store_target, backend):
    store = open_store(store_target)
    await store.open()
    proc = await _spawn("call", store_target, "erin", "killed")
    try:
        assert await asyncio.wait_for(proc.stdout.readline(), 60) == b"ready\n"
        seen = 0
        for _ in range(600):  # until two flushes have landed some compactions
            seen = await _count(store, "killed")
            if seen >= 30:
                break
            await asyncio.sleep(0.05)
        assert seen >= 30, "the child never flushed"
    finally:
        if proc.returncode is None:
            os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
    assert proc.returncode == -signal.SIGKILL
    await store.close()

    if backend == "sqlite":
        with sqlite3.connect(store_target) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    store = open_store(store_target)
    try:
        messages = await store.messages("killed")
        # records up to the last flush survive, whole: contiguous positions, each message
        # summarized by a compaction that is on record too
        assert len(messages) >= seen
        assert [m.position for m in messages] == list(range(len(messages)))
        assert all(m.content.startswith(("My order number", "Noted order")) for m in messages)
        applied = {c.compaction for c in await store.compactions("killed") if c.ok}
        assert {m.compaction for m in messages} <= applied
        call = await store.call("killed")
        assert call is not None and call.ended_at is None  # no final state: it was killed
        # the store is usable afterwards, and the caller's memory loads
        await store.write([ArchivedMessage("after", 0, "user", "still writable", "{}")])
        assert (await store.caller_memory("erin")).calls == 1
    finally:
        await store.close()

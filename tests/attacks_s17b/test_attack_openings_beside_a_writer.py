"""S17 attack round B: SQLite's truncation at a store's opening (``truncate_at_opening``,
S17-A-1) beside a live store in another process that writes all along.

Every opening of the file finds the other process's -wal with bytes, so each writable
opening tries a TRUNCATE checkpoint (never waiting) and may owe one to its checkpointer.
Many openings in a loop, writable and read-only, while the other process writes batch after
batch: none of its writes may fail or be lost (rows counted), a read-only opening never
writes (it reads a count that only grows), and every opening's own write lands. All held.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from pipecat_summarizer.store import ArchivedMessage, SQLiteMemoryStore
from pipecat_summarizer.store import sqlite as sqlite_store

ROOT = Path(__file__).resolve().parents[2]
OPENINGS = 24
BATCH = 5

WRITER = r"""
import asyncio, os, sys
from loguru import logger
from pipecat_summarizer.store import ArchivedMessage, SQLiteMemoryStore

logger.remove()
path, stop, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])


async def main():
    store = SQLiteMemoryStore(path)
    written = 0
    try:
        while not os.path.exists(stop) or written < 3:
            rows = [
                ArchivedMessage("w", written * batch + i, "user", f"line {written} {i}", "{}")
                for i in range(batch)
            ]
            await store.write(rows)
            written += 1
            if written == 3:
                print("started", flush=True)
    except Exception as e:
        print("failed", type(e).__name__, e, flush=True)
    finally:
        await store.close()
    print("written", written, flush=True)


asyncio.run(main())
"""


async def test_attack_many_openings_beside_a_process_writing_all_along(tmp_path, monkeypatch):
    tried: list[bool] = []  # each opening's truncation: whether it emptied the WAL
    truncate = sqlite_store.truncate_at_opening

    def counted(conn, at):
        tried.append(truncate(conn, at))
        return tried[-1]

    monkeypatch.setattr(sqlite_store, "truncate_at_opening", counted)
    path = tmp_path / "memory.db"
    first = SQLiteMemoryStore(path)  # the schema, before the writer starts
    await first.write([ArchivedMessage("o", 0, "user", "the first line", "{}")])
    await first.close()
    stop = tmp_path / "stop"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(stop), str(BATCH)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert writer.stdout is not None
        started = await asyncio.to_thread(writer.stdout.readline)
        assert started.strip() == "started", (started, writer.stderr and writer.stderr.read())
        seen: list[int] = []
        for i in range(OPENINGS):
            if i % 2:
                reader = SQLiteMemoryStore(path, read_only=True)
                try:
                    seen.append(len(await reader.messages("w")))
                finally:
                    await reader.close()
            else:
                store = SQLiteMemoryStore(path)
                try:
                    await store.write([ArchivedMessage("o", i + 1, "user", f"open {i}", "{}")])
                finally:
                    await store.close()
        stop.touch()
        out, err = await asyncio.to_thread(writer.communicate, timeout=60)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    # most writable openings found the writer's -wal with bytes (the path attacked); not
    # every one: the writer's own checkpointer may just have truncated it (11 of 12 once)
    assert len(tried) >= OPENINGS // 4
    assert writer.returncode == 0, err
    assert "failed" not in out, out
    written = int(out.split("written")[-1])
    assert seen == sorted(seen) and seen[-1] >= 3 * BATCH  # read-only: a count that grows
    check = SQLiteMemoryStore(path)
    try:
        assert len(await check.messages("w")) == written * BATCH  # no write of it lost
        assert len(await check.messages("o")) == 1 + (OPENINGS + 1) // 2  # nor of ours
    finally:
        await check.close()

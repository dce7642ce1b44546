"""Attacks on the migration to schema v8 (the removal counts, 4e5b3cd, 6a866ff): an archive
of v7 with archived messages, opened by three worker processes at the same moment (a fleet
restarted on the new code). It is migrated once: each version recorded once, the removals
table and its trigger there (SQLite: its one row), nothing counted yet; then an operator's
TRUNCATE (PostgreSQL) or delete (SQLite) bumps the removals and a worker that kept a common
word's count finds what a fresh store finds. The v7 archive is built as
tests/attacks_s13/test_store_removals.py builds it (its schema's statements, its writes).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import time
from contextlib import closing
from pathlib import Path

from pipecat_summarizer.store import open_store
from pipecat_summarizer.store._postgres_schema import EVERYONE
from pipecat_summarizer.store._postgres_search import KEEP_MATCHES
from pipecat_summarizer.store.base import SCHEMA_VERSION
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord
from tests.attacks_s13.test_store_removals import _make_v7

ROOT = Path(__file__).resolve().parents[2]
DAY = 86400.0
MANY = KEEP_MATCHES + 50

_OPEN = """
import asyncio, sys
from pipecat_summarizer.store import open_store

async def main(target):
    store = open_store(target)
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    await store.open()
    await store.close()
    print("opened", flush=True)

asyncio.run(main(sys.argv[1]))
"""


def _msg(call: str, i: int, text: str, at: float, user: str = "al") -> ArchivedMessage:
    return ArchivedMessage(
        call_id=call,
        position=i,
        role="user",
        content=text,
        message_json=json.dumps({"role": "user", "content": text}),
        turn=i // 2,
        at=at,
        user_id=user,
    )


def _keys(hits) -> list[tuple[str, int]]:
    return sorted((h.call_id, h.position) for h in hits)


async def _schema(target: str) -> tuple[list[int], int, list]:
    """The versions recorded, the removals triggers, the removals rows."""
    if target.startswith("postgres"):
        import asyncpg

        conn = await asyncpg.connect(target)
        try:
            versions = [r[0] for r in await conn.fetch("SELECT version FROM schema_version")]
            triggers = await conn.fetchval(
                "SELECT count(*) FROM pg_trigger WHERE tgname = 'messages_removed'"
            )
            rows = [tuple(r) for r in await conn.fetch("SELECT * FROM removals")]
        finally:
            await conn.close()
        return sorted(versions), triggers, rows
    with closing(sqlite3.connect(target)) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_version")]
        triggers = conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'trigger'"
            " AND name = 'messages_removed'"
        ).fetchone()[0]
        rows = conn.execute("SELECT * FROM removals").fetchall()
    return sorted(versions), triggers, rows


async def _open_at_once(target: str, n: int) -> list[tuple[int | None, bytes]]:
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _OPEN,
            target,
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(n)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert await asyncio.wait_for(proc.stdout.readline(), 120) == b"ready\n"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
        outs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 300)
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    return [(p.returncode, err[-800:]) for p, (_, err) in zip(procs, outs, strict=True)]


async def test_removals_a_v7_archive_opened_by_three_processes_at_once(store_target):
    now = time.time()
    await _make_v7(
        store_target,
        [_msg(f"o-{i // 500}", i % 500, f"card {i}", now - DAY + i) for i in range(MANY)]
        + [_msg("r", i, f"card zebra {i}", now - 3600 + i) for i in range(10)],
    )
    ends = await _open_at_once(store_target, 3)
    versions, triggers, rows = await _schema(store_target)
    worker, fresh = open_store(store_target), open_store(store_target)
    try:
        assert await worker.search("card zebra", user_id="al", any_word=True)  # counted
        if store_target.startswith("postgres"):
            import asyncpg

            conn = await asyncpg.connect(store_target)
            try:
                await conn.execute("TRUNCATE messages")
                everyone = await conn.fetchval("SELECT n FROM removals WHERE bucket = $1", EVERYONE)
            finally:
                await conn.close()
        else:
            with closing(sqlite3.connect(store_target, isolation_level=None)) as conn:
                conn.execute("DELETE FROM messages")
                everyone = conn.execute("SELECT n FROM removals").fetchone()[0]
        back = time.time()
        await worker.write(
            [
                CallRecord("back", user_id="al", started_at=back),
                _msg("back", 0, "my card", back),
                _msg("back", 1, "a zebra card", back + 1),
            ]
        )
        want = _keys(await fresh.search("card zebra", user_id="al", any_word=True, limit=20))
        got = _keys(await worker.search("card zebra", user_id="al", any_word=True, limit=20))
    finally:
        for store in (worker, fresh):
            await store.close()
    assert [code for code, _ in ends] == [0, 0, 0], ends
    assert versions == list(range(1, SCHEMA_VERSION + 1))  # each version once
    assert triggers == 1
    assert rows == ([] if store_target.startswith("postgres") else [(1, 0)])
    assert everyone == (1 if store_target.startswith("postgres") else MANY + 10)
    assert want == [("back", 0), ("back", 1)] and got == want

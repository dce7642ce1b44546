"""A store open when the process forks: the child uses it on its own loop.

SQLite (S15-S-2): before, the child's first use waited forever (its job went to the
parent's worker thread, which does not exist in the child), and so did its close. Now the
child opens its own thread and connection (the parent's is left alone).
PostgreSQL (S15-S-3): before, the child used the parent's pool (its sockets, its loop's
futures). Now the child opens a pool of its own and leaves the parent's untouched.
Either way the child's removals timer arms on its own loop and the parent's store works on.
Each runs in a subprocess of its own (forking a test worker that runs other threads is not
something to do to it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import asyncio, os, sys
from pipecat_summarizer.store import SQLiteMemoryStore
from tests.recall.test_attacks_dates import archived, utc

store = SQLiteMemoryStore(sys.argv[1])

def kayak(user, call):
    return archived(["My kayak is the Quillfeather."], call_id=call, at=utc(2026, 5, 1),
                    user_id=user)

async def parent():
    await store.write(kayak("alice", "p1"))

asyncio.run(parent())  # the store stays open: its thread, its connection
pid = os.fork()
if pid == 0:
    async def child():
        await asyncio.wait_for(store.write(kayak("bob", "c1")), 30)
        hits = await asyncio.wait_for(store.search("kayak"), 30)
        print("child", sorted(h.call_id for h in hits), store._deletes.watching, flush=True)
        await asyncio.wait_for(store.close(), 30)
    try:
        asyncio.run(child())
    except BaseException as e:
        print("child failed", type(e).__name__, flush=True)
        os._exit(1)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("child exit", os.waitstatus_to_exitcode(status), flush=True)

async def after():
    hits = await store.search("kayak")
    print("parent", sorted(h.call_id for h in hits), flush=True)
    await store.close()

asyncio.run(after())
"""


def test_a_forked_child_uses_the_store_on_its_own_connection(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "memory.db")],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(("child", "parent"))]
    assert lines == [
        "child ['c1', 'p1'] True",
        "child exit 0",
        "parent ['c1', 'p1']",
    ], (done.stdout[-2000:], done.stderr[-2000:])


PG_SCRIPT = """
import asyncio, os, sys
from pipecat_summarizer.store import PostgresMemoryStore
from tests.recall.test_attacks_dates import archived, utc

store = PostgresMemoryStore(sys.argv[1], min_size=2, max_size=2)
loop = asyncio.new_event_loop()

def kayak(user, call):
    return archived(["My kayak is the Quillfeather."], call_id=call, at=utc(2026, 5, 1),
                    user_id=user)

loop.run_until_complete(store.write(kayak("alice", "p1")))  # the pool stays open
pid = os.fork()
if pid == 0:
    async def child():
        await asyncio.wait_for(store.write(kayak("bob", "c1")), 30)
        hits = await asyncio.wait_for(store.search("kayak"), 30)
        print("child", sorted(h.call_id for h in hits), store._deletes.watching, flush=True)
        await asyncio.wait_for(store.close(), 30)
    try:
        asyncio.run(child())
    except BaseException as e:
        print("child failed", type(e).__name__, str(e)[:200], flush=True)
        os._exit(1)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("child exit", os.waitstatus_to_exitcode(status), flush=True)

async def after():
    for _ in range(3):  # every pooled connection of the parent's, none lost to the child
        hits = await store.search("kayak")
    print("parent", sorted(h.call_id for h in hits), flush=True)
    await store.close()

loop.run_until_complete(after())
"""


def test_a_forked_child_opens_its_own_postgres_pool(pg_server):
    # S15-S-3: before, the child's use of the parent's pool failed (its futures on the
    # parent's loop) after sending a statement on the parent's socket, and the parent's next
    # read on that connection found it in another operation's state (retried, WARNING); a
    # close in the child would have ended the parent's sessions
    dsn = pg_server.create_database(f"s15_fork_{os.getpid()}")
    done = subprocess.run(
        [sys.executable, "-c", PG_SCRIPT, dsn],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(("child", "parent"))]
    assert lines == [
        "child ['c1', 'p1'] True",
        "child exit 0",
        "parent ['c1', 'p1']",
    ], (done.stdout[-2000:], done.stderr[-2000:])
    assert "retried on another connection" not in done.stderr, done.stderr[-2000:]

"""S17 attack round (helper A): the PostgreSQL store's pool when its event loop ends
(``_pool_left_behind``, S16-A-2), attacked: a store used on three loops in turn, a loop ended
with a search in flight, a loop that ended without being closed (``run_until_complete`` at
start-up, the loop left open), a fork after a loop switch, a close on a new loop.

Each case runs in a process of its own (loops are ended for good there): a short script
against the real PostgreSQL of the suite; it prints one line per step.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import asyncio, os, sys, time, warnings
from loguru import logger
from pipecat_summarizer.store import PostgresMemoryStore
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord

logger.remove()


def records(i):
    return [
        CallRecord(call_id=f"c{i}", user_id="alice", started_at=time.time()),
        ArchivedMessage(call_id=f"c{i}", position=0, role="user",
                        content=f"my locker number is {i}", message_json="{}",
                        user_id="alice", at=time.time()),
    ]


async def step(name, work):
    try:
        result = await asyncio.wait_for(work, 20)
        print(what, name, "ok", result, flush=True)
    except BaseException as e:
        print(what, name, "raised", type(e).__name__, flush=True)
        if os.environ.get("S17_WHY"):
            print("  why:", str(e)[:200], flush=True)


async def use(i):
    await step(f"write {i}", store.write(records(i)))
    await step(f"search {i}", count())


async def count():
    return len(await store.search("locker", user_id="alice", limit=50))


for what, dsn in zip(sys.argv[1::2], sys.argv[2::2]):
    store = PostgresMemoryStore(dsn)
    if what == "three":
        for i in range(3):
            asyncio.run(use(i))
        asyncio.run(step("close", store.close()))
    elif what == "in_flight":
        async def leave():
            await store.write(records(0))
            asyncio.ensure_future(store.search("locker", user_id="alice"))
            await asyncio.sleep(0)  # the search's lease taken, its statement sent
        asyncio.run(leave())
        asyncio.run(use(1))
        asyncio.run(step("close", store.close()))
    elif what == "unclosed":
        first = asyncio.new_event_loop()
        first.run_until_complete(store.open())  # start-up; the loop left open, never run again
        asyncio.run(use(0))
        asyncio.run(step("close", store.close()))
    elif what == "fork":
        asyncio.run(use(0))
        asyncio.run(use(1))  # a loop switch
        pid = os.fork()
        if pid == 0:
            asyncio.run(use(2))
            asyncio.run(step("child close", store.close()))
            os._exit(0)
        os.waitpid(pid, 0)
        asyncio.run(use(3))
        asyncio.run(step("close", store.close()))
    elif what == "close_on_new_loop":
        asyncio.run(use(0))
        asyncio.run(step("close", store.close()))
        asyncio.run(use(1))
        asyncio.run(step("close again", store.close()))
"""


#: the cases, run in turn by one process
HELD = ("three", "in_flight", "fork", "close_on_new_loop", "unclosed")


def _run(pg_server, cases: tuple[str, ...]) -> dict[str, list[str]]:
    """Each case's lines, from one process running ``cases`` in turn (one interpreter's
    start for all: each case has a store and a database of its own)."""
    args = []
    for what in cases:
        args += [what, pg_server.create_database(f"test_s17_pool_{what}_{os.getpid()}")]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    out: dict[str, list[str]] = {what: [] for what in cases}
    for line in done.stdout.splitlines():
        what, _, rest = line.strip().partition(" ")
        out.setdefault(what, []).append(rest)
    if done.returncode:
        out["rc"] = [f"rc {done.returncode}: {done.stderr[-1500:]}"]
    return out


def test_attack_the_pool_across_loops(pg_server):
    """A store used on three loops in turn; a loop ended with a search in flight (its lease
    taken, its statement sent); a fork after a loop switch (parent and child both write and
    search after it); a close on a new loop, then a use and a close again; and
    ``loop.run_until_complete(store.open())`` at start-up, the loop left open (never run
    again), then the application's own loop: the store works there as after an
    ``asyncio.run`` (S17-A-4: every use raised; fixed by helper F in 287e53b, this case fails
    at 287e53b~). One test (one process for all five): a module fixture would run once per
    worker."""
    lines = _run(pg_server, HELD)
    assert "rc" not in lines, lines["rc"]
    assert lines["three"] == [
        "write 0 ok None",
        "search 0 ok 1",
        "write 1 ok None",
        "search 1 ok 2",
        "write 2 ok None",
        "search 2 ok 3",
        "close ok None",
    ]
    assert lines["in_flight"] == ["write 1 ok None", "search 1 ok 2", "close ok None"]
    fork = lines["fork"]
    assert fork[:4] == ["write 0 ok None", "search 0 ok 1", "write 1 ok None", "search 1 ok 2"]
    assert sorted(fork[4:]) == sorted(
        [
            "write 2 ok None",
            "search 2 ok 3",
            "child close ok None",
            "write 3 ok None",
            "search 3 ok 4",
            "close ok None",
        ]
    ), fork
    assert lines["close_on_new_loop"] == [
        "write 0 ok None",
        "search 0 ok 1",
        "close ok None",
        "write 1 ok None",
        "search 1 ok 2",
        "close again ok None",
    ]
    assert lines["unclosed"] == ["write 0 ok None", "search 0 ok 1", "close ok None"]

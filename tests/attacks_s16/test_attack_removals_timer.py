"""Attacks on the store's removals timer (``_forgets.Deletes.watch``, S15; S16, helper A).

A store opened on one loop and used on another, the loop closed with its timer pending and a
read in flight (no "Task was destroyed", "Event loop is closed" or callback tracebacks);
many stores in one process (one timer each, never more, none left after their close); a
PostgreSQL read held by a lock for many periods (reads never pile up, turns' reads still
answer). Counted, never timed.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from pipecat_summarizer.store import PostgresMemoryStore, SQLiteMemoryStore, _forgets
from tests.store.test_s15_checkpoints import _batch

ROOT = Path(__file__).resolve().parents[2]
PERIOD_S = 0.05

NOISE = (
    "Task was destroyed",
    "Event loop is closed",
    "exception calling callback",
    "was never awaited",
    "Traceback",
    "Exception ignored",
    "ResourceWarning",
)

LOOPS_SCRIPT = r"""
import asyncio, gc, sys, threading, warnings
warnings.simplefilter("always")
from pipecat_summarizer.store import open_store, _forgets
_forgets.DELETES_CHECK_S = 0.05
store = open_store(sys.argv[1])
held = threading.Event()
in_flight = []
real = store._removals

async def slow():
    # the timer's read, in flight when the first loop closes: SQLite, a job holding the
    # store's thread until the next loop lets it go; PostgreSQL, a statement under way
    in_flight.append(1)
    if "://" in sys.argv[1]:
        await store._read(lambda conn: conn.execute("SELECT pg_sleep(0.5)"))
    else:
        await store._run(lambda conn: held.wait(60))
    return await real()

async def first():
    await store.open()
    store._removals = slow
    while not in_flight:
        await asyncio.sleep(0.01)
    print("first: read in flight, timer", store._deletes.watching, flush=True)

asyncio.run(first())  # the loop ends: its timer pending, its read cancelled mid-way
held.set()
gc.collect()
store._removals = real
reads = store._deletes.reads

async def second():
    await store.search("anything", user_id="u")  # used on a new loop: its timer armed here
    while store._deletes.reads < reads + 3:
        await asyncio.sleep(0.01)
    print("second: timer", store._deletes.watching, "reads", store._deletes.reads - reads >= 3,
          flush=True)
    await store.close()
    print("second: closed, timer", store._deletes.watching, flush=True)

asyncio.run(second())
gc.collect()
print("done", flush=True)
"""


def test_attack_a_loop_closed_with_its_timer_pending_and_a_read_in_flight(
    store_target, backend, request
):
    """A store opened on a first loop that ends with the timer pending and its read in
    flight, then used on a second loop: nothing is printed by asyncio or the interpreter
    (run with ``-X dev``: debug mode, every warning shown), the second loop gets the timer
    and its reads, the close stops it.

    PostgreSQL (S16-A-2, fixed): the store's pool belonged to the first loop; on the second
    every use and the close raised ``RuntimeError: Event loop is closed``."""
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-c", LOOPS_SCRIPT, store_target],
        capture_output=True,
        text=True,
        timeout=200,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONASYNCIODEBUG": "1"},
    )
    out = [
        line for line in done.stdout.splitlines() if line.startswith(("first", "second", "done"))
    ]
    assert out == [
        "first: read in flight, timer True",
        "second: timer True reads True",
        "second: closed, timer False",
        "done",
    ], (done.stdout[-3000:], done.stderr[-3000:])
    lines = done.stderr.splitlines()
    if backend == "postgres":
        # the ended loop's pool: its sockets cannot be closed without that loop (a transport
        # closes its socket in a callback of its loop); they close when collected, which
        # debug mode reports as a ResourceWarning (hidden by default). Nothing else.
        lines = [
            line
            for line in lines
            if "unclosed transport" not in line and "Enable tracemalloc" not in line
        ]
    noise = [line for line in lines if any(n in line for n in NOISE)]
    assert noise == [], done.stderr[-3000:]


async def test_attack_many_stores_one_timer_each(tmp_path, monkeypatch):
    """Sixty store objects in one process (one file), each used over and over: one timer
    each on the loop, never more, at most one read of each in flight; none left after their
    close."""
    monkeypatch.setattr(_forgets, "DELETES_CHECK_S", PERIOD_S)
    loop = asyncio.get_running_loop()

    def timers() -> int:
        # a timer that came due waits in the ready queue until the loop runs it (many do on
        # a loaded machine): counted there too
        handles = [*loop._scheduled, *loop._ready]  # type: ignore[attr-defined]
        return sum(
            1
            for h in handles
            if not h.cancelled() and getattr(h._callback, "__name__", "") == "_tick"
        )

    before = timers()
    path = tmp_path / "memory.db"
    stores = [SQLiteMemoryStore(path) for _ in range(60)]
    try:
        for i, store in enumerate(stores):
            await store.write(_batch(f"call-{i}", 0, __import__("random").Random(i), n=1))
        for _ in range(3):
            for store in stores:
                await store.search("anything", user_id="caller-1")
                store._check_deletes()
                assert len(store._deletes._tasks) <= 1
            assert timers() - before == 60
        # every store's timer reads on its own
        first = [s._deletes.reads for s in stores]
        while any(s._deletes.reads < r + 2 for s, r in zip(stores, first, strict=True)):
            await asyncio.sleep(PERIOD_S)
            assert timers() - before == 60
    finally:
        for store in stores:
            await store.close()
    assert timers() == before


async def test_attack_a_postgres_read_held_by_a_lock_never_piles_up(pg_server, monkeypatch):
    """Another session holds an ACCESS EXCLUSIVE lock on ``removals`` for many periods: the
    timer's read waits for it, and while it waits the ticks start no other (one in flight,
    counted over ten ticks); once the lock goes the read answers and the next ones come.
    (A caller's search reads ``removals`` too, for its kept word counts: it waits for such a
    lock as well, and recall lets it go at the turn's deadline.)"""
    monkeypatch.setattr(_forgets, "DELETES_CHECK_S", PERIOD_S)
    dsn = pg_server.create_database(f"test_{os.getpid()}_timer_lock")
    store = PostgresMemoryStore(dsn)
    await store.open()
    await store.write(_batch("call-1", 0, __import__("random").Random(1), n=2, word="lighthouse"))
    in_flight = most = started = 0
    real = store._removals

    async def counted() -> int | None:
        nonlocal in_flight, most, started
        started += 1
        in_flight += 1
        most = max(most, in_flight)
        try:
            return await real()
        finally:
            in_flight -= 1

    store._removals = counted  # type: ignore[method-assign]
    ticks = 0
    tick = _forgets.Deletes._tick

    def counting_tick(self, *args):
        nonlocal ticks
        ticks += 1
        tick(self, *args)

    monkeypatch.setattr(_forgets.Deletes, "_tick", counting_tick)
    locker = await asyncpg.connect(dsn)
    try:
        tx = locker.transaction()
        await tx.start()
        await locker.execute("LOCK TABLE removals IN ACCESS EXCLUSIVE MODE")
        while in_flight == 0:  # the timer's read, waiting for the lock
            await asyncio.sleep(PERIOD_S / 2)
        held_at, started_at = ticks, started  # (a read may have answered before the lock)
        while ticks < held_at + 10:
            await asyncio.sleep(PERIOD_S / 2)
        assert in_flight == 1 and most == 1 and started == started_at
        reads = store._deletes.reads
        await tx.rollback()
        while store._deletes.reads < reads + 2:  # the held one answered, then the next
            await asyncio.sleep(PERIOD_S / 2)
        assert most == 1
    finally:
        await locker.close()
        await store.close()
    assert not store._deletes.watching


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_attack_a_postgres_store_opened_on_one_loop_is_used_on_another(store_target, request):
    """``asyncio.run(store.open())`` at an application's start, then its own loop: the
    store answers there and closes (S16-A-2: both raised ``Event loop is closed``)."""
    store = PostgresMemoryStore(store_target)
    asyncio.run(store.open())
    try:
        assert asyncio.run(store.search("anything", user_id="u")) == []
    finally:
        asyncio.run(store.close())

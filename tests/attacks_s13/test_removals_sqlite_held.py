"""Attacks on SQLite's search holding its first statement (the removals' read, schema v8,
4e5b3cd) open until it ends: an interrupt at each of the search's statements, a search
cancelled at the turn's deadline, another store object's forget or a checkpoint while a
search holds its snapshot. The held statement must never outlive the search (a later
checkpoint finds no reader, the store closes), no interrupted search may leave a count
kept that a fresh store would not find, and the worker then finds what a fresh store finds.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from contextlib import closing

import pytest

from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.store._sqlite_search import RANK_MATCHES
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord

MANY = RANK_MATCHES + 50
DAY = 86400.0


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


async def _archive(store: SQLiteMemoryStore, now: float) -> None:
    """al: MANY old "card" messages (90 days), 100 recent ones, two with "zebra"."""
    await store.write(
        [_msg(f"o-{i // 500}", i % 500, f"card {i}", now - 90 * DAY + i) for i in range(MANY)]
    )
    await store.write([_msg("r", i, f"card {i}", now - 3600 + i) for i in range(100)])
    await store.write([_msg("z", 0, "zebra card", now - 10), _msg("z", 1, "a zebra", now - 5)])


def _readers(path) -> int:
    """A full checkpoint by another connection: 1 when a reader's snapshot held it up.

    Tried for a second: a store's checkpointer truncating at the same moment (an opening
    that found the WAL with bytes owes one, S17-A-1) refuses it as busy too, for
    milliseconds; a snapshot held by a reader holds it up the whole second."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        for _ in range(20):
            busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            if not busy:
                return 0
            time.sleep(0.05)
        return busy


async def _statements(store: SQLiteMemoryStore, query: str) -> int:
    """How many statements of the caller's search run (FTS5's own left out)."""
    seen: list[str] = []

    def hook(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(lambda sql: None if sql.startswith("--") else seen.append(sql))

    await store._run(hook)
    try:
        await store.search(query, user_id="al", any_word=True, limit=20)
    finally:
        await store._run(lambda conn: conn.set_trace_callback(None))
    return len(seen)


@pytest.mark.parametrize("kept", [False, True], ids=["counting", "counts kept"])
async def test_removals_an_interrupt_at_each_statement_of_a_search(tmp_path, kept):
    # the search is interrupted as each of its statements starts (the turn's deadline, at
    # each moment a statement can be stopped), the worker counting "card" (its first search)
    # or reusing its kept count; then another process purges al's old messages. Each
    # interrupted search raises (never a partial answer; an interrupt that lands as the
    # statement opening FTS5's index starts fails it as "vtable constructor failed": noted,
    # left alone, the next statement opens it again), its held statement is gone (a
    # checkpoint finds no reader), and the worker's next search finds what a fresh store
    # finds (no count kept from a search cut short)
    path = tmp_path / "m.db"
    now = time.time()
    setup = SQLiteMemoryStore(path)
    await _archive(setup, now)
    await setup.close()
    probe = SQLiteMemoryStore(path)
    try:
        if kept:
            await probe.search("card zebra", user_id="al", any_word=True)
        n = await _statements(probe, "card zebra")
    finally:
        await probe.close()
    assert n >= 3  # the removals, the counts, the hits, ...
    outcomes = []
    for k in range(1, n + 1):
        worker, fresh = SQLiteMemoryStore(path), SQLiteMemoryStore(path)
        try:
            if kept:
                await worker.search("card zebra", user_id="al", any_word=True)
            state = {"k": k, "seen": 0}

            def trace(sql: str, conn_ref: list, state: dict = state) -> None:
                if sql.startswith("--"):
                    return
                state["seen"] += 1
                if state["seen"] == state["k"]:
                    conn_ref[0].interrupt()

            def hook(conn: sqlite3.Connection) -> None:
                ref = [conn]
                conn.set_trace_callback(lambda sql: trace(sql, ref))

            await worker._run(hook)
            try:
                got = await worker.search("card zebra", user_id="al", any_word=True, limit=20)
                outcome = f"answered {len(got)}"
            except sqlite3.OperationalError as e:
                # "interrupted", or FTS5's "vtable constructor failed" when the interrupt
                # stops the statement that opens the index
                outcome = "raised" if "interrupted" in str(e) or "vtable" in str(e) else str(e)
            await worker._run(lambda conn: conn.set_trace_callback(None))
            busy = _readers(path)
            with closing(sqlite3.connect(path, isolation_level=None)) as other:
                other.execute("DELETE FROM messages WHERE at < ?", (now - 30 * DAY,))
            await worker.write([_msg("r", 100 + k, "zebra card again", now)])
            want = _keys(await fresh.search("card zebra", user_id="al", any_word=True, limit=20))
            got_after = _keys(
                await worker.search("card zebra", user_id="al", any_word=True, limit=20)
            )
            outcomes.append((k, outcome, busy, got_after == want, len(want)))
        finally:
            for store in (worker, fresh):
                await store.close()
        # the next round starts from the same archive: the old messages back, the new gone
        setup = SQLiteMemoryStore(path)
        await setup.write(
            [_msg(f"o-{i // 500}", i % 500, f"card {i}", now - 90 * DAY + i) for i in range(MANY)]
        )
        await setup.close()
        with closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("DELETE FROM messages WHERE call_id = 'r' AND position >= 100")
    assert all(o[4] == 20 for o in outcomes)  # "card" ranked once the old ones went
    assert [o for o in outcomes if o[1] != "raised" or o[2] or not o[3]] == []


async def test_removals_a_search_cancelled_at_the_deadline_leaves_nothing_open(tmp_path):
    # a search held mid-way (its statements slowed) is cancelled by the turn's deadline;
    # the store interrupts it. Its held statement must go: another connection's checkpoint
    # finds no reader, the worker's next write and search work, it closes, and opens again
    path = tmp_path / "m.db"
    now = time.time()
    worker, fresh = SQLiteMemoryStore(path), SQLiteMemoryStore(path)
    reached, release = threading.Event(), threading.Event()
    try:
        await _archive(worker, now)

        def slow() -> int:
            reached.set()
            release.wait(0.002)
            return 0

        await worker._run(lambda conn: conn.set_progress_handler(slow, 100))
        search = asyncio.ensure_future(worker.search("card zebra", user_id="al", any_word=True))
        await asyncio.to_thread(reached.wait, 30)
        search.cancel()
        with pytest.raises(asyncio.CancelledError):
            await search
        await worker._run(lambda conn: conn.set_progress_handler(None, 0))
        busy = _readers(path)
        await worker.write([_msg("z", 9, "zebra after", now)])
        got = _keys(await worker.search("zebra", user_id="al", limit=20))
        await worker.close()
        again = _keys(await worker.search("zebra", user_id="al", limit=20))  # opens again
        want = _keys(await fresh.search("zebra", user_id="al", limit=20))
    finally:
        release.set()
        for store in (worker, fresh):
            await store.close()
    assert busy == 0
    assert got == want == again and ("z", 9) in want


async def test_removals_another_stores_forget_while_a_search_holds_its_snapshot(tmp_path, logs):
    # the worker's search is paused mid-way (holding its snapshot) while another store
    # object forgets al: the forget commits (WAL: a reader never blocks a writer), its WAL
    # truncation is held up by the snapshot (a WARNING: the forgotten text leaves the WAL at
    # the next checkpoint), the paused search answers from its snapshot; afterwards the
    # worker finds nothing of al's, as a fresh store, and a checkpoint truncates the WAL
    path = tmp_path / "m.db"
    now = time.time()
    worker, admin, fresh = (SQLiteMemoryStore(path) for _ in range(3))
    paused, go = threading.Event(), threading.Event()
    try:
        await _archive(worker, now)
        await admin.open()
        state = {"on": True}

        def pause() -> int:
            if state["on"]:
                state["on"] = False
                paused.set()
                go.wait(30)
            return 0

        await worker._run(lambda conn: conn.set_progress_handler(pause, 1000))
        search = asyncio.ensure_future(
            worker.search("card zebra", user_id="al", any_word=True, limit=20)
        )
        await asyncio.to_thread(paused.wait, 30)
        forgot = await asyncio.wait_for(admin.forget("al"), 60)
        go.set()
        during = await asyncio.wait_for(search, 60)
        await worker._run(lambda conn: conn.set_progress_handler(None, 0))
        back = time.time() + 1
        await admin.write(
            [CallRecord("back", user_id="al", started_at=back), _msg("back", 0, "zebra", back)]
        )
        got = _keys(await worker.search("card zebra", user_id="al", any_word=True, limit=20))
        want = _keys(await fresh.search("card zebra", user_id="al", any_word=True, limit=20))
        busy = _readers(path)
    finally:
        go.set()
        for store in (worker, admin, fresh):
            await store.close()
    assert forgot == MANY + 102
    assert _keys(during) == [("z", 0), ("z", 1)]  # the snapshot before the forget
    assert want == [("back", 0)] and got == want
    assert any("could not truncate the WAL" in r["message"] for r in logs)  # noted
    assert busy == 0

"""S17 attack round (helper A): ``MemoryStore.search_noticing``, a recall turn's search and
its forget watch in one trip, attacked on both backends.

- two callers on one store: one's tombstone never hides the other's rows nor counts as the
  other's forget, and never leaks its rows to the other;
- another process's forget committing in the middle of the trip (SQLite: between the
  tombstone's read and the search's statements, the forget's two transactions; PostgreSQL:
  the forget under way, holding the caller's lock, when the statement starts): the
  forgotten rows never come back without the forget being noticed;
- an application's subclass overriding ``search`` (a filter): ``search_noticing`` serves
  its hits, never the backend's own.

"Another process" is a second store object or a raw connection on the same database.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time

import asyncpg
import pytest

from pipecat_summarizer.store import PostgresMemoryStore, _sqlite_forget, _sqlite_search, open_store
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord, user_hash

WORD = "harbourmaster"


def _records(user_id: str, call_id: str, at: float, text: str) -> list:
    return [
        CallRecord(call_id=call_id, user_id=user_id, started_at=at, ended_at=at + 60.0),
        ArchivedMessage(
            call_id=call_id,
            position=0,
            role="user",
            content=text,
            message_json='{"role": "user"}',
            at=at,
            user_id=user_id,
        ),
    ]


async def _two_callers(target: str):
    store = open_store(target)
    then = time.time() - 3600
    await store.write(_records("alice", "a-1", then, f"alice's {WORD} is Olga"))
    await store.write(_records("bob", "b-1", then, f"bob's {WORD} is Pavel"))
    return store


def _texts(hits) -> list[str]:
    return [h.content for h in hits]


async def test_attack_two_callers_one_forgotten_by_another_process(store_target):
    """Alice is forgotten by another process (a second store object) during both callers'
    calls. Bob's turn: his row, nothing noticed, before and after; Alice's: nothing, and
    the forget noticed (once)."""
    store = await _two_callers(store_target)
    other = open_store(store_target)
    since = time.time()
    try:
        for user_id in ("alice", "bob"):
            await store.forget_baseline(user_id, since)
            hits, noticed = await store.search_noticing(WORD, user_id=user_id, since=since)
            assert len(hits) == 1 and user_id in hits[0].content and not noticed
        assert await other.forget("alice") > 0
        hits, noticed = await store.search_noticing(WORD, user_id="bob", since=since)
        assert _texts(hits) == [f"bob's {WORD} is Pavel"] and not noticed
        hits, noticed = await store.search_noticing(WORD, user_id="alice", since=since)
        assert hits == [] and noticed
        hits, noticed = await store.search_noticing(WORD, user_id="bob", since=since)
        assert _texts(hits) == [f"bob's {WORD} is Pavel"] and not noticed
    finally:
        await other.close()
        await store.close()


@pytest.mark.parametrize("steps", ["tombstone", "tombstone+deletes"])
async def test_attack_sqlite_forget_commits_between_the_watch_and_the_search(
    tmp_path, monkeypatch, steps
):
    """SQLite: another process's forget commits its tombstone (and, the second case, its
    deletes) after the trip has read the tombstone and before the search's statements:
    the watch says nothing, so the rows must be hidden (the forget pending) or gone."""
    path = tmp_path / "memory.db"
    store = await _two_callers(str(path))
    since = time.time()
    await store.forget_baseline("alice", since)
    find = _sqlite_search.find
    ran: list[str] = []

    def forget_in_between(conn, *args, **kwargs):
        if not ran:
            other = sqlite3.connect(path, isolation_level=None)
            try:
                at = time.time()
                _sqlite_forget.begin(other, "alice", at)
                if steps != "tombstone":
                    _sqlite_forget.finish(other, "alice", at)
            finally:
                other.close()
            ran.append(steps)
        return find(conn, *args, **kwargs)

    monkeypatch.setattr(_sqlite_search, "find", forget_in_between)
    try:
        hits, noticed = await store.search_noticing(WORD, user_id="alice", since=since)
        assert ran and not noticed  # the tombstone was read before the forget committed
        assert hits == []
        hits, noticed = await store.search_noticing(WORD, user_id="bob", since=since)
        assert _texts(hits) == [f"bob's {WORD} is Pavel"] and not noticed
        _, noticed = await store.search_noticing(WORD, user_id="alice", since=since)
        assert noticed  # the next turn's watch
    finally:
        await store.close()


async def test_attack_postgres_forget_under_way_when_the_search_starts(pg_server):
    """PostgreSQL: another process's forget holds the caller's lock (tombstone written, rows
    deleted, not committed) when the turn's statement starts, and commits while it waits.
    The rows and the tombstone come from that statement: the rows may never come back with
    a tombstone that does not show the forget."""
    dsn = pg_server.create_database("test_s17_noticing_under_way")
    store = await _two_callers(dsn)
    assert isinstance(store, PostgresMemoryStore)
    since = time.time()
    await store.forget_baseline("alice", since)
    hits, noticed = await store.search_noticing(WORD, user_id="alice", since=since)
    assert len(hits) == 1 and not noticed
    conn = await asyncpg.connect(dsn)
    try:
        h = user_hash("alice")
        tx = conn.transaction()
        await tx.start()
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", h)
        await conn.execute(
            "INSERT INTO forgotten VALUES ($1, $2) ON CONFLICT(user_hash) DO UPDATE "
            "SET at = excluded.at",
            h,
            time.time(),
        )
        await conn.execute("DELETE FROM messages WHERE user_id = 'alice'")
        turn = asyncio.ensure_future(store.search_noticing(WORD, user_id="alice", since=since))
        for _ in range(500):  # until the turn's statement waits for the lock (bounded)
            waiting = await conn.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            )
            if waiting or turn.done():
                break
            await asyncio.sleep(0.01)
        assert waiting, "the turn's statement did not wait for the forget under way"
        await tx.commit()
        hits, noticed = await asyncio.wait_for(turn, 30)
        assert hits == [] or noticed
        assert noticed  # read after the forget committed (it waited for its lock)
    finally:
        await conn.close()
        await store.close()


async def test_attack_a_subclass_filter_on_search_is_what_search_noticing_serves(store_target):
    """An application's filter overriding ``search`` (never show lines tagged private):
    ``search_noticing`` (the turn's trip) serves the filtered hits, and still notices a
    forget by another process."""
    base = type(open_store(store_target))

    class Filtered(base):  # type: ignore[misc, valid-type]
        async def search(self, query, **kwargs):
            hits = await super().search(query, **kwargs)
            return [h for h in hits if "private" not in h.content]

    store = Filtered(store_target)
    then = time.time() - 3600
    await store.write(_records("alice", "a-1", then, f"private: alice's {WORD} is Olga"))
    await store.write(_records("alice", "a-2", then + 60, f"alice's {WORD} moved to Riga"))
    other = open_store(store_target)
    since = time.time()
    try:
        await store.forget_baseline("alice", since)
        hits, noticed = await store.search_noticing(WORD, user_id="alice", since=since, _replies=3)
        assert _texts(hits) == [f"alice's {WORD} moved to Riga"] and not noticed
        await other.forget("alice")
        hits, noticed = await store.search_noticing(WORD, user_id="alice", since=since)
        assert hits == [] and noticed
    finally:
        await other.close()
        await store.close()


async def test_attack_two_live_calls_of_one_caller_both_drop_the_forgotten(store_target):
    """The caller has two live calls in this process (two devices, or a redial before the
    first call's end), each with its own start; another process forgets them: neither gets
    the rows back, and the forget is counted once in this process (``noticed`` is true for
    the first call's turn that reads it: the other call learns of it by
    ``forget_generation``, as every part of a call compares it)."""
    store = await _two_callers(store_target)
    other = open_store(store_target)
    first = time.time()
    second = first + 1.0
    try:
        for since in (first, second):
            await store.forget_baseline("alice", since)
            hits, noticed = await store.search_noticing(WORD, user_id="alice", since=since)
            assert len(hits) == 1 and not noticed
        generation = store.forget_generation("alice")
        assert await other.forget("alice") > 0
        seen = []
        for since in (first, second):
            hits, noticed = await store.search_noticing(WORD, user_id="alice", since=since)
            assert hits == []
            seen.append(noticed)
        assert seen == [True, False]
        assert store.forget_generation("alice") != generation
    finally:
        await other.close()
        await store.close()

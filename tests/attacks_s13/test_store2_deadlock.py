"""A forget or a purge that PostgreSQL rolls back to break a deadlock runs again (S13-A-2).

The store's forget and purge take the tables in one order, so they no longer deadlock with
each other (tests/attacks_s13/test_removals_locks.py); an operator's transaction may still
take them in another. Here one is made certain: another connection holds the row the
store's transaction wants last, then deletes a row that transaction already deleted.
PostgreSQL rolls the store's transaction back (it waited first, and the other connection's
``deadlock_timeout`` is longer); the store runs it again once the other connection ends, and
the forget (or purge) is done, not lost.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from pipecat_summarizer.store import open_store
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord, FactEvent, user_hash

DAY = 86400.0
#: A hang detector, far past any wait the operation could have by design.
HANG_S = 60.0


def _msg(call: str, i: int, at: float) -> ArchivedMessage:
    text = f"card {i}"
    return ArchivedMessage(
        call_id=call,
        position=i,
        role="user",
        content=text,
        message_json=json.dumps({"role": "user", "content": text}),
        turn=i // 2,
        at=at + i,
        user_id="al",
    )


async def _al(store, now: float) -> None:
    """al: an old call (90 days back, with a fact) and a recent one, 10 messages each."""
    for call, at in (("al-old", now - 90 * DAY), ("al-new", now - DAY)):
        await store.write(
            [
                CallRecord(call, user_id="al", started_at=at, ended_at=at + 60),
                *(_msg(call, i, at) for i in range(10)),
                FactEvent(call, 1, f"key {call}", "pinned", "likes tea", at=at, user_id="al"),
            ]
        )


async def _waiting(watch, task: asyncio.Future) -> None:
    """Until ``task`` ends or a session of the database waits for a lock."""
    for _ in range(3000):
        if task.done() or await watch.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        ):
            return
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("operation", ["forget", "purge"])
async def test_store2_a_deadlocked_forget_or_purge_runs_again(store_target, operation):
    import asyncpg

    store, fresh = open_store(store_target), open_store(store_target)
    other = await asyncpg.connect(store_target)
    watch = await asyncpg.connect(store_target)
    now = time.time()
    task = None
    try:
        await _al(store, now)
        # the other connection (an operator's script) would not be the one rolled back
        await other.execute("SET deadlock_timeout = '30s'")
        tr = other.transaction()
        await tr.start()
        if operation == "forget":
            # the row the forget writes last: its tombstone
            await other.execute("INSERT INTO forgotten VALUES ($1, 0)", user_hash("al"))
            task = asyncio.ensure_future(store.forget("al"))
            again = "DELETE FROM messages WHERE user_id = 'al'"
        else:
            # the rows the purge deletes last: the caller's current facts
            await other.execute("UPDATE caller_facts SET text = text WHERE user_id = 'al'")
            task = asyncio.ensure_future(store.purge_older_than(30))
            again = f"DELETE FROM messages WHERE user_id = 'al' AND at < {now - 30 * DAY}"
        await _waiting(watch, task)
        assert not task.done()  # it waits for the other connection's row
        # rows the store's transaction deleted: the other connection gets them only once
        # that transaction was rolled back (a deadlock; it waited first)
        deleted = await asyncio.wait_for(other.execute(again), HANG_S)
        await tr.rollback()
        n = await asyncio.wait_for(task, HANG_S)
        task = None
        left = await watch.fetch("SELECT call_id FROM messages ORDER BY call_id, position")
        calls = [c.call_id for c in await fresh.calls("al")]
    finally:
        if task is not None:
            task.cancel()
        await other.close()
        await watch.close()
        for s in (store, fresh):
            await s.close()
    assert int(deleted.split()[-1]) == (20 if operation == "forget" else 10)
    if operation == "forget":
        # 2 calls, 20 messages, 2 facts (their current copies are not counted)
        assert (n, left, calls) == (24, [], [])
    else:
        # the old call, its 10 messages and its fact (its current copy is not counted)
        assert n == 12
        assert {r["call_id"] for r in left} == {"al-new"} and calls == ["al-new"]

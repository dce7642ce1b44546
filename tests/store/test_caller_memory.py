"""A returning caller's memory is read without the fact history: however many calls the
caller had, ``caller_memory`` reads their current facts (kept by every write) and their
latest calls, never the whole history of fact changes."""

from __future__ import annotations

import asyncio
import sqlite3

import asyncpg

from pipecat_summarizer.store import open_store
from pipecat_summarizer.store.records import CallRecord, FactEvent

CALLS = 40


def _history(user_id: str) -> list:
    """``CALLS`` calls, each correcting the same keys; "plan" is unpinned in the last call."""
    records: list = []
    at = 1_000_000.0
    for n in range(CALLS):
        call = f"{user_id}-call-{n}"
        records.append(CallRecord(call, user_id, started_at=at, ended_at=at + 1, summary=f"s{n}"))
        for seq, key in enumerate(("address", "allergy", "plan"), start=1):
            at += 1
            action = "pinned" if n == 0 else "corrected"
            if key == "plan" and n == CALLS - 1:
                action = "unpinned"
            records.append(FactEvent(call, seq, key, action, f"{key} v{n}", at=at, user_id=user_id))
    return records


async def _hide_the_history(target: str, backend: str):
    """Make the fact history unreadable from outside the store: renamed away on SQLite,
    held under an exclusive lock on PostgreSQL (a read of it would wait for good)."""
    if backend == "sqlite":
        with sqlite3.connect(target) as conn:
            conn.execute("ALTER TABLE facts RENAME TO facts_hidden")
        return None
    locker = await asyncpg.connect(target)
    lock = locker.transaction()
    await lock.start()
    await locker.execute("LOCK TABLE facts IN ACCESS EXCLUSIVE MODE")
    return locker


async def test_a_long_history_is_not_read_to_give_a_caller_their_memory(store_target, backend):
    store = open_store(store_target)
    try:
        await store.write([*_history("alice"), *_history("bob")])
    finally:
        await store.close()
    locker = await _hide_the_history(store_target, backend)
    store = open_store(store_target)
    try:
        # bounded: a read that needed the history would fail (SQLite) or wait for the lock
        memory = await asyncio.wait_for(store.caller_memory("alice", max_calls=3), 30)
    finally:
        await store.close()
        if locker is not None:
            await locker.close()
    last = CALLS - 1
    assert {f["key"]: f["text"] for f in memory.facts} == {
        "address": f"address v{last}",
        "allergy": f"allergy v{last}",
    }  # the current value of each key, the unpinned one gone, none of bob's
    assert [text for _, text, _ in memory.summaries] == [f"s{last}", f"s{last - 1}", f"s{last - 2}"]

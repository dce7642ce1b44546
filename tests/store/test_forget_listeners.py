"""A forget tells what the process keeps of the caller outside the store (``on_forget``):
once per listener, for this process's forget and for another's noticed from its tombstone;
a listener that raises costs the forget nothing."""

from __future__ import annotations

import time

from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.store.base import on_forget
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord


async def _archived(store: SQLiteMemoryStore, user_id: str) -> None:
    await store.write(
        [
            CallRecord("c1", user_id=user_id, started_at=time.time()),
            ArchivedMessage("c1", 0, "user", "my dog Rex", "{}", user_id=user_id),
        ]
    )


async def test_a_forget_tells_each_listener_once_and_a_failing_one_costs_nothing(tmp_path):
    told: list[str] = []

    def broken(user_id: str) -> None:
        raise RuntimeError(f"leaks {user_id}")

    stops = [on_forget(told.append), on_forget(told.append), on_forget(broken)]
    store = SQLiteMemoryStore(tmp_path / "m.db")
    await store.open()
    try:
        await _archived(store, "al")
        assert await store.forget("al") > 0
        assert told == ["al"]
        assert await store.search("Rex", user_id="al") == []
    finally:
        for stop in stops:
            stop()
        await store.close()


async def test_another_processs_forget_is_told_when_its_tombstone_is_noticed(tmp_path):
    told: list[str] = []
    since = time.time() - 1
    store, other = SQLiteMemoryStore(tmp_path / "m.db"), SQLiteMemoryStore(tmp_path / "m.db")
    await store.open()
    await other.open()
    try:
        await _archived(store, "al")
        assert await other.forget("al") > 0
        stop = on_forget(told.append)  # only this process's store is listened to from here
        try:
            assert await store.noticed_forget("al", since)
            assert not await store.noticed_forget("al", since)  # counted once
        finally:
            stop()
        assert told == ["al"]
    finally:
        await store.close()
        await other.close()

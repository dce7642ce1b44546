"""A forget keeps the caller's sessions that started after it, on both backends.

A forget's time is taken as it is asked for; its deletes come later (PostgreSQL: once it has
a pooled connection and the caller's advisory lock, after the writes under way; SQLite: its
second transaction, after the store's thread and the database's lock are free). A session of
the caller that started after that time (a new call, or another machine's clock ahead) and
was written meanwhile is a session the tombstone lets write: the forget must not delete it.
SQLite kept it; PostgreSQL deleted it, and its later writes then went on into an archive that
had lost its start.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from pipecat_summarizer.store import PostgresMemoryStore, SQLiteMemoryStore, open_store
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord


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


def _forgetter(target: str):
    """The store object that forgets: one pooled connection on PostgreSQL (to hold it)."""
    if target.startswith("postgres"):
        return PostgresMemoryStore(target, max_size=1)
    return SQLiteMemoryStore(target)


async def _stall(store):
    """Keep ``store`` from running anything (its thread, or its only connection) until the
    returned function is awaited."""
    if isinstance(store, SQLiteMemoryStore):
        gate = threading.Event()
        held = asyncio.ensure_future(store._run(lambda conn: gate.wait(30)))

        async def sqlite_go() -> None:
            gate.set()
            await held

        return sqlite_go
    lease = await store._acquire()
    await lease.__aenter__()

    async def pg_go() -> None:
        await lease.__aexit__(None, None, None)

    return pg_go


async def _old_archive(store, now: float) -> None:
    await store.write(
        [
            CallRecord("old", user_id="al", started_at=now - 86400),
            _msg("old", 0, "my locker code is 4471", now - 86400),
            _msg("old", 1, "noted, locker 4471", now - 86399),
        ]
    )


@pytest.mark.parametrize("how", ["written while the forget waits", "a clock ahead"])
async def test_store_a_session_started_after_the_forget_keeps_its_rows(store_target, how):
    forgetter, caller, fresh = _forgetter(store_target), open_store(store_target), None
    now = time.time()
    try:
        await _old_archive(caller, now)
        await forgetter.open()
        if how == "a clock ahead":
            # another machine's call, its clock an hour ahead: started after the forget's time
            start = time.time() + 3600
            await caller.write(
                [CallRecord("new", user_id="al", started_at=start), _msg("new", 0, "hi", start)]
            )
            deleted = await forgetter.forget("al")
        else:
            go = await _stall(forgetter)
            forget = asyncio.ensure_future(forgetter.forget("al"))
            await asyncio.sleep(0)  # the forget's time taken; it waits for its store
            assert not forget.done()
            start = time.time() + 0.01  # a call that starts after it, written meanwhile
            await caller.write(
                [CallRecord("new", user_id="al", started_at=start), _msg("new", 0, "hi", start)]
            )
            await go()
            deleted = await asyncio.wait_for(forget, 30)
        # the new session goes on writing: the tombstone lets it (it started after)
        await caller.write([_msg("new", 1, "my new locker is 5120", start + 1)])
        fresh = open_store(store_target)
        calls = [c.call_id for c in await fresh.calls("al")]
        new = [(m.position, m.content) for m in await fresh.messages("new")]
        old = await fresh.messages("old")
        hits = await fresh.search("locker", user_id="al", any_word=True)
    finally:
        for store in (forgetter, caller, fresh):
            if store is not None:
                await store.close()
    assert deleted == 3  # the old call's row and its two messages
    assert old == []
    assert calls == ["new"]
    assert new == [(0, "hi"), (1, "my new locker is 5120")]
    assert [(h.call_id, h.position) for h in hits] == [("new", 1)]

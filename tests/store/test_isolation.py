"""A reused ``call_id`` (a room name, a reconnect id) never merges two sessions: each
recorder records under its own session key, with the application's id as its label.
Through real pipelines, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

from pipecat_summarizer.params import MemoryParams, WriterParams
from pipecat_summarizer.store import open_store
from tests.store.test_backends import _call as _store_call
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import texts_of

FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)
SYSTEM = "You are a helpful voice assistant."
PASSPORT = "My passport number is XK7731952 and I fly to Lisbon."


def _summaries(body: dict) -> Reply:
    if is_summary_request(body):
        if "XK7731952" in texts_of(body["messages"]):
            return Reply("FACTS:\n- passport: XK7731952\n- trip: Lisbon")
        return Reply("FACTS:\n- topic: the weather")
    return Reply("Sure thing.")


async def _call(server, target, **kwargs):
    """One call through a real pipeline (test_store's), returning its processor."""
    processor, _ = await _store_call(server, target, **kwargs)
    return processor


async def test_a_reused_call_id_never_gives_one_caller_anothers_memory(openai_server, store_target):
    openai_server.handler = _summaries
    alice = [PASSPORT, *(f"question {i} about my flight" for i in range(6))]
    await _call(
        openai_server,
        store_target,
        user_id="alice",
        call_id="room-1",
        texts=alice,
        pins=[("seat", "Alice wants seat 14C")],
    )
    # the room is reused: first by Bob, then by an anonymous caller
    await _call(openai_server, store_target, user_id="bob", call_id="room-1", texts=["hi"])
    await _call(openai_server, store_target, user_id=None, call_id="room-1", texts=["hello"])
    store = open_store(store_target)
    try:
        mine = await store.calls("alice")
        assert [c.label for c in mine] == ["room-1"] and "XK7731952" in (mine[0].summary or "")
        assert {f["key"] for f in mine[0].facts} >= {"seat"}
        bobs = await store.calls("bob")
        assert [c.label for c in bobs] == ["room-1"]
        assert "XK7731952" not in (bobs[0].summary or "") and not bobs[0].facts
        assert len({c.call_id for c in await store.calls(limit=10)}) == 3  # three sessions
        memory = await store.caller_memory("bob")
        assert memory.facts == [] and all("XK7731952" not in t for _, t, _ in memory.summaries)
    finally:
        await store.close()
    # Bob's next call starts with nothing of Alice's
    openai_server.requests.clear()
    await _call(openai_server, store_target, user_id="bob", call_id="room-2", texts=["it's me"])
    for body in openai_server.chat_requests:
        text = texts_of(body["messages"])
        assert "XK7731952" not in text and "14C" not in text and "Lisbon" not in text


async def test_a_reconnect_under_the_same_id_keeps_both_sessions_messages(
    openai_server, store_target
):
    openai_server.handler = _summaries
    first = [f"first session pelican {i}" for i in range(7)]
    second = [f"second session zebrafish {i}" for i in range(7)]
    await _call(openai_server, store_target, user_id="alice", call_id="room-9", texts=first)
    await _call(openai_server, store_target, user_id="alice", call_id="room-9", texts=second)
    store = open_store(store_target)
    try:
        said = {h.content for h in await store.search("pelican", user_id="alice", limit=50)}
        said |= {h.content for h in await store.search("zebrafish", user_id="alice", limit=50)}
        assert said == set(first) | set(second)
        sessions = await store.calls("alice")
        assert [c.label for c in sessions] == ["room-9", "room-9"]
        older, newer = sessions[1].call_id, sessions[0].call_id
        assert older != newer
        # each session's archive is whole, in its own order; the label names the newest
        assert [m.content for m in await store.messages(older) if m.role == "user"] == first
        assert [m.content for m in await store.messages(newer) if m.role == "user"] == second
        assert [m.content for m in await store.messages("room-9") if m.role == "user"] == second
        assert (await store.call("room-9")).call_id == newer
    finally:
        await store.close()


async def test_a_v3_store_migrates_on_open(store_target, backend):
    """A database written by schema v3 (calls keyed by the application's id) opens as v4:
    each old call is its own session labelled with its id, and the callers' current facts
    are gathered from their history."""
    v3 = [
        "INSERT INTO calls(call_id, user_id, started_at, summary) VALUES "
        "('old-1', 'alice', 1000, 'FACTS:\n- hotel: Grand Budapest')",
        "INSERT INTO facts VALUES ('old-1', 1, 'alice', 'hotel', 'pinned', 'Ritz', 'fact', "
        "'app', 'app', 1, 1000)",
        "INSERT INTO facts VALUES ('old-1', 2, 'alice', 'hotel', 'corrected', 'Grand Budapest', "
        "'fact', 'app', 'app', 2, 1001)",
        "INSERT INTO facts VALUES ('old-1', 3, 'alice', 'pet', 'pinned', 'a cat', 'fact', "
        "'app', 'app', 2, 1001)",
        "INSERT INTO facts VALUES ('old-1', 4, 'alice', 'pet', 'unpinned', 'a cat', 'fact', "
        "'app', 'app', 3, 1002)",
    ]
    if backend == "sqlite":
        import sqlite3

        from pipecat_summarizer.store._sqlite_schema import MIGRATIONS, scope_of

        conn = sqlite3.connect(store_target, isolation_level=None)
        conn.create_function("pcs_scope", 2, scope_of, deterministic=True)
        conn.execute("CREATE TABLE schema_version(version INTEGER NOT NULL)")
        for v in (1, 2, 3):
            for statement in MIGRATIONS[v]:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version VALUES (?)", (v,))
        for statement in v3:
            conn.execute(statement)
        conn.close()
    else:
        import asyncpg

        from pipecat_summarizer.store._postgres_schema import migrations as _migrations

        conn = await asyncpg.connect(store_target)
        await conn.execute("CREATE TABLE schema_version(version INTEGER NOT NULL)")
        for v in (1, 2, 3):
            for statement in _migrations("english")[v]:
                await conn.execute(statement)
            await conn.execute("INSERT INTO schema_version VALUES ($1)", v)
        for statement in v3:
            await conn.execute(statement)
        await conn.close()
    store = open_store(store_target)
    try:
        call = await store.call("old-1")
        assert call is not None and call.call_id == "old-1" and call.label is None
        memory = await store.caller_memory("alice")
        assert [(f["key"], f["text"]) for f in memory.facts] == [("hotel", "Grand Budapest")]
        assert memory.summaries and "Grand Budapest" in memory.summaries[0][1]
    finally:
        await store.close()


async def test_two_sessions_under_one_id_at_once_on_two_workers(store_target):
    """Two workers (two store objects) record two callers under one call id at the same
    moment: no round trip decides anything, and neither session loses a message."""
    from pipecat_summarizer._session.recorder import CallRecorder

    stores = [open_store(store_target), open_store(store_target)]
    try:
        recorders = [
            CallRecorder(s, "shared-room", user, MemoryParams(resume=False, writer=FAST))
            for s, user in zip(stores, ("alice", "bob"), strict=True)
        ]
        for r in recorders:
            r.start()
        for i in range(20):
            for r in recorders:
                r.archive([{"role": "user", "content": f"{r.user_id} says pelican {i}"}], "evicted")
        ends = [
            r.end(
                ended_by="end",
                summary=f"{r.user_id} summary",
                facts=(),
                messages_in_context=0,
                compactions=0,
            )
            for r in recorders
        ]
        assert all(await asyncio.gather(*ends))
        store = stores[0]
        for user in ("alice", "bob"):
            calls = await store.calls(user)
            assert [(c.label, c.summary) for c in calls] == [("shared-room", f"{user} summary")]
            said = [m.content for m in await store.messages(calls[0].call_id)]
            assert said == [f"{user} says pelican {i}" for i in range(20)]
    finally:
        for s in stores:
            await s.close()

"""Through a real pipeline on the real PostgreSQL: another process's forget of the caller
never commits during the call (its advisory lock held all along, the tombstone wait made
long). The call must answer each turn without waiting for it (the LLM's request arrives
while the lock is still held) and place nothing recalled (the forget is not known in time)."""

from __future__ import annotations

import asyncio
import time

import pytest
from pipecat.frames.frames import UserStoppedSpeakingFrame

from pipecat_summarizer import RecallPrefetch
from pipecat_summarizer.store import _postgres_pool as pool
from pipecat_summarizer.store.records import user_hash
from tests.attacks_s10.early_harness import Act, Actor
from tests.support.early_search import (
    RECALL,
    desk,
    end_turn,
    prefetch_pipeline,
    recall_blocks,
    seed_trips,
    speech,
    watched_store,
)
from tests.support.openai_server import Reply
from tests.support.settle import Gap, run_settling

asyncpg = pytest.importorskip("asyncpg")

#: The wait made far longer than the call: a turn that waited for it would be seen.
LONG_WAIT_S = 30.0
#: The lock goes after this long whatever happens (a frame that waited shows as "released").
RELEASE_S = 8.0


@pytest.mark.parametrize("locked", [True, False], ids=["forget held", "control"])
async def test_a_forget_that_never_commits_delays_no_turn(
    openai_server, pg_server, monkeypatch, locked
):
    monkeypatch.setattr(pool, "TOMBSTONE_WAIT_S", LONG_WAIT_S)
    dsn = pg_server.create_database(f"s10_held_{time.monotonic_ns()}")
    store = watched_store(dsn)
    other = await asyncpg.connect(dsn)
    held = {"on": False}
    arrivals: list[bool] = []  # for each request to the main LLM: was the lock still held

    def answer(body):
        arrivals.append(held["on"])
        return Reply("Sure.")

    try:
        await seed_trips(store)
        tx = other.transaction()
        await tx.start()
        tx_open = [True]
        if locked:
            await other.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", user_hash("alice")
            )
            held["on"] = True

        async def release() -> None:
            if tx_open:
                tx_open.clear()
                held["on"] = False
                await tx.rollback()  # the forget rolled back

        async def release_later() -> None:
            await asyncio.sleep(RELEASE_S)
            await release()

        releaser = asyncio.ensure_future(release_later())
        context, summarizer, processor = desk(openai_server, store, user_id="alice", recall=RECALL)
        openai_server.handler = answer
        frames = [
            *speech("Which car did I rent at the airport?"),
            *end_turn(),
            *speech("And which hotel room was it in Lisbon?"),
            *end_turn(),
        ]
        try:
            await run_settling(
                prefetch_pipeline(openai_server, context, processor, RecallPrefetch(processor)),
                frames_to_send=frames,
            )
        finally:
            await summarizer.aclose()
        releaser.cancel()
        await release()
    finally:
        await other.close()
        await store.close()
    blocks = recall_blocks(openai_server.chat_requests)
    if not locked:  # the same call without the forget recalls the rental and the room
        assert arrivals == [False, False] and len(blocks) == 2
        return
    assert arrivals == [True, True]  # both turns answered while the forget was under way
    assert blocks == []  # not known in time: nothing


async def test_a_watch_whose_backend_is_killed_mid_wait_places_nothing_forgotten(
    openai_server, pg_server, monkeypatch
):
    # turn 1 ends while another process's forget of alice is under way (her lock held, her
    # rows deleted, the tombstone written, nothing committed); an operator kills the backend
    # whose tombstone read waits on the lock, then the forget commits: the read retried on
    # another connection sees it, nothing of alice is placed, the call answers both turns
    monkeypatch.setattr(pool, "TOMBSTONE_WAIT_S", 5.0)
    dsn = pg_server.create_database(f"s10_kill_{time.monotonic_ns()}")
    store = watched_store(dsn)
    holder = await asyncpg.connect(dsn)
    admin = await asyncpg.connect(dsn)
    killed: list[int] = []
    tx = holder.transaction()

    async def hold(_p) -> None:
        await tx.start()
        key = user_hash("alice")
        await holder.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key)
        await holder.execute("DELETE FROM messages WHERE user_id = 'alice'")
        await holder.execute("INSERT INTO forgotten (user_hash, at) VALUES ($1, 1.0)", key)

    async def kill(_p) -> None:
        for _ in range(300):  # the turn's watch reaches the lock
            pid = await admin.fetchval(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database() AND pid <> $1",
                holder.get_server_pid(),
            )
            if pid is not None:
                killed.append(pid)
                await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
                break
            await asyncio.sleep(0.01)
        await tx.commit()

    try:
        await seed_trips(store)
        context, summarizer, processor = desk(openai_server, store, user_id="alice", recall=RECALL)
        openai_server.handler = lambda body: Reply("Sure.")
        frames = [
            *speech("Which car did I rent at the airport?"),
            Act(hold),
            UserStoppedSpeakingFrame(),
            Act(kill),
            Gap(sleep=0.6),
            *speech("Which car did I rent at the airport, again?"),
            *end_turn(),
        ]
        try:
            await run_settling(
                prefetch_pipeline(
                    openai_server, context, processor, RecallPrefetch(processor), Actor(processor)
                ),
                frames_to_send=frames,
            )
        finally:
            await summarizer.aclose()
    finally:
        await holder.close()
        await admin.close()
        await store.close()
    assert killed, "no tombstone read waited on the forget's lock"
    requests = [b for b in openai_server.chat_requests if b.get("stream")]
    assert len(requests) == 2  # the call answered both turns
    assert recall_blocks(requests) == []
    assert "Fiat" not in str(requests)

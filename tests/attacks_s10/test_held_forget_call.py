"""Through a real pipeline on the real PostgreSQL: another process's forget of the caller
never commits during the call (its advisory lock held all along, the tombstone wait made
long). The call must answer each turn without waiting for it (the LLM's request arrives
while the lock is still held) and place nothing recalled (the forget is not known in time)."""

from __future__ import annotations

import asyncio
import time

import pytest

from pipecat_summarizer import RecallPrefetch
from pipecat_summarizer.store import _postgres_pool as pool
from pipecat_summarizer.store.records import user_hash
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
from tests.support.settle import run_settling

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

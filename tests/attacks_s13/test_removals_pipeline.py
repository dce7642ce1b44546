"""Through a real pipeline on the real PostgreSQL: another process's forget runs all its
deletes and never commits during alice's call (since schema v8, 4e5b3cd, it also holds the
forgotten caller's ``removals`` row, bumped by the messages' trigger). Alice's turns must
be answered while it is held, whoever is being forgotten: bob (her recall goes on: the
rental and the room are placed) or alice herself (nothing placed: the forget is not known in
time, as with the lock alone, tests/attacks_s10/test_held_forget_call.py). With bob's forget
held, alice's call's end is recorded before it ends."""

from __future__ import annotations

import asyncio
import time

import pytest

from pipecat_summarizer import RecallPrefetch
from pipecat_summarizer.store import _postgres_pool as pool
from pipecat_summarizer.store import _postgres_writes
from pipecat_summarizer.store._postgres_schema import REMOVALS_OF
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

#: The removals row of the caller ``$1``.
MINE = REMOVALS_OF.format(user="$1")
#: The tombstone wait made far longer than the call: a turn that waited for it would show.
LONG_WAIT_S = 30.0
#: The forget is rolled back after this long whatever happens.
RELEASE_S = 8.0


@pytest.mark.parametrize("forgotten", ["bob", "alice"])
async def test_removals_a_held_forget_with_its_deletes_delays_no_turn(
    openai_server, pg_server, monkeypatch, forgotten
):
    monkeypatch.setattr(pool, "TOMBSTONE_WAIT_S", LONG_WAIT_S)
    dsn = pg_server.create_database(f"s13_removals_held_{forgotten}_{time.monotonic_ns()}")
    store = watched_store(dsn)
    other = await asyncpg.connect(dsn)
    held = {"on": False}
    arrivals: list[bool] = []  # for each request to the main LLM: was the forget held
    removals: list[int] = []

    def answer(body):
        arrivals.append(held["on"])
        return Reply("Sure.")

    try:
        await seed_trips(store)
        tx = other.transaction()
        await tx.start()
        assert await _postgres_writes.forget(other, forgotten, time.time()) > 0
        removals.append(
            await other.fetchval(f"SELECT n FROM removals WHERE bucket = {MINE}", forgotten)
        )
        held["on"] = True

        async def release() -> None:
            if held["on"]:
                held["on"] = False
                await tx.rollback()

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
        # the call's end recorded (its writer flushed at the end) while the forget is held
        ends = [(c.label, c.ended_at is not None) for c in await store.calls("alice")]
        ended_while_held = held["on"]
        releaser.cancel()
        await release()
        removals.append(
            await other.fetchval(
                f"SELECT COALESCE(sum(n), 0) FROM removals WHERE bucket = {MINE}", forgotten
            )
        )
    finally:
        await other.close()
        await store.close()
    assert removals == [1, 0]  # the held forget's bump, gone with its rollback
    assert arrivals == [True, True]  # both turns answered while the forget was held
    blocks = recall_blocks(openai_server.chat_requests)
    if forgotten == "bob":
        assert len(blocks) == 2 and "Fiat" in blocks[0] and "418" in blocks[1]
        assert ended_while_held and ("now-alice", True) in ends
    else:
        assert blocks == []  # not known in time: nothing

"""Through a real pipeline on the real PostgreSQL: the store's connection is reset by a
pooler's ``DISCARD ALL`` mid-call (its temporary functions and prepared statements gone).
Recall may miss the turn that finds the connection reset, never the turns after it
(S10-A-1)."""

from __future__ import annotations

import time

import pytest

from pipecat_summarizer import RecallPrefetch
from pipecat_summarizer.store import PostgresMemoryStore
from tests.attacks_s10.early_harness import Act, Actor
from tests.support.early_search import (
    RECALL,
    Watched,
    desk,
    end_turn,
    prefetch_pipeline,
    recall_blocks,
    seed_trips,
    speech,
)
from tests.support.openai_server import Reply
from tests.support.settle import run_settling

asyncpg = pytest.importorskip("asyncpg")

ASK = "Which car did I rent at the airport?"


class _OneConnection(Watched, PostgresMemoryStore):
    def __init__(self, dsn: str):
        super().__init__(dsn, min_size=1, max_size=1)


async def _discard_all(p) -> None:
    async with p.recall_step.archive._pool.acquire() as conn:
        await conn.execute("DISCARD ALL")


async def test_recall_comes_back_after_a_session_reset(openai_server, pg_server):
    dsn = pg_server.create_database(f"s10_discard_{time.monotonic_ns()}")
    store = _OneConnection(dsn)
    openai_server.handler = lambda body: Reply("Sure.")
    try:
        await seed_trips(store)
        context, summarizer, processor = desk(openai_server, store, user_id="alice", recall=RECALL)
        frames = [*speech(ASK), *end_turn(), Act(_discard_all)]
        for again in ("", " again", " once more"):
            frames += [*speech(ASK[:-1] + again + "?"), *end_turn()]
        try:
            await run_settling(
                prefetch_pipeline(
                    openai_server, context, processor, RecallPrefetch(processor), Actor(processor)
                ),
                frames_to_send=frames,
            )
        finally:
            await summarizer.aclose()
        # the call's records were written (the write that found the reset tried again)
        last = ASK[:-1] + " once more?"
        saved = await store._read(
            lambda conn: conn.fetchval("SELECT count(*) FROM messages WHERE content = $1", last)
        )
    finally:
        await store.close()
    assert saved == 1  # the last turn's question, said after the reset
    requests = [b for b in openai_server.chat_requests if b.get("stream")]
    assert len(requests) == 4  # the call answered every turn
    placed = [bool(recall_blocks([r])) for r in requests]
    assert placed[0]  # before the reset
    # the search that finds the connection reset runs again on a new one: no turn misses
    assert placed == [True, True, True, True], placed

"""Through a real pipeline on the real PostgreSQL: a purge has folded the removals (a2f1c83,
dad1c4c) and is held open (its transaction never commits during alice's call): it holds
every row of ``removals`` it folded (alice's bucket's too) and the fold's try-lock. Alice's
turns must be answered while it is held, her recall placing the rental and the room (her
searches sum her bucket's rows, which the fold's delete does not hide until it commits),
and her call's end recorded before it ends; another worker's purge meanwhile neither
waits nor folds.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from pipecat_summarizer import RecallPrefetch
from pipecat_summarizer.store import open_store
from pipecat_summarizer.store._postgres_schema import REMOVALS_OF
from tests.attacks_s13.test_fold_races import _hold_fold
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

#: A hang detector, far past any wait the operation could have by design.
HANG_S = 30.0


async def test_fold_held_open_delays_no_turn(openai_server, pg_server):
    dsn = pg_server.create_database(f"s13_fold_held_{time.monotonic_ns()}")
    store = watched_store(dsn)
    folder = await asyncpg.connect(dsn)
    held = {"on": False}
    arrivals: list[bool] = []  # for each request to the main LLM: was the fold held

    def answer(body):
        arrivals.append(held["on"])
        return Reply("Sure.")

    try:
        await seed_trips(store)
        mine = REMOVALS_OF.format(user="'alice'")
        await folder.execute(f"INSERT INTO removals SELECT {mine}, 1 FROM generate_series(1, 3)")
        assert await _hold_fold(folder, 365)
        held["on"] = True
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
        ends = [(c.label, c.ended_at is not None) for c in await store.calls("alice")]
        other = open_store(dsn)
        try:
            assert await asyncio.wait_for(other.purge_older_than(365), HANG_S) == 0
        finally:
            await other.close()
        rows = await store._fetch(f"SELECT n FROM removals WHERE bucket = {mine}")
        assert sorted(r["n"] for r in rows) == [1, 1, 1]  # the held fold not committed
        await folder.execute("COMMIT")
        held["on"] = False
        rows = await store._fetch(f"SELECT n FROM removals WHERE bucket = {mine}")
        assert [r["n"] for r in rows] == [3]
    finally:
        if folder.is_in_transaction():
            await folder.execute("ROLLBACK")
        await folder.close()
        await store.close()
    assert arrivals == [True, True]  # both turns answered while the fold was held
    blocks = recall_blocks(openai_server.chat_requests)
    assert len(blocks) == 2 and "Fiat" in blocks[0] and "418" in blocks[1]
    assert ("now-alice", True) in ends

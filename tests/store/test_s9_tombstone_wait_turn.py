"""Through a real pipeline on the real PostgreSQL: another process's forget of the caller is
under way (its lock held, its deletes not committed) when the turn ends; the turn's forget
watch waits for it rather than reading the moment before, so the block holding what the
early searches found of the caller is never placed (bugs.md S8-H-1)."""

from __future__ import annotations

import asyncio
import time

import pytest
from pipecat.frames.frames import DataFrame, Frame
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import run_test

from pipecat_summarizer import RecallPrefetch
from pipecat_summarizer.store.records import user_hash
from tests.support.early_search import (
    RECALL,
    SISTER_ASK,
    desk,
    prefetch_pipeline,
    recall_blocks,
    seed_sister,
    spoken_turn,
    watched_store,
)
from tests.support.openai_server import Reply

asyncpg = pytest.importorskip("asyncpg")


class _Hold(DataFrame):
    """Starts another process's forget of alice, held open for a while."""


class _Holder(FrameProcessor):
    def __init__(self, conn, hold_s: float):
        super().__init__()
        self._conn, self._hold_s = conn, hold_s  # connected before the call: no connect here
        self.done: asyncio.Future | None = None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, _Hold):
            conn = self._conn
            forgetting = conn.transaction()
            await forgetting.start()
            key = user_hash("alice")
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key)
            await conn.execute("DELETE FROM messages WHERE user_id = 'alice'")
            await conn.execute("INSERT INTO forgotten (user_hash, at) VALUES ($1, 1.0)", key)
            self.done = asyncio.ensure_future(self._commit(conn, forgetting))
            return
        await self.push_frame(frame, direction)

    async def _commit(self, conn, forgetting) -> None:
        await asyncio.sleep(self._hold_s)  # past the turn's end and its budget
        await forgetting.commit()


async def test_a_forget_under_way_at_the_turns_end_places_nothing_of_the_caller(
    openai_server, pg_server
):
    dsn = pg_server.create_database(f"s9_turnwait_{time.monotonic_ns()}")
    store = watched_store(dsn)
    other = await asyncpg.connect(dsn)
    holder = _Holder(other, hold_s=0.3)
    openai_server.handler = lambda body: Reply("Sure.")
    try:
        await seed_sister(store)
        context, summarizer, processor = desk(openai_server, store, user_id="alice", recall=RECALL)
        companion = RecallPrefetch(processor)
        try:
            pipeline = prefetch_pipeline(openai_server, context, processor, companion, holder)
            await run_test(pipeline, frames_to_send=spoken_turn(SISTER_ASK, between=[_Hold()]))
        finally:
            await summarizer.aclose()
        assert holder.done is not None
        await asyncio.wait_for(holder.done, 5)
    finally:
        await other.close()
        await store.close()
    archive = companion.archive
    assert archive is not None and archive.follow_ups_started >= 1  # found before the forget
    assert openai_server.chat_requests  # the call went on
    assert recall_blocks(openai_server.chat_requests) == []
    sent = str(openai_server.chat_requests)
    assert "Marta" not in sent and "Porto" not in sent and "Friday" not in sent

"""Attack, through a real pipeline on the real PostgreSQL: the caller asks "forget me" and the
application runs ``store.forget`` while the call goes on; the forget is counted at once but
waits for the caller's write under way (the caller's advisory lock) before it deletes. The
caller's next turn, in that window, must quote nothing of what is being forgotten."""

from __future__ import annotations

import asyncio

import pytest
from pipecat.frames.frames import DataFrame, Frame
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import SleepFrame, run_test

from pipecat_summarizer import RecallPrefetch
from pipecat_summarizer.store.records import user_hash
from tests.recall.test_attacks_dates import archived, utc
from tests.support.early_search import (
    RECALL,
    desk,
    prefetch_pipeline,
    recall_blocks,
    spoken_turn,
    watched_store,
)
from tests.support.openai_server import Reply

SECRET = ["My locker code is 4411, remember it.", "Noted, locker 4411."]
ASK = "What is my locker code again?"


class _Admin(DataFrame):
    def __init__(self, what: str):
        super().__init__()
        self.what = what


class _AdminTool(FrameProcessor):
    """The application's admin side in this process: a forget started mid-call (not awaited
    by the pipeline), and the end of the caller's write that held it back."""

    def __init__(self, store):
        super().__init__()
        self._store = store
        self.writer = None
        self.held = None
        self.forget: asyncio.Future | None = None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, _Admin):
            if frame.what == "forget":
                self.forget = asyncio.ensure_future(self._store.forget("alice"))
            elif self.held is not None:
                await self.held.rollback()
                self.held = None
            return
        await self.push_frame(frame, direction)


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_a_turn_during_the_forget_quotes_nothing_of_it(openai_server, store_target):
    import asyncpg

    store = watched_store(store_target)
    admin = _AdminTool(store)
    writer = await asyncpg.connect(store_target)
    try:
        await store.write(archived(SECRET, call_id="a1", at=utc(2026, 5, 1), user_id="alice"))
        admin.held = writer.transaction()  # a write of the caller's under way elsewhere
        await admin.held.start()
        await writer.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", user_hash("alice")
        )
        frames = [_Admin("forget"), SleepFrame(sleep=0.1), *spoken_turn(ASK), _Admin("release")]
        openai_server.handler = lambda body: Reply("Sure.")
        context, summarizer, processor = desk(openai_server, store, user_id="alice", recall=RECALL)
        companion = RecallPrefetch(processor)
        try:
            await run_test(
                prefetch_pipeline(openai_server, context, processor, companion, admin),
                frames_to_send=frames,
            )
        finally:
            await summarizer.aclose()
        assert admin.forget is not None and await admin.forget > 0
    finally:
        if admin.held is not None:
            await admin.held.rollback()
        await writer.close()
        await store.close()
    assert not [b for b in recall_blocks(openai_server.chat_requests) if "4411" in b]

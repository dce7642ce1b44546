"""Attack: another process forgets the caller mid-call, and its clock is an hour behind this
one's. The sweep of cached vectors compares tombstones by value ("clock skew never hides a
forget"); the live call's forget watch compares the tombstone's time with the call's start
(``noticed_forget(user_id, since)``): the early search's hits, read before the forget, must
still not be placed."""

from __future__ import annotations

import sqlite3

import pytest
from pipecat.frames.frames import UserStoppedSpeakingFrame
from pipecat.tests.utils import SleepFrame, run_test

from pipecat_summarizer import RecallPrefetch
from tests.support.early_search import (
    RECALL,
    Forget,
    Forgetter,
    desk,
    prefetch_pipeline,
    recall_blocks,
    seed_trips,
    speech,
    watched_store,
)
from tests.support.openai_server import Reply


class _BehindForgetter(Forgetter):
    """The other process's forget; its clock is ``behind_s`` behind (the tombstone's time)."""

    def __init__(self, store, path: str, behind_s: float):
        super().__init__(store)
        self._path = path
        self._behind_s = behind_s

    async def process_frame(self, frame, direction) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, Forget):
            with sqlite3.connect(self._path) as conn:
                conn.execute("UPDATE forgotten SET at = at - ?", (self._behind_s,))


@pytest.mark.parametrize("behind_s", [5.0])  # seconds: an unsynced clock
async def test_a_forget_by_a_process_whose_clock_is_behind_is_honoured(
    openai_server, tmp_path, behind_s
):
    openai_server.handler = lambda body: Reply("Sure.")
    path = str(tmp_path / "m.db")
    store, admin = watched_store(path), watched_store(path)
    try:
        await seed_trips(store)
        context, summarizer, processor = desk(openai_server, store, user_id="alice", recall=RECALL)
        companion = RecallPrefetch(processor)
        forgetter = _BehindForgetter(admin, path, behind_s)
        frames = [
            *speech("Which hotel did I book with you last time?"),
            SleepFrame(sleep=0.15),  # the early search is over: it read alice's rows
            Forget("alice"),
            SleepFrame(sleep=0.1),
            UserStoppedSpeakingFrame(),
            SleepFrame(sleep=0.25),
        ]
        try:
            await run_test(
                prefetch_pipeline(openai_server, context, processor, companion, forgetter),
                frames_to_send=frames,
            )
        finally:
            await summarizer.aclose()
    finally:
        await store.close()
        await admin.close()
    assert forgetter.forgotten and forgetter.forgotten[0] > 0
    assert store.ended[0] == "done"  # the early search did find alice's rows
    assert recall_blocks(openai_server.chat_requests) == []
    assert "Marquis" not in str(openai_server.chat_requests)

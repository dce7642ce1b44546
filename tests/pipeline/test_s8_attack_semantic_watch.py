"""Attack on the forget watch with recall by meaning on: the watch is read inside the search
(``_search_with_replies(watch=True)``: the ranking awaits it), and a ranking late past its
share of the budget leaves the lexical hits to go on alone. Another process forgot the caller
after the early search read her rows; the tombstone read is slow (a store under load): the
block must not be placed before the watch has answered."""

from __future__ import annotations

import asyncio

import numpy as np
from pipecat.frames.frames import UserStoppedSpeakingFrame
from pipecat.tests.utils import SleepFrame, run_test

from pipecat_summarizer import RecallPrefetch
from pipecat_summarizer.params import RecallParams, SemanticRecallParams
from tests.support.early_search import (
    Forget,
    Forgetter,
    WatchedSQLite,
    desk,
    prefetch_pipeline,
    recall_blocks,
    seed_trips,
    speech,
)
from tests.support.openai_server import Reply


class _Model:
    def embed(self, texts):
        return np.array([[len(t) % 7 + 1.0, t.count(" ") + 1.0, 1.0] for t in texts], np.float32)


class _SlowWatch(WatchedSQLite):
    async def forgotten_at(self, user_id):
        await asyncio.sleep(0.3)  # the tombstone read of a loaded store
        return await super().forgotten_at(user_id)


async def test_a_slow_watch_with_semantic_recall_places_nothing_forgotten(openai_server, tmp_path):
    openai_server.handler = lambda body: Reply("Sure.")
    path = str(tmp_path / "m.db")
    store, admin = _SlowWatch(path), WatchedSQLite(path)
    recall = RecallParams(
        latency_budget_s=0.3, semantic=SemanticRecallParams(embedder=_Model(), min_similarity=0.0)
    )
    try:
        await seed_trips(store)
        context, summarizer, processor = desk(openai_server, store, user_id="alice", recall=recall)
        companion = RecallPrefetch(processor)
        forgetter = Forgetter(admin)  # another store object: this call never counted it
        frames = [
            *speech("Which hotel did I book with you last time?"),
            SleepFrame(sleep=0.2),  # the early search is over: it read alice's rows
            Forget("alice"),
            SleepFrame(sleep=0.1),
            UserStoppedSpeakingFrame(),
            SleepFrame(sleep=0.4),
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
    assert "done" in store.ended  # the early search did find alice's rows
    assert "Marquis" not in str(openai_server.chat_requests), recall_blocks(
        openai_server.chat_requests
    )

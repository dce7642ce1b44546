"""``RecallPrefetch`` hands its early searches to the recall step through the step's public
hook (``RecallStep.use_early_searches``): the step's archive stays the store, two companions
of one summarizer share one source, and a search started early answers the step's own search
of the same words. A real SQLite store."""

from __future__ import annotations

import asyncio
import json

import pytest
from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._recall.hooks import EarlySearches
from pipecat_summarizer._recall.prefetch import PrefetchingArchive, RecallPrefetch
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.store.records import ArchivedMessage
from tests.support.pipeline_utils import cfg

HOTEL = "We are staying at the Hotel Marquis in Lisbon, room 418, arriving Friday."


def _earlier_call() -> list[ArchivedMessage]:
    lines = [HOTEL, "Noted, the Hotel Marquis in Lisbon."]
    return [
        ArchivedMessage(
            call_id="c1",
            position=i,
            role="user" if i % 2 == 0 else "assistant",
            content=text,
            message_json=json.dumps({"role": "user", "content": text}),
            turn=0,
            at=1_700_000_000 + i,
            user_id="alice",
        )
        for i, text in enumerate(lines)
    ]


async def test_the_companion_hands_searches_over_and_leaves_the_archive_alone(tmp_path):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    summarizer = OpenAISummarizer(base_url="http://127.0.0.1:9/v1", model="cheap")
    processor = ContextSummarizer(
        context=LLMContext(messages=[{"role": "system", "content": "You are a travel desk."}]),
        config=cfg(),
        summarizer=summarizer,
        store=store,
        call_id="c2",
        user_id="alice",
        recall=RecallParams(),
    )
    try:
        step = processor.recall_step
        assert step is not None and step.early_searches is None
        companion, again = RecallPrefetch(processor), RecallPrefetch(processor)
        # the step still searches its own store; the companions' source is handed to it
        assert step.archive is store
        assert isinstance(companion.archive, PrefetchingArchive)
        assert step.early_searches is companion.archive is again.archive
        assert isinstance(step.early_searches, EarlySearches)
        await store.write(_earlier_call())
        limit = step.params.search_limit
        assert companion.archive.prefetch("hotel", user_id="alice", limit=limit, any_word=True)
        (hits, _), how = await step.hits_for_turn("hotel", wait_s=5.0)
        assert how == "on_time" and {h.position for h in hits} == {0, 1}
        assert companion.archive.served == 1  # the early search answered the step's own
        # taken: the next search of the same words is the store's own
        await step.hits_for_turn("hotel", wait_s=5.0)
        assert companion.archive.served == 1
        step.use_early_searches(None)
        assert step.early_searches is None
    finally:
        await summarizer.aclose()
        await store.close()


class _SlowSQLite(SQLiteMemoryStore):
    """A real store whose search answers after 5 s (a stalled fleet database); it counts
    the searches cancelled before they answered."""

    cancelled = 0

    async def search(self, query, **kwargs):
        try:
            await asyncio.sleep(5.0)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return await super().search(query, **kwargs)


async def test_a_cancelled_turn_takes_its_early_search_down_with_it(tmp_path):
    # the turn took the early search (no one else can): cancelled, it must not leave it running
    store = _SlowSQLite(tmp_path / "m.db")
    archive = PrefetchingArchive(store)
    try:
        assert archive.prefetch("hotel", user_id="alice", any_word=True)
        answer = archive.take("hotel", user_id="alice", any_word=True)
        assert answer is not None
        turn = asyncio.ensure_future(answer)
        await asyncio.sleep(0.05)
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn
        await asyncio.sleep(0.05)
        assert store.cancelled == 1  # the early search itself, not left to run its 5 s
        assert not archive.in_flight()
        assert archive.take("hotel", user_id="alice", any_word=True) is None  # taken once
    finally:
        archive.clear()
        await store.close()

"""Early work the turn has gone past: when the turn's frame finds no early block ready (the
early work, ``RecallPrefetch``'s, still waits for its follow-up searches), the turn chooses
and renders itself, and the early work stops: its choice and rendering, on the same loop,
would only hold the turn's frame (1-4 ms past its deadline in benchmarks/frame_bound.py
--lead-ms 0) for a block no turn takes. The follow-up searches it started still serve the
turn. Real pipelines (``RecallPrefetch`` before a real user aggregator fed transcriptions,
``ContextSummarizer``, Pipecat's OpenAI service against the local server) on a SQLite file
and the real PostgreSQL; the follow-up searches are held on an event, never on a timer."""

from __future__ import annotations

import asyncio

import pytest
from pipecat.frames.frames import (
    TranscriptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.tests.utils import SleepFrame, run_test
from pipecat.turns.user_turn_strategies import ExternalUserTurnStrategies

from pipecat_summarizer._recall.prefetch import PrefetchingArchive, RecallPrefetch
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import PostgresMemoryStore, SQLiteMemoryStore
from tests.recall.test_attacks_gather import ASK, _blocks, _seed
from tests.support.openai_server import Reply
from tests.support.pipeline_utils import main_llm
from tests.support.recall_calls import travel_desk


class _Held:
    """A real store whose searches of other words than the question's (the follow-ups: the
    gathered names, the stated values), or with ``question`` set the question's own, wait
    for ``release``."""

    question = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.release = asyncio.Event()
        self.held = 0

    async def search(self, query, **kwargs):
        if ("sister" in query) == self.question:
            self.held += 1
            await self.release.wait()
        return await super().search(query, **kwargs)


class HeldSQLite(_Held, SQLiteMemoryStore):
    pass


class HeldPostgres(_Held, PostgresMemoryStore):
    pass


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize("held", ["follow-ups", "question"])
async def test_early_work_the_turn_went_past_makes_no_block(
    openai_server, store_target, monkeypatch, held
):
    # follow-ups: the early search answered before the turn, its follow-ups are held; the
    # turn takes the search and finds no block. question: the early search itself is held;
    # the turn takes it still running (the caller's words came as the turn ended)
    openai_server.handler = lambda body: Reply("Sure thing.")
    store = HeldPostgres(store_target) if "://" in store_target else HeldSQLite(store_target)
    store.question = held == "question"
    kept: list[object] = []  # the blocks the early work made
    keep = PrefetchingArchive.keep_block
    monkeypatch.setattr(
        PrefetchingArchive,
        "keep_block",
        lambda self, block: (kept.append(block), keep(self, block)),
    )
    try:
        await _seed(store)
        # a budget the follow-ups are released within: the turn waits for them
        context, processor, summarizer = travel_desk(
            openai_server, store, RecallParams(latency_budget_s=3.0)
        )
        pair = LLMContextAggregatorPair(
            context,
            user_params=LLMUserAggregatorParams(user_turn_strategies=ExternalUserTurnStrategies()),
        )
        companion = RecallPrefetch(processor)
        step = processor.recall_step
        assert step is not None

        async def release_once_the_turn_searched() -> None:
            # once the turn's frame has taken the early search, the held searches answer
            while step.turns < 1:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)
            store.release.set()

        releaser = asyncio.ensure_future(release_once_the_turn_searched())
        frames = [
            UserStartedSpeakingFrame(),
            TranscriptionFrame(ASK, "alice", "t0"),
            SleepFrame(sleep=0.3),  # the early search is under way (or answered)
            UserStoppedSpeakingFrame(),
            SleepFrame(sleep=1.0),
        ]
        pipeline = Pipeline(
            [companion, pair.user(), processor, main_llm(openai_server.base_url), pair.assistant()]
        )
        try:
            await run_test(pipeline, frames_to_send=frames)
        finally:
            releaser.cancel()
            await summarizer.aclose()
    finally:
        await store.close()
    archive = companion.archive
    assert archive is not None and archive.served == 1  # the turn took the early search
    assert store.held >= 1 and store.release.is_set()  # held until the turn took the search
    (block,) = _blocks(openai_server)
    assert "lives in Porto" in block  # the turn chose and rendered its own block
    assert processor.recall_step.early_blocks == 0
    assert kept == []  # and no early work made one after it

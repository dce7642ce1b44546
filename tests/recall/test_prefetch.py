"""Early search: ``RecallPrefetch`` before the user aggregator starts recall's search on the
caller's transcribed words, so a turn whose archive is slower than the latency budget still
gets its recalled block. Real pipelines (a real ``LLMContextAggregatorPair`` fed
transcriptions, ``ContextSummarizer``, Pipecat's OpenAI service against the local server),
real SQLite files and the real PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest
from pipecat.frames.frames import (
    InterimTranscriptionFrame,
    TranscriptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.tests.utils import SleepFrame, run_test
from pipecat.turns.user_turn_strategies import ExternalUserTurnStrategies

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._recall import prefetch as prefetch_module
from pipecat_summarizer._recall.prefetch import PrefetchingArchive, RecallPrefetch
from pipecat_summarizer._recall.render import is_recall_message
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import PostgresMemoryStore, SQLiteMemoryStore
from pipecat_summarizer.store.records import ArchivedMessage
from tests.support.openai_server import Reply
from tests.support.pipeline_utils import cfg, main_llm
from tests.support.recall_calls import archived_call, travel_desk

HOTEL = "We are staying at the Hotel Marquis in Lisbon, room 418, arriving Friday."
ASK = "Which hotel did I book with you last time?"
SEARCH_S = 0.6  # the archive's answer time: four times the turn's budget (BUDGET_S)
# a budget with room for a loaded test machine's scheduling (the default is 10 ms): what is
# tested is whether the search started before the turn, not how fast a machine is
BUDGET_S = 0.15


class _Slow:
    """A real store whose search answers after ``SEARCH_S`` (a loaded fleet database)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.queries: list[str] = []

    async def search(self, query, **kwargs):
        self.queries.append(query)
        await asyncio.sleep(SEARCH_S)
        return await super().search(query, **kwargs)  # type: ignore[misc]


class SlowSQLite(_Slow, SQLiteMemoryStore):
    pass


class SlowPostgres(_Slow, PostgresMemoryStore):
    pass


def _slow_store(target: str):
    return SlowPostgres(target) if "://" in target else SlowSQLite(target)


def _earlier_call(user_id: str = "alice") -> list[ArchivedMessage]:
    lines = [HOTEL, "Noted, the Hotel Marquis in Lisbon.", "Thanks, bye."]
    return archived_call(lines, user_id=user_id)


def _turn(*parts: str, interim: str | None = None) -> list:
    # the caller speaks (an STT's frames), then the turn ends well after the words
    frames: list = [UserStartedSpeakingFrame()]
    if interim is not None:
        frames += [InterimTranscriptionFrame(interim, "alice", "t0"), SleepFrame(sleep=0.05)]
    for text in parts:
        frames += [TranscriptionFrame(text, "alice", "t0"), SleepFrame(sleep=0.05)]
    return [*frames, SleepFrame(sleep=SEARCH_S + 0.3), UserStoppedSpeakingFrame(), SleepFrame(0.5)]


async def _call(server, store, frames: list, *, early: bool):
    context, processor, summarizer = travel_desk(
        server, store, RecallParams(latency_budget_s=BUDGET_S)
    )
    # turns come as frames here (the default stop strategy loads a smart-turn model)
    pair = LLMContextAggregatorPair(
        context,
        user_params=LLMUserAggregatorParams(user_turn_strategies=ExternalUserTurnStrategies()),
    )
    companion = RecallPrefetch(processor) if early else None
    head = [companion] if companion is not None else []
    pipeline = Pipeline(
        [*head, pair.user(), processor, main_llm(server.base_url), pair.assistant()]
    )
    try:
        await run_test(pipeline, frames_to_send=frames)
    finally:
        await summarizer.aclose()
    return processor, companion


def _recalled(server) -> list[str]:
    return [
        str(m["content"])
        for body in server.chat_requests
        for m in body["messages"]
        if is_recall_message(m)
    ]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_the_search_started_on_the_transcription_serves_the_turn(openai_server, store_target):
    # the archive takes 600 ms, the turn's budget is 150 ms: recall only makes it when the
    # search started while the caller was still speaking
    openai_server.handler = lambda body: Reply("Sure.")
    store = _slow_store(store_target)
    try:
        await store.write(_earlier_call())
        processor, companion = await _call(openai_server, store, _turn(ASK), early=True)
    finally:
        await store.close()
    assert companion is not None and companion.archive is not None
    recalled = _recalled(openai_server)
    assert len(recalled) == 1 and "Hotel Marquis" in recalled[0]
    # the turn asked for exactly the words searched early: searched once, handed over (a
    # second search of other words, recall's gathering, may follow within the budget)
    assert companion.archive.served == 1 and store.queries.count(store.queries[0]) == 1
    assert processor.recall_step.recalled == 1 and processor.recall_step.missed == 0
    # the request carries the caller's words as the aggregator wrote them
    last = openai_server.chat_requests[-1]["messages"]
    assert last[-1] == {"role": "user", "content": ASK}


async def test_without_the_companion_the_slow_archive_misses_the_budget(openai_server, tmp_path):
    # the same call without RecallPrefetch: the turn waits its budget and goes without recall
    openai_server.handler = lambda body: Reply("Sure.")
    store = SlowSQLite(tmp_path / "m.db")
    try:
        await store.write(_earlier_call())
        processor, _ = await _call(openai_server, store, _turn(ASK), early=False)
    finally:
        await store.close()
    assert _recalled(openai_server) == []
    assert processor.recall_step.missed == 1 and processor.recall_step.recalled == 0


async def test_transcription_in_pieces_and_interims_search_the_whole_turn(openai_server, tmp_path):
    # an interim result starts a search of its own words; each final piece starts one for
    # the words so far; the turn (the pieces joined as the aggregator joins them) picks up
    # the last one
    openai_server.handler = lambda body: Reply("Sure.")
    store = SlowSQLite(tmp_path / "m.db")
    frames = _turn("Which hotel", "did I book with you last time?", interim="Which hot")
    try:
        await store.write(_earlier_call())
        processor, companion = await _call(openai_server, store, frames, early=True)
    finally:
        await store.close()
    assert companion is not None and companion.archive is not None
    assert openai_server.chat_requests[-1]["messages"][-1]["content"] == ASK
    recalled = _recalled(openai_server)
    assert len(recalled) == 1 and "Hotel Marquis" in recalled[0]
    assert companion.archive.served == 1
    assert companion.archive.started >= 2  # "which hotel" and the whole question
    assert processor.recall_step.missed == 0


async def test_a_summarizer_without_recall_makes_it_a_pass_through(openai_server, tmp_path):
    openai_server.handler = lambda body: Reply("Sure.")
    context = LLMContext(messages=[{"role": "system", "content": "You are a travel desk."}])
    summarizer = OpenAISummarizer(base_url=openai_server.base_url, model="cheap")
    processor = ContextSummarizer(context=context, config=cfg(), summarizer=summarizer)
    companion = RecallPrefetch(processor)
    pair = LLMContextAggregatorPair(
        context,
        user_params=LLMUserAggregatorParams(user_turn_strategies=ExternalUserTurnStrategies()),
    )
    pipeline = Pipeline(
        [companion, pair.user(), processor, main_llm(openai_server.base_url), pair.assistant()]
    )
    try:
        await run_test(pipeline, frames_to_send=_turn(ASK))
    finally:
        await summarizer.aclose()
    assert companion.archive is None
    assert openai_server.chat_requests[-1]["messages"][-1]["content"] == ASK


def test_the_companion_refuses_what_is_not_a_summarizer():
    with pytest.raises(TypeError, match="ContextSummarizer"):
        RecallPrefetch(object())


async def test_an_early_search_is_not_served_after_a_forget_or_when_stale(tmp_path, monkeypatch):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    archive = PrefetchingArchive(store)
    try:
        await store.write(_earlier_call())
        # fresh: served, once
        assert archive.prefetch("hotel", user_id="alice", any_word=True)
        assert not archive.prefetch("hotel", user_id="alice", any_word=True)  # already running
        hits = await archive.search("hotel", user_id="alice", any_word=True)
        assert archive.served == 1 and {h.position for h in hits} == {0, 1}
        # another scope or other words: the archive's own answer
        assert await archive.search("hotel", user_id="bob", any_word=True) == []
        assert archive.served == 1
        # the caller forgotten after the early search started: never served (its rows
        # would quote what was forgotten)
        archive.prefetch("hotel", user_id="alice", any_word=True)
        await asyncio.sleep(0.05)
        await store.forget("alice")
        assert await archive.search("hotel", user_id="alice", any_word=True) == []
        assert archive.served == 1
        # older than MAX_AGE_S: asked again
        await store.write(_earlier_call("carol"))
        monkeypatch.setattr(prefetch_module, "MAX_AGE_S", 0.0)
        archive.prefetch("marquis", user_id="carol", any_word=True)
        await asyncio.sleep(0.01)
        assert len(await archive.search("marquis", user_id="carol", any_word=True)) == 2
        assert archive.served == 1
        # everything else is the store's
        assert (await archive.message("c1", 0)).content == HOTEL
    finally:
        archive.clear()
        await store.close()

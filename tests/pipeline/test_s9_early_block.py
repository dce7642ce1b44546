"""The turn's work after the search (the snippets chosen, the block's text) done before the
turn ends by ``RecallPrefetch``, once its early search and follow-ups answered, and reused by
the turn only when every input it depended on is still the same: the block reused is the one
the turn makes itself; other final words, a fact pinned meanwhile and a forget each make the
turn choose again. Real pipelines (a real ``LLMContextAggregatorPair`` fed transcriptions,
``ContextSummarizer``, Pipecat's OpenAI service against the local server) on SQLite files."""

from __future__ import annotations

import asyncio

from pipecat.frames.frames import (
    DataFrame,
    Frame,
    InterimTranscriptionFrame,
    TranscriptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import SleepFrame

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer, RecallPrefetch
from pipecat_summarizer._text.tokens import EstimateTokenCounter
from pipecat_summarizer.params import CeilingParams, ContextSummarizerParams, MemoryParams
from tests.support.early_search import (
    RECALL,
    SISTER_ASK,
    Forget,
    Forgetter,
    WatchedSQLite,
    prefetch_pipeline,
    recall_blocks,
    seed_sister,
    spoken_turn,
    watched_store,
)
from tests.support.openai_server import Reply
from tests.support.pipeline_utils import cfg
from tests.support.recall_calls import FAST
from tests.support.settle import run_settling

CAR_ASK = "Which car did I rent at the airport?"
CAR_FACT = "Noted: the caller rented a red Fiat from Avis at the airport."


class _Pin(DataFrame):
    """Asks :class:`_Pinner` to pin a fact, in the frame stream's order."""


class _Pinner(FrameProcessor):
    """Pins :data:`CAR_FACT` when a :class:`_Pin` passes (the application, mid-turn)."""

    def __init__(self, processor):
        super().__init__()
        self._processor = processor

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, _Pin):
            self._processor.pin("car", CAR_FACT)
            return
        await self.push_frame(frame, direction)

    @property
    def settled(self) -> bool:
        """Always: it pins at once, with no timer (a settled pause may end; ``run_settling``)."""
        return True


class _Passing(FrameProcessor):
    """In the companion's place, without it: every frame passed on."""

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)

    @property
    def settled(self) -> bool:
        """Always: nothing of its own under way."""
        return True


async def _call(server, store, frames, *, early=True, extra=(), ceiling=None):
    """One call's turn; returns its recall step and the blocks the LLM received."""
    server.handler = lambda body: Reply("Sure.")
    before = len(server.chat_requests)
    context = LLMContext(messages=[{"role": "system", "content": "You are a travel desk."}])
    summarizer = OpenAISummarizer(base_url=server.base_url, model="cheap")
    params = ContextSummarizerParams(
        ceiling=None if ceiling is None else CeilingParams(max_request_tokens=ceiling)
    )
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=40, keep=4),
        summarizer=summarizer,
        params=params,
        store=store,
        call_id="now-alice",
        user_id="alice",
        memory=MemoryParams(writer=FAST),
        recall=RECALL,
    )
    companion = RecallPrefetch(processor) if early else _Passing()
    more = [f(processor) if callable(f) else f for f in extra]
    try:
        # each pause ends once the turn's early work and answer have settled (Pipecat's
        # run_test played every pause at full length: 2 s after each spoken question)
        await run_settling(
            prefetch_pipeline(server, context, processor, companion, *more), frames_to_send=frames
        )
    finally:
        await summarizer.aclose()
    return processor.recall_step, recall_blocks(server.chat_requests[before:])


async def test_the_block_made_early_is_the_turns_own(openai_server, tmp_path):
    # a question that gathers (second search, values' searches): chosen and rendered while
    # the caller spoke, the turn only compares its inputs; the same block as chosen at turn
    # time without the early work
    results = []
    for early_work in (True, False):  # each on its own archive: a call archives its turn
        store = watched_store(str(tmp_path / f"{early_work}.db"))
        try:
            await seed_sister(store)
            results.append(
                await _call(openai_server, store, spoken_turn(SISTER_ASK), early=early_work)
            )
        finally:
            await store.close()
    (step, early), (plain_step, plain) = results
    assert (step.early_blocks, step.early_choices) == (1, 0)
    assert (plain_step.early_blocks, plain_step.early_choices) == (0, 0)
    assert len(early) == 1 and early == plain
    assert "lives in Porto" in early[0] and "flying in on Friday" in early[0]


async def test_other_final_words_are_chosen_for_at_turn_time(openai_server, tmp_path):
    # the interim words' early block is ready; the final words ask something else and their
    # early search is still running at the turn's end: the turn chooses for its own words
    class Slow(WatchedSQLite):
        async def search(self, query, **kwargs):
            if "sister" in query:
                await asyncio.sleep(0.3)
            return await super().search(query, **kwargs)

    store = Slow(tmp_path / "m.db")
    try:
        await seed_sister(store)
        # a short pause after the final words: their slow search still runs at the turn's end
        frames = spoken_turn(SISTER_ASK, interim=CAR_ASK, early_s=0.1)
        step, blocks = await _call(openai_server, store, frames)
    finally:
        await store.close()
    assert (step.early_blocks, step.early_choices) == (0, 0)
    (block,) = blocks
    assert "lives in Porto" in block and "red Fiat" not in block


async def test_a_fact_pinned_after_the_early_work_is_not_quoted(openai_server, tmp_path):
    # the early block quotes the rental; the application pins it as a fact before the turn
    # ends: the turn chooses again and leaves out what the model now sees
    store = watched_store(str(tmp_path / "m.db"))
    try:
        await seed_sister(store)
        frames = spoken_turn(CAR_ASK, between=[_Pin()])
        step, blocks = await _call(openai_server, store, frames, extra=[_Pinner])
    finally:
        await store.close()
    assert (step.early_blocks, step.early_choices) == (0, 0)
    assert not any("red Fiat" in b for b in blocks)
    request = openai_server.chat_requests[-1]
    assert CAR_FACT in str(request)  # the fact reached the model: the pin landed in time


async def test_a_forget_after_the_early_work_drops_it(openai_server, tmp_path):
    store = watched_store(str(tmp_path / "m.db"))
    try:
        await seed_sister(store)
        frames = spoken_turn(CAR_ASK, between=[Forget("alice")])
        forgetter = Forgetter(store)
        step, blocks = await _call(openai_server, store, frames, extra=[forgetter])
    finally:
        await store.close()
    assert forgetter.forgotten and forgetter.forgotten[0] > 0
    assert step.early_blocks == step.early_choices == 0
    assert blocks == []


async def test_the_same_words_asked_otherwise_are_worked_on_again(openai_server, tmp_path):
    # the final words add only a word the search leaves out ("then"): the early search is
    # the same, the query is not; the work after the search is done again for the final one
    store = watched_store(str(tmp_path / "m.db"))
    frames = [
        UserStartedSpeakingFrame(),
        InterimTranscriptionFrame(CAR_ASK, "alice", "t0"),
        SleepFrame(sleep=0.1),
        TranscriptionFrame(CAR_ASK[:-1] + " then?", "alice", "t0"),
        SleepFrame(sleep=0.1),
        UserStoppedSpeakingFrame(),
        SleepFrame(sleep=0.15),
    ]
    try:
        await seed_sister(store)
        step, blocks = await _call(openai_server, store, frames)
    finally:
        await store.close()
    assert (step.early_blocks, step.early_choices) == (1, 0)
    (block,) = blocks
    assert "red Fiat" in block


async def test_less_room_at_the_turn_renders_the_early_choice_again(openai_server, tmp_path):
    # the request ceiling leaves less room than the early block was made for: the choice
    # serves, the text is rendered again within the room, and the request stays under it
    ceiling = 400
    store = watched_store(str(tmp_path / "m.db"))
    try:
        await seed_sister(store)
        step, blocks = await _call(openai_server, store, spoken_turn(SISTER_ASK), ceiling=ceiling)
    finally:
        await store.close()
    assert (step.early_blocks, step.early_choices) == (0, 1)
    (block,) = blocks
    assert "lives in Porto" in block
    counter = EstimateTokenCounter()
    request = openai_server.chat_requests[-1]
    assert sum(counter.count_message(m) for m in request["messages"]) <= ceiling

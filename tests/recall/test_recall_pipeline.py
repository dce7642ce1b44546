"""Recall through real pipelines: a real ``LLMContextAggregatorPair``, ``ContextSummarizer``
with a real store (SQLite file, and PostgreSQL where marked), Pipecat's OpenAI service and
our ``OpenAISummarizer`` against the local OpenAI-protocol server."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from pipecat.frames.frames import ControlFrame, LLMContextFrame, LLMSummarizeContextFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameProcessor

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._recall.render import RECALL_HEADER, is_recall_message
from pipecat_summarizer.params import (
    ContextSummarizerParams,
    MemoryParams,
    RecallParams,
    WriterParams,
)
from pipecat_summarizer.store import SQLiteMemoryStore, open_store
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import build, cfg, main_llm, turns
from tests.support.settle import Gap, run_settling

FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)
SYSTEM = "You are a helpful hotel concierge."
HOTEL = "We are staying at the Hotel Marquis in Lisbon, room 418, arriving Friday."
FILLER = [
    "What time does the breakfast buffet open?",
    "Is the spa open on Sunday?",
    "Can I book a table for dinner tonight?",
    "Do you have a gluten free menu?",
    "How late is the pool open?",
    "Could you send towels up please?",
    "Is there a gym upstairs?",
]
# generous: these tests are about what is recalled, not how fast (benchmarks/recall.py is)
ON_TIME = RecallParams(latency_budget_s=5.0)


def _summaries(body: dict) -> Reply:
    # a summary that keeps the gist and loses the detail
    if is_summary_request(body):
        return Reply("FACTS:\n- the caller asked about breakfast\nDECISIONS:\n- none")
    return Reply("Sure thing.")


def _recalled(body: dict) -> list[dict]:
    return [m for m in body["messages"] if is_recall_message(m)]


def concierge(
    context: LLMContext,
    summarizer: OpenAISummarizer,
    store,
    *,
    call_id: str = "call-1",
    user_id: str | None = None,
    recall: RecallParams = ON_TIME,
    memory: MemoryParams | None = None,
    params: ContextSummarizerParams | None = None,
) -> ContextSummarizer:
    """The hotel desk's processor: a summary every 6 messages keeping 2, the store written
    quickly, recall with a generous budget."""
    return ContextSummarizer(
        context=context,
        config=cfg(messages=6, keep=2),
        summarizer=summarizer,
        store=store,
        call_id=call_id,
        user_id=user_id,
        memory=memory or MemoryParams(writer=FAST),
        recall=recall,
        params=params,
    )


async def _call(
    server,
    store,
    texts,
    *,
    call_id="call-1",
    user_id=None,
    recall=ON_TIME,
    memory=None,
    gap=2.0,
):
    context = LLMContext(messages=[{"role": "system", "content": SYSTEM}])
    summarizer = OpenAISummarizer(base_url=server.base_url, model="cheap")
    processor = concierge(
        context, summarizer, store, call_id=call_id, user_id=user_id, recall=recall, memory=memory
    )
    try:
        await run_settling(
            build(context, processor, main_llm(server.base_url)),
            frames_to_send=[*turns(texts, gap=gap)],
        )
    finally:
        await summarizer.aclose()  # the application's client: the test closes it
    return processor, context


async def test_a_detail_summarized_away_is_in_the_request_when_the_caller_asks(
    openai_server, tmp_path
):
    openai_server.handler = _summaries
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await _call(openai_server, store, [HOTEL, *FILLER, "What was the name of our hotel again?"])
        archived = await store.messages("call-1")
    finally:
        await store.close()
    assert any("Marquis" in m.content for m in archived)  # it left the context
    last = openai_server.chat_requests[-1]["messages"]
    assert not any("Marquis" in str(m["content"]) for m in last if not is_recall_message(m))
    recalled = _recalled(openai_server.chat_requests[-1])
    assert len(recalled) == 1 and "Hotel Marquis" in recalled[0]["content"]
    assert recalled[0]["role"] == "user"
    # placed just before the question, labelled with its turn and speaker
    assert last[-2] is not None and is_recall_message(last[-2])
    assert last[-1]["content"] == "What was the name of our hotel again?"
    assert "this call, by turn" in recalled[0]["content"] and "caller" in recalled[0]["content"]
    # only the asking turn carries it: earlier requests had nothing to recall
    assert sum(bool(_recalled(b)) for b in openai_server.chat_requests) == 1


@dataclass
class Arm(ControlFrame):
    """From here on the summary's answer waits for the asking turn's block."""


class HoldUntilCompacted(FrameProcessor):
    """Between the summarizer and the LLM: holds the context frame that carries a recalled
    block until the summary in flight has been spliced in (the race, made certain)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.placed, self.compacted = asyncio.Event(), asyncio.Event()
        self.held = 0
        self._holding = False

    @property
    def settled(self) -> bool:
        return not self._holding

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        if isinstance(frame, Arm):
            self.armed = True
        elif isinstance(frame, LLMContextFrame) and self.armed:
            if any(is_recall_message(m) for m in frame.context.messages):
                self._holding = True
                self.placed.set()  # the summary's answer may go now
                await asyncio.wait_for(self.compacted.wait(), timeout=10)
                self.held += 1
                self._holding = False
        await self.push_frame(frame, direction)


async def test_a_summary_landing_after_the_block_was_placed_keeps_it_in_the_request(
    openai_server, tmp_path
):
    # a summary asked for before the question answers only once the asking turn's block is
    # placed; the request is held until the splice is in: the block must still be there
    hold = HoldUntilCompacted()

    async def handler(body: dict) -> Reply:
        if is_summary_request(body) and hold.armed:
            await asyncio.wait_for(hold.placed.wait(), timeout=10)
        return _summaries(body)

    openai_server.handler = handler
    store = SQLiteMemoryStore(tmp_path / "m.db")
    context = LLMContext(messages=[{"role": "system", "content": SYSTEM}])
    summarizer = OpenAISummarizer(base_url=openai_server.base_url, model="cheap")
    processor = concierge(context, summarizer, store)

    @processor.event_handler("on_context_compacted")
    async def _compacted(_p, _event):
        if hold.armed:
            hold.compacted.set()

    pair = LLMContextAggregatorPair(context)
    llm = main_llm(openai_server.base_url)
    pipeline = Pipeline([pair.user(), processor, hold, llm, pair.assistant()])
    question = "What was the name of our hotel again?"
    try:
        await run_settling(
            pipeline,
            frames_to_send=[
                *turns([HOTEL, *FILLER], gap=2.0),
                Arm(),
                Gap(sleep=2.0),  # armed before the summary is asked for
                LLMSummarizeContextFrame(),
                *turns([question], gap=2.0),
            ],
        )
    finally:
        await summarizer.aclose()
        await store.close()
    assert hold.held == 1  # the race happened: the splice came in while the request waited
    last = openai_server.chat_requests[-1]["messages"]
    assert last[-1]["content"] == question
    recalled = _recalled(openai_server.chat_requests[-1])
    assert len(recalled) == 1 and "Hotel Marquis" in recalled[0]["content"]
    assert is_recall_message(last[-2])
    assert not any("Marquis" in str(m["content"]) for m in last if not is_recall_message(m))


async def test_nothing_is_recalled_when_nothing_matches(openai_server, tmp_path):
    openai_server.handler = _summaries
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        processor, _ = await _call(
            openai_server, store, [HOTEL, *FILLER, "Is there parking near the aquarium?"]
        )
    finally:
        await store.close()
    assert processor.recall_step.turns > 0  # it did ask the archive
    assert not any(_recalled(b) for b in openai_server.chat_requests)
    assert not any(RECALL_HEADER in str(b) for b in openai_server.requests)


async def test_recalled_block_is_replaced_never_accumulated_nor_summarized_nor_archived(
    openai_server, tmp_path
):
    openai_server.handler = _summaries
    store = SQLiteMemoryStore(tmp_path / "m.db")
    asks = [
        "What was the name of our hotel again?",
        "And the hotel room number, Marquis was it?",
        "Which city is the Marquis hotel in?",
    ]
    try:
        _, context = await _call(
            openai_server, store, [HOTEL, *FILLER, *asks, *FILLER[:6], asks[0]]
        )
        archived = await store.messages("call-1")
    finally:
        await store.close()
    with_recall = [b for b in openai_server.chat_requests if _recalled(b)]
    # several turns carried a block (how many depends on when the background summary landed:
    # while the hotel is still in the context nothing needs recalling), the last one surely
    assert len(with_recall) >= 2 and _recalled(openai_server.chat_requests[-1])
    for body in openai_server.chat_requests:
        messages = body["messages"]
        recalled = [i for i, m in enumerate(messages) if is_recall_message(m)]
        assert len(recalled) <= 1  # one block, never two
        if recalled:  # always right before the latest user message
            assert recalled[0] == len(messages) - 2 and messages[-1]["role"] == "user"
        # never with authority
        for m in messages:
            if m["role"] in ("system", "developer"):
                assert "Marquis" not in str(m["content"]) and RECALL_HEADER not in str(m)
    # the summarizer never saw it as conversation, and the archive never got it
    assert openai_server.summary_requests
    assert not any(RECALL_HEADER in str(b) for b in openai_server.summary_requests)
    assert not any(RECALL_HEADER in m.content for m in archived)
    assert sum(is_recall_message(m) for m in context.messages) <= 1


class SlowStore(SQLiteMemoryStore):
    """A store whose search answers only when the test lets it."""

    def __init__(self, path):
        super().__init__(path)
        self.release = asyncio.Event()
        self.searching = 0
        self.answered = 0

    async def search(self, query, **kwargs):
        self.searching += 1
        await self.release.wait()
        self.answered += 1
        return await super().search(query, **kwargs)


async def test_a_slow_search_does_not_delay_the_turn(openai_server, tmp_path):
    store = SlowStore(tmp_path / "m.db")
    seen: list[tuple[int, int]] = []

    def handler(body: dict) -> Reply:
        if not is_summary_request(body):
            seen.append((store.searching, store.answered))
        return _summaries(body)

    openai_server.handler = handler
    try:
        processor, _ = await _call(
            openai_server,
            store,
            [HOTEL, *FILLER, "What was the name of our hotel again?"],
            recall=RecallParams(latency_budget_s=0.01),
            gap=0.2,  # the held search keeps a task alive: every pause lasts its full length
        )
    finally:
        store.release.set()
        await asyncio.sleep(0.05)
        await store.close()
    # the last request reached the LLM while the search was still unanswered
    assert seen[-1][0] >= 1 and seen[-1][1] == 0
    assert not any(_recalled(b) for b in openai_server.chat_requests)
    assert processor.recall_step.missed >= 1
    # one search at a time: a slow archive never gets a pile of them
    assert store.searching == 1
    # the call's end cancelled the search still waiting: released, it never answered
    assert store.answered == 0


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_across_two_calls_of_the_same_caller(openai_server, store_target):
    openai_server.handler = _summaries
    store = open_store(store_target)
    try:
        await _call(openai_server, store, [HOTEL, *FILLER], call_id="c1", user_id="alice")
        openai_server.requests.clear()
        processor, _ = await _call(
            openai_server,
            store,
            ["Hi again. Which hotel did I book with you last time?"],
            call_id="c2",
            user_id="alice",
        )
        # another caller's archive is never searched
        openai_server.requests.clear()
        await _call(
            openai_server,
            store,
            ["Which hotel did I book with you last time?"],
            call_id="c3",
            user_id="bob",
        )
        bob = list(openai_server.chat_requests)
    finally:
        await store.close()
    assert processor.recall_step.recalled == 1
    assert not any(_recalled(b) for b in bob)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_across_two_calls_the_earlier_call_is_recalled_with_its_date(
    openai_server, store_target
):
    openai_server.handler = _summaries
    store = open_store(store_target)
    try:
        await _call(openai_server, store, [HOTEL, *FILLER], call_id="c1", user_id="alice")
        openai_server.requests.clear()
        await _call(
            openai_server,
            store,
            ["Hi again. Which hotel did I book with you last time?"],
            call_id="c2",
            user_id="alice",
        )
    finally:
        await store.close()
    recalled = _recalled(openai_server.chat_requests[-1])
    assert len(recalled) == 1
    text = recalled[0]["content"]
    assert "Hotel Marquis" in text and "call of " in text and "this call" not in text


def test_recall_needs_a_store_and_right_types(openai_server):
    context = LLMContext()
    kwargs = dict(context=context, summarizer=OpenAISummarizer(base_url="http://x", model="m"))
    with pytest.raises(ValueError, match="recall needs a store"):
        ContextSummarizer(**kwargs, recall=RecallParams())
    with pytest.raises(TypeError, match="recall must be a RecallParams"):
        ContextSummarizer(**kwargs, store=SQLiteMemoryStore(), recall={"enabled": True})


class LateStore(SQLiteMemoryStore):
    """Once armed, each search waits for its own event: the first is let go by the test
    after its turn went to the LLM, the second never (until the end)."""

    def __init__(self, path):
        super().__init__(path)
        self.armed = False
        self.gates: list[asyncio.Event] = []

    async def search(self, query, **kwargs):
        if self.armed:
            gate = asyncio.Event()
            self.gates.append(gate)
            await gate.wait()
        return await super().search(query, **kwargs)


async def test_a_late_answer_serves_the_next_turn_when_still_relevant(openai_server, tmp_path):
    store = LateStore(tmp_path / "m.db")
    first, second = "What was the name of our hotel again?", "Which room at the hotel was it?"

    def handler(body: dict) -> Reply:
        if not is_summary_request(body):
            last = body["messages"][-1].get("content")
            if last == FILLER[-1]:
                store.armed = True  # the asking turns' searches are slow
            elif last == first and store.gates:
                store.gates[0].set()  # the turn went without recall; now the answer comes
        return _summaries(body)

    openai_server.handler = handler
    try:
        processor, _ = await _call(
            openai_server,
            store,
            [HOTEL, *FILLER, first, second],
            recall=RecallParams(latency_budget_s=0.01),
        )
    finally:
        for gate in store.gates:
            gate.set()
        await asyncio.sleep(0.05)
        await store.close()
    by_question = {b["messages"][-1]["content"]: b for b in openai_server.chat_requests}
    assert not _recalled(by_question[first])  # its search was too slow
    recalled = _recalled(by_question[second])  # its own too, but the first one's answer fits
    assert recalled and "Hotel Marquis" in recalled[0]["content"]
    assert processor.recall_step.late_served == 1


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_messages_still_in_the_context_at_hang_up_are_recalled_in_the_next_call(
    openai_server, store_target
):
    # a short first call: nothing is ever summarized, the hotel is still in view at the end
    openai_server.handler = _summaries
    store = open_store(store_target)
    try:
        first, _ = await _call(
            openai_server, store, [FILLER[0], HOTEL], call_id="c1", user_id="alice", gap=2.0
        )
        archived = await store.messages("c1")
        openai_server.requests.clear()
        processor, _ = await _call(
            openai_server,
            store,
            ["Hi again. Which hotel did I book with you last time?"],
            call_id="c2",
            user_id="alice",
        )
    finally:
        await store.close()
    assert first.recall_step.recalled == 0  # in view during its own call: never recalled
    # the conversation only (not the system prompt), in order, marked as still in view
    assert [m.role for m in archived] == ["user", "assistant", "user", "assistant"]
    assert {m.removed_by for m in archived} == {"in_context_at_end"}
    assert archived[2].content == HOTEL
    assert processor.recall_step.recalled == 1
    recalled = _recalled(openai_server.chat_requests[-1])
    assert len(recalled) == 1 and "Hotel Marquis" in recalled[0]["content"]

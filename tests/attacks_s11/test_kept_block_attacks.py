"""Attacks on the recalled block kept through a summary splice (session 11: a summary that
lands after the turn's block was placed and before the LLM reads the context keeps the
block, ``render.keep_recall`` in ``ContextSession.apply``).

The race is made certain as in tests/recall/test_recall_pipeline.py: the summary's answer
waits until the asking turn's block is placed, and the request carrying the block is held
until the splice is in. Then: the block is in the request once, just before the question;
it does not survive into the next turn, the next summary's input or the archive; a Flows
reset (the context's messages replaced) while the request is held leaves no block twice and
none after the question."""

from __future__ import annotations

import asyncio
import sqlite3

from pipecat.frames.frames import LLMSummarizeContextFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair

from pipecat_summarizer import CeilingParams, ContextSummarizerParams, OpenAISummarizer
from pipecat_summarizer._recall.render import RECALL_HEADER, is_recall_message
from pipecat_summarizer._text.tokens import EstimateTokenCounter
from pipecat_summarizer.store import SQLiteMemoryStore
from tests.recall.test_recall_pipeline import (
    FILLER,
    HOTEL,
    SYSTEM,
    Arm,
    HoldUntilCompacted,
    _summaries,
    concierge,
)
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import main_llm, turns
from tests.support.settle import Gap, run_settling

COUNT = EstimateTokenCounter()
QUESTION = "What was the name of our hotel again?"
# words the archive never holds: these turns recall nothing, so any block there is a leftover
AFTER = ["Wonderful, cheers.", "Bye bye now.", "Okay, ciao."]


def _blocks(messages: list[dict]) -> list[int]:
    return [i for i, m in enumerate(messages) if is_recall_message(m)]


async def _race(
    openai_server, tmp_path, *, reset: bool | str, ceiling: int | None = None, pad: str = ""
) -> tuple[list[dict], list[str], int]:
    """The race, then three more turns (a summary among them); the main LLM's requests,
    the archive's texts and how many requests the hold held."""
    hold = HoldUntilCompacted()
    summaries: list[dict] = []
    context = LLMContext(messages=[{"role": "system", "content": SYSTEM}])

    async def handler(body: dict) -> Reply:
        if is_summary_request(body):
            summaries.append(body)
            if hold.armed and not hold.compacted.is_set():
                await asyncio.wait_for(hold.placed.wait(), timeout=10)
                if reset == "drop question":
                    # the application takes the caller's last message back (a cancelled
                    # turn) while the request waits; everything else kept as it is
                    context.set_messages(context.messages[:-1])
                elif reset:
                    # a Flows node's reset while the request waits: its messages replaced,
                    # the conversation carried over as copies, a new instruction first
                    carried = [dict(m) for m in context.messages if m.get("role") != "system"]
                    node = {"role": "system", "content": "New node: help with checkout."}
                    context.set_messages([node, *carried])
        return _summaries(body)

    openai_server.handler = handler
    store = SQLiteMemoryStore(tmp_path / "m.db")
    summarizer = OpenAISummarizer(base_url=openai_server.base_url, model="cheap")
    processor = concierge(
        context,
        summarizer,
        store,
        params=(
            ContextSummarizerParams(ceiling=CeilingParams(max_request_tokens=ceiling))
            if ceiling
            else None
        ),
    )
    processor.add_event_handler("on_messages_evicted", _evicted)

    @processor.event_handler("on_context_compacted")
    async def _compacted(_p, _event):
        if hold.armed:
            hold.compacted.set()

    pair = LLMContextAggregatorPair(context)
    pipeline = Pipeline(
        [pair.user(), processor, hold, main_llm(openai_server.base_url), pair.assistant()]
    )
    if reset is True:
        # the reset discards the summary in flight: nothing compacts, the request goes on
        # when the hold's wait ends (its own cap)
        hold.compacted = _Soon(hold.placed)  # type: ignore[assignment]
    try:
        await run_settling(
            pipeline,
            frames_to_send=[
                *turns([HOTEL, *(f + pad for f in FILLER)], gap=2.0),
                Arm(),
                Gap(sleep=2.0),
                LLMSummarizeContextFrame(),
                *turns([QUESTION, *AFTER], gap=2.0),
            ],
        )
    finally:
        await summarizer.aclose()
        await store.close()
    with sqlite3.connect(tmp_path / "m.db") as db:
        archived = [str(r[0]) for r in db.execute("SELECT content FROM messages")]
    requests = [b for b in openai_server.chat_requests if not is_summary_request(b)]
    assert all(RECALL_HEADER not in str(b["messages"]) for b in summaries)
    return requests, archived, hold.held


class _Soon(asyncio.Event):
    """Set a moment after ``after`` is: the reset's splice never comes."""

    def __init__(self, after: asyncio.Event) -> None:
        super().__init__()
        self._after = after

    async def wait(self) -> bool:
        await self._after.wait()
        await asyncio.sleep(0.5)
        return True


EVICTED: list = []


async def _evicted(_p, event) -> None:
    EVICTED.append(event)


def _asked(requests: list[dict], text: str) -> list[dict]:
    return [b for b in requests if b["messages"] and b["messages"][-1].get("content") == text]


async def test_the_kept_block_is_placed_once_and_gone_the_next_turn(openai_server, tmp_path):
    requests, archived, held = await _race(openai_server, tmp_path, reset=False)
    assert held == 1  # the race happened: the splice came in while the request waited
    (asked,) = _asked(requests, QUESTION)
    messages = asked["messages"]
    assert _blocks(messages) == [len(messages) - 2]  # once, just before the question
    assert "Hotel Marquis" in messages[-2]["content"]
    for text in AFTER:  # the next turns: no block (nothing asked), never the old one
        for body in _asked(requests, text):
            assert not _blocks(body["messages"]), text
    assert not any(RECALL_HEADER in t for t in archived)


async def test_a_flows_reset_while_the_request_waits_leaves_no_block_twice(openai_server, tmp_path):
    requests, archived, held = await _race(openai_server, tmp_path, reset=True)
    assert held == 1 and any("New node" in str(b["messages"][0]) for b in requests)
    for body in requests:
        messages = body["messages"]
        places = _blocks(messages)
        assert len(places) <= 1
        last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
        assert all(i < last_user for i in places)  # never after the question
    for text in AFTER:
        for body in _asked(requests, text):
            assert not _blocks(body["messages"]), text
    assert not any(RECALL_HEADER in t for t in archived)


async def test_the_kept_block_under_a_ceiling_that_evicts_at_the_same_turn(openai_server, tmp_path):
    # a ceiling low enough that the ceiling evicts messages around the question's turn
    # (the block counts toward it): the kept block is still once, before the question, and
    # the request stays within the ceiling
    EVICTED.clear()
    ceiling = 210
    pad = " Also I wonder about the weather and the view from the balcony." * 2
    requests, archived, held = await _race(
        openai_server, tmp_path, reset=False, ceiling=ceiling, pad=pad
    )
    assert EVICTED, "the ceiling should have evicted"
    for body in requests:
        places = _blocks(body["messages"])
        assert len(places) <= 1
        assert all(i == len(body["messages"]) - 2 for i in places)
        assert sum(COUNT.count_message(m) for m in body["messages"]) <= ceiling
    assert not any(RECALL_HEADER in t for t in archived)
    (asked,) = _asked(requests, QUESTION)
    assert held == 1 and _blocks(asked["messages"])


async def test_a_question_taken_back_while_the_request_waits_leaves_no_dangling_block(
    openai_server, tmp_path
):
    # the application removes the caller's question while the request waits and the summary
    # lands: the block answered that question; it must not be the request's last message
    # (the model would read archived words as the caller's turn)
    requests, archived, held = await _race(openai_server, tmp_path, reset="drop question")
    assert held == 1
    for body in requests:
        messages = body["messages"]
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        for i in _blocks(messages):
            assert any(j > i for j in users if not is_recall_message(messages[j])), messages
    assert not any(RECALL_HEADER in t for t in archived)

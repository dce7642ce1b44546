"""The time a user turn's frame spends in the processor with recall is bounded by recall's
latency budget: placing and clearing the recalled block each turn are counted message by
message, never by recounting the whole context; and what runs after the search (ranking,
rendering) comes out of the budget too, however large the archived messages are.

Through a real pipeline (the aggregators, ``ContextSummarizer`` with a real SQLite store and
``RecallParams``, Pipecat's OpenAI service against the local OpenAI-protocol server)."""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

from pipecat.frames.frames import LLMContextFrame
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._compaction.measure import ContextMeter
from pipecat_summarizer._recall.render import is_recall_message
from pipecat_summarizer.params import MemoryParams, RecallParams, WriterParams
from pipecat_summarizer.store import ArchivedMessage, SQLiteMemoryStore
from tests.support.openai_server import Reply
from tests.support.pipeline_utils import build, cfg, main_llm, turns
from tests.support.settle import run_settling

FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)
EARLIER = [
    "We are staying at the Hotel Marquis in Lisbon, room 418.",
    "My daughter Ines is allergic to peanuts.",
    "The rental car is a blue Fiat, plate AB-12-CD.",
    "Our flight home is TP 1354 on Sunday at 18:40.",
    "The museum tickets are for the Gulbenkian on Saturday morning.",
    "The restaurant booking is at Taberna Sal Grosso, 20:30.",
]
QUESTIONS = [
    "Which hotel and room are we in again?",
    "What is my daughter Ines allergic to?",
    "What was the plate of the rental car?",
    "When is our flight home on Sunday?",
    "Which museum tickets did we get?",
    "Where was the restaurant booking?",
]


def _archived(user_id: str) -> list[ArchivedMessage]:
    out = []
    for i, text in enumerate(EARLIER):
        for j, (role, content) in enumerate((("user", text), ("assistant", "Noted."))):
            out.append(
                ArchivedMessage(
                    call_id="earlier-call",
                    position=2 * i + j,
                    role=role,
                    content=content,
                    message_json=json.dumps({"role": role, "content": content}),
                    turn=i,
                    at=1_700_000_000 + 2 * i + j,
                    user_id=user_id,
                )
            )
    return out


class Compared(dict):
    """A context message that counts how often it is compared by value (``==``): our own
    messages are found by identity; a search by value reads the whole context."""

    compared = 0

    def __eq__(self, other):
        Compared.compared += 1
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]


def _meter(processor: ContextSummarizer) -> ContextMeter:
    # the session's meter: its recount counter is public, the session is the processor's
    return processor._session.meter  # noqa: SLF001


async def test_the_recalled_block_is_placed_and_cleared_without_recounting_the_context(
    openai_server, tmp_path
):
    store = SQLiteMemoryStore(tmp_path / "memory.db")
    try:
        await store.write(_archived("alice"))
        history: list[dict] = [{"role": "system", "content": "You are a travel concierge."}]
        for k in range(60):  # a long call already: a recount is worth avoiding
            history.append(Compared(role="user", content=f"Small talk number {k} about weather."))
            history.append(Compared(role="assistant", content=f"Reply number {k}, sunny."))
        Compared.compared = 0
        context = LLMContext(messages=history)
        summarizer = OpenAISummarizer(base_url=openai_server.base_url, model="cheap")
        processor = ContextSummarizer(
            context=context,
            config=cfg(messages=10_000, keep=2),  # nothing is summarized: no splice
            summarizer=summarizer,
            store=store,
            call_id="this-call",
            user_id="alice",
            memory=MemoryParams(writer=FAST, resume=False),
            recall=RecallParams(latency_budget_s=5.0),  # on time: a block every turn
        )
        try:
            await run_settling(
                build(context, processor, main_llm(openai_server.base_url)),
                frames_to_send=[*turns(QUESTIONS, gap=0.4)],
            )
        finally:
            await summarizer.aclose()
    finally:
        await store.close()
    step = processor.recall_step
    assert step is not None
    requests = [r for r in openai_server.chat_requests if r.get("model") == "main-model"]
    with_block = [r for r in requests if any(is_recall_message(m) for m in r["messages"])]
    # the block was placed on most turns (a loaded machine may let a turn move on before
    # its search answered), each cleared before the next
    assert step.recalled >= 3 and len(with_block) == step.recalled
    # each placement and each clearing was a write: before, each recounted the context
    # (2 a turn); now the meter follows them, and recounts only at the call's start
    meter = _meter(processor)
    assert meter.recounts < step.recalled, (meter.recounts, step.recalled)
    # nor was the context searched by value for a copy of the block about to be placed
    assert Compared.compared == 0
    fresh = ContextMeter(meter.counter, lambda i, m, ms: m["role"] == "system")
    assert meter.measure(context.messages).total_tokens == (
        fresh.measure(context.messages).total_tokens
    )


# -- what runs after the search comes out of the budget --------------------------------------

BUDGET_S = 0.1  # room for a loaded test machine's scheduling (the default is 10 ms)
SEARCH_S = 0.07  # the archive answers within the budget, with little of it left
WORDS = "amber basil cedar dune ember fjord grove heron iris jade kelp lotus maple".split()


class SlowSQLite(SQLiteMemoryStore):
    """A real store whose search answers after ``SEARCH_S`` (a busy disk), within budget."""

    async def search(self, query, **kwargs):
        await asyncio.sleep(SEARCH_S)
        return await super().search(query, **kwargs)


class TimeInProcessor(BaseObserver):
    """Each user turn's frame, from its push into ``processor`` to the processor's push on:
    the wall time, and the event loop's CPU time meanwhile (what a loaded machine's
    scheduling does not stretch: the work the frame waited for)."""

    def __init__(self, processor) -> None:
        super().__init__()
        self._processor = processor
        self._entered: dict[int, tuple[float, float]] = {}
        self.seconds: list[float] = []
        self.cpu_seconds: list[float] = []

    async def on_push_frame(self, data: FramePushed):
        frame = data.frame
        if not isinstance(frame, LLMContextFrame) or data.direction != FrameDirection.DOWNSTREAM:
            return
        if data.destination is self._processor:
            self._entered[frame.id] = (time.perf_counter(), time.thread_time())
        elif data.source is self._processor and frame.id in self._entered:
            wall, cpu = self._entered.pop(frame.id)
            self.seconds.append(time.perf_counter() - wall)
            self.cpu_seconds.append(time.thread_time() - cpu)


def _tool_results(user_id: str) -> list[ArchivedMessage]:
    """Earlier calls' bulky tool results (as clearing archives them verbatim: ~30 KB each),
    each naming the booking the caller asks about."""
    rng = random.Random(5)
    out = []
    for i in range(60):
        body = " ".join(f"{rng.choice(WORDS)}{rng.randrange(1000)}" for _ in range(4000))
        text = f"Booking reference {i} for the Marquis hotel in Lisbon: {body}"
        out.append(
            ArchivedMessage(
                call_id=f"earlier-{i // 10}",
                position=i % 10,
                role="tool",
                content=text,
                message_json=json.dumps({"role": "tool", "tool_call_id": f"t{i}", "content": text}),
                turn=i % 10,
                at=1_700_000_000 + i,
                user_id=user_id,
            )
        )
    return out


async def test_a_frame_with_bulky_archived_results_stays_near_the_budget(openai_server, tmp_path):
    """The archive answers within the budget, with hits of ~30 KB each (cleared tool
    results): the frame must still leave the processor near the budget, not after ranking
    and rendering every hit's whole text. Judged on the loop's CPU time in the frame, with a
    generous 3x bound: what is tested is whether the work after the search is bounded at
    all, not how fast (or how loaded) a machine is."""
    store = SlowSQLite(tmp_path / "memory.db")
    _, timer = await _three_asks(
        openai_server, store, _tool_results("alice"), RecallParams(latency_budget_s=BUDGET_S)
    )
    seen = {"cpu": [round(s, 3) for s in timer.cpu_seconds], "wall": timer.seconds}
    assert max(timer.cpu_seconds) <= 3 * BUDGET_S, seen


# -- the selection and the rendering stop at the frame's deadline ----------------------------

LONG_BUDGET_S = 0.05  # the archive (SQLite, 2,000 characters a hit) answers well within it


def _long_hits(user_id: str, n: int = 240) -> list[ArchivedMessage]:
    """Earlier calls' long messages (~2,000 characters, the most recall reads of one), each
    naming the booking the caller asks about among many words of its own: every one is a
    strong match, none is in view, and judging and quoting each costs the loop real work."""
    rng = random.Random(7)
    out = []
    for i in range(n):
        body = " ".join(f"{rng.choice(WORDS)}{rng.randrange(100_000)}" for _ in range(220))
        text = f"Booking reference {i} for the Marquis hotel in Lisbon: {body}"
        out.append(
            ArchivedMessage(
                call_id=f"earlier-{i // 20}",
                position=i % 20,
                role="user",
                content=text,
                message_json=json.dumps({"role": "user", "content": text}),
                turn=i % 20,
                at=1_700_000_000 + i,
                user_id=user_id,
            )
        )
    return out


async def test_a_frame_with_many_long_hits_stops_choosing_at_the_deadline(openai_server, tmp_path):
    """Hundreds of strong, long hits (a recall asked for up to 240 snippets): judging and
    quoting all of them takes the loop far longer than the budget. The frame must still
    leave the processor near the budget: hits are judged best first and quoted until the
    frame's deadline, what is chosen by then is placed. Judged on the loop's CPU time in the
    frame, with a generous 3x bound (what is tested is whether that work is bounded at all,
    not how fast or how loaded the machine is)."""
    recall = RecallParams(
        latency_budget_s=LONG_BUDGET_S,
        search_limit=240,
        max_snippets=240,
        max_tokens=200_000,
        request_tokens=None,
        adaptive=False,
    )
    store = SQLiteMemoryStore(tmp_path / "memory.db")
    step, timer = await _three_asks(openai_server, store, _long_hits("alice"), recall)
    # the archive answered and a block was placed: the bound is not bought by recalling nothing
    assert step.recalled >= 1
    seen = {"cpu": [round(s, 3) for s in timer.cpu_seconds], "wall": timer.seconds}
    assert max(timer.cpu_seconds) <= 3 * LONG_BUDGET_S, seen


ASKS = [
    "What was the booking reference for the Marquis hotel in Lisbon?",
    "Remind me of the Lisbon Marquis hotel booking reference.",
    "Which booking reference did the Marquis hotel in Lisbon give?",
]


async def _three_asks(
    openai_server: Any, store: Any, archive: list[ArchivedMessage], recall: RecallParams
) -> tuple[Any, TimeInProcessor]:
    """Alice's archive written, then her three questions about the booking through a real
    pipeline with recall; the recall step (checked: one turn per question, each timed) and
    the frames' times in the processor."""
    openai_server.handler = lambda body: Reply("Sure thing.")
    try:
        await store.write(archive)
        context = LLMContext(messages=[{"role": "system", "content": "You are a concierge."}])
        summarizer = OpenAISummarizer(base_url=openai_server.base_url, model="cheap")
        processor = ContextSummarizer(
            context=context,
            config=cfg(messages=10_000, keep=2),
            summarizer=summarizer,
            store=store,
            call_id="this-call",
            user_id="alice",
            memory=MemoryParams(writer=FAST, resume=False),
            recall=recall,
        )
        timer = TimeInProcessor(processor)
        try:
            await run_settling(
                build(context, processor, main_llm(openai_server.base_url)),
                frames_to_send=[*turns(ASKS, gap=0.3)],
                observers=[timer],
            )
        finally:
            await summarizer.aclose()
    finally:
        await store.close()
    step = processor.recall_step
    assert step is not None and step.turns == len(ASKS) and len(timer.seconds) == len(ASKS)
    return step, timer

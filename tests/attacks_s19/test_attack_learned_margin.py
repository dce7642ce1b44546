"""S19 attack: the recall step's learned latency margin (``_recall/budget.py`` ``Margin``,
``planned_budget``, ``ran_over``; ``RecallStep.prepare`` marks a turn that searched and
``frame_ended`` teaches the margin once the processor has pushed the frame on).

Attacked through real pipelines (a real ``LLMContextAggregatorPair``, ``ContextSummarizer``
on a SQLite file, Pipecat's OpenAI service against the local OpenAI-protocol server): turns
whose search raises, a store that never answers, observers that raise or hold the loop, a
budget of 0, of 0.5 ms and of 5 s, a call cancelled (``CancelFrame``) and a turn interrupted
(``InterruptionFrame``) while the turn waits for its search, ``RecallPrefetch``'s early turns
on an archive six times slower than the budget, three calls at once on one loop of which one
pushes every frame late, and budgets of 10**12 and 10**15 s. After each: the pipeline ran to
its end, every question reached the main LLM, the margin is finite and within
[min(1 ms, budget/5), min(5 ms, 40% of the budget)], and the plan within the budget.

Held: every case but the huge budgets; each call's margin is its own (a call whose frames
all run late reaches its cap, the calls beside it stay at their default); and a raised
margin really shortens the search's wait (a search answering 1.5 ms inside the default plan
answers in time at the default margin and misses once the margin has risen).

Broke (S19-A-1), fixed: with a huge budget (``RecallParams`` accepts any finite float) the margin
leaves its bounds: at 10**15 s ``margin_s`` reads 0.0 from the call's start (under its 1 ms
floor) and no overrun can raise it; at 10**12 s a risen margin reads 5.0049 ms (over its
5 ms cap). ``Margin.of`` computes the margin as ``budget - planned_budget(budget, seconds)``,
a difference of two floats a few ulps apart (budget.py, ``Margin.of``), and ``Margin.after``
steps from that value. The turns themselves are served (the plan stays within the budget).
Fixed: the margin is computed, not read back from the plan (``budget.margin_of``).
"""

from __future__ import annotations

import asyncio
import math
import time

import pytest
from pipecat.frames.frames import CancelFrame, InterruptionFrame, LLMContextFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameProcessor

from pipecat_summarizer import RecallPrefetch
from pipecat_summarizer._recall.budget import (
    MARGIN_MAX_S,
    MARGIN_MAX_SHARE,
    MARGIN_MIN_S,
    MARGIN_S,
    planned_budget,
)
from pipecat_summarizer._recall.hooks import RecallObserver
from pipecat_summarizer._recall.render import is_recall_message
from pipecat_summarizer._recall.turn_gate import TURNS
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import SQLiteMemoryStore
from tests.support.early_search import (
    WatchedSQLite,
    desk,
    prefetch_pipeline,
    seed_trips,
    spoken_turn,
    watched_store,
)
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import build, main_llm, user_turn
from tests.support.recall_calls import archived_call, travel_desk
from tests.support.settle import Gap, Until, run_settling

GUARD_S = 30.0  # a guard against a hang only

ASKED = [
    "Which hotel in Lisbon did I book?",
    "Was the Lisbon hotel near the river?",
    "What room did I have at the Lisbon hotel?",
    "Which car did I rent at the Lisbon airport?",
]
LINES = [
    "We are staying at the Hotel Marquis in Lisbon, room 418.",
    "Noted, the Marquis in Lisbon.",
    "I rented a red Fiat from Avis at the Lisbon airport.",
    "Noted, a red Fiat.",
]


def bounds(budget: float) -> tuple[float, float]:
    return min(MARGIN_MIN_S, budget / 5), min(MARGIN_MAX_S, budget * MARGIN_MAX_SHARE)


def assert_bounded(step) -> None:
    budget = step.params.latency_budget_s
    margin = step.margin_s
    low, high = bounds(budget)
    tol = 1e-12
    assert math.isfinite(margin), margin
    assert low - tol <= margin <= high + tol, (budget, margin, low, high)
    planned = budget - margin
    assert -tol <= planned <= budget + tol


def _store(path, how: str = "ok") -> WatchedSQLite:
    """A real SQLite store whose searches fail (``"raises"``), never answer (``"hangs"``,
    until ``release``) or wait ``release`` (``"held"``)."""
    store = WatchedSQLite(path)
    store.fail = how == "raises"
    store.held = how in ("hangs", "held")
    return store


class Raising(RecallObserver):
    def on_search_started(self, query) -> None:
        raise ValueError("the application's observer broke")

    def on_recall(self, outcome) -> None:
        raise RuntimeError("the application's observer broke")


class Slow(RecallObserver):
    """Holds the loop 15 ms at each recall: the frame runs past a 10 ms budget."""

    def on_recall(self, outcome) -> None:
        time.sleep(0.015)


def asked_in(server) -> list[str]:
    """The user texts the main LLM was asked with, in its last request."""
    chats = [b for b in server.chat_requests if not is_summary_request(b)]
    assert chats, "the main LLM was never asked"
    last = chats[-1]["messages"]
    return [m["content"] for m in last if m.get("role") == "user" and not is_recall_message(m)]


async def _call(
    server,
    tmp_path,
    recall: RecallParams,
    how: str = "ok",
    observer=None,
    asked: list[str] = ASKED,
    gap: float = 0.25,
    frames_for=None,
    send_end_frame: bool = True,
):
    """One travel-desk call on a store whose searches go as ``how`` says: ``asked`` as
    turns ``gap`` apart, or ``frames_for(store)``'s frames. Returns the recall step, the
    store and the context."""
    # (a hung search keeps a pause from settling early: short pauses, the answer is quick)
    server.handler = lambda body: Reply("Sure.")
    store = _store(tmp_path / "m.db", how)
    context, processor, summarizer = travel_desk(server, store, recall)
    step = processor.recall_step
    assert step is not None
    if observer is not None:
        step.add_observer(observer)
    frames: list = []
    for text in asked:
        frames += [user_turn(text), Gap(sleep=gap)]
    try:
        await store.write(archived_call(LINES))
        await asyncio.wait_for(
            run_settling(
                build(context, processor, main_llm(server.base_url)),
                frames_to_send=frames if frames_for is None else frames_for(store),
                send_end_frame=send_end_frame,
            ),
            GUARD_S,
        )
        for _ in range(5):  # a cancelled turn's tasks end
            await asyncio.sleep(0)
    finally:
        store.release.set()
        await summarizer.aclose()
        await store.close()
    return step, store, context


CASES = {
    # name: (params, store, observer)
    "search_raises": (RecallParams(), "raises", None),
    "store_hangs": (RecallParams(), "hangs", None),
    "observer_raises": (RecallParams(), "ok", Raising),
    "observer_slow": (RecallParams(), "ok", Slow),
    "budget_zero": (RecallParams(latency_budget_s=0.0), "ok", None),
    "budget_tiny": (RecallParams(latency_budget_s=0.0005), "ok", None),
    "budget_5s": (RecallParams(latency_budget_s=5.0), "ok", None),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_attack_the_margin_stays_bounded_whatever_the_turn(openai_server, tmp_path, case):
    recall, how, observer = CASES[case]
    step, store, _ = await _call(
        openai_server, tmp_path, recall, how, observer() if observer else None
    )
    # every question searched (a hung store: the first, then "busy" for the others)
    assert step.turns == len(ASKED)
    assert len(store.searches) >= 1
    # no message lost: the last request carries every question, in order
    assert asked_in(openai_server) == ASKED
    assert_bounded(step)
    budget = step.params.latency_budget_s
    low, high = bounds(budget)
    if case in ("observer_slow", "budget_tiny"):
        # every frame ran past its budget: the margin rose to its cap, not past it
        assert math.isclose(step.margin_s, high, abs_tol=1e-12)
    if case == "store_hangs":
        assert step.missed == len(ASKED) and step.recalled == 0
    if case == "search_raises":
        assert step.errors >= 1 and set(store.ended) == {"failed"}
    assert TURNS._on_their_way == 0


async def test_attack_a_call_cancelled_while_its_turn_waits(openai_server, tmp_path):
    # the turn waits for its search (its 20 s budget) when the call is cancelled
    step, store, context = await _call(
        openai_server,
        tmp_path,
        RecallParams(latency_budget_s=20.0),
        "held",
        frames_for=lambda store: [
            user_turn(ASKED[0]),
            Until(sleep=10.0, done=lambda: len(store.searches) > 0),
            Gap(sleep=0.1),
            CancelFrame(),
        ],
        send_end_frame=False,
    )
    assert store.ended == ["cancelled"]  # the search was waited on, then cut with the call
    assert step.turns == 1
    assert_bounded(step)
    # the frame never finished: nothing learned from it
    assert math.isclose(step.margin_s, MARGIN_S)
    user = [m["content"] for m in context.get_messages() if m.get("role") == "user"]
    assert user == [ASKED[0]]
    assert TURNS._on_their_way == 0


async def test_attack_a_turn_interrupted_while_it_waits_then_more_turns(openai_server, tmp_path):
    def frames_for(store) -> list:
        def unheld() -> bool:
            if store.ended == ["cancelled"]:
                store.held = False  # the turns after the interruption are served at once
                return True
            return False

        frames = [
            user_turn(ASKED[0]),
            Until(sleep=10.0, done=lambda: len(store.searches) > 0),
            InterruptionFrame(),
            Until(sleep=10.0, done=unheld),
        ]
        for text in ASKED[1:]:
            frames += [user_turn(text), Gap(sleep=0.6)]
        return frames

    step, store, _ = await _call(
        openai_server,
        tmp_path,
        RecallParams(latency_budget_s=20.0),
        "held",
        frames_for=frames_for,
    )
    assert store.ended[0] == "cancelled"
    assert step.turns == len(ASKED)
    # the interrupted question is not lost: the next requests carry it
    assert asked_in(openai_server) == ASKED
    assert_bounded(step)
    # three frames well within a 20 s budget: the margin only went down from its default
    assert step.margin_s <= MARGIN_S
    assert TURNS._on_their_way == 0


async def test_attack_each_calls_margin_is_its_own(openai_server, tmp_path):
    """Three calls on one loop at once: ``late`` pushes every frame 30 ms past a 10 ms
    budget (an application's ``on_after_push_frame`` handler that awaits), the two others
    (budgets of 0.2 and 0.5 s) never run past theirs. Only the late call's margin rises."""
    openai_server.handler = lambda body: Reply("Sure.")

    async def one(name: str, budget: float, late: bool):
        store = SQLiteMemoryStore(tmp_path / f"{name}.db")
        context, processor, summarizer = travel_desk(
            openai_server, store, RecallParams(latency_budget_s=budget), call_id=name
        )
        if late:

            @processor.event_handler("on_after_push_frame")
            async def slow_push(_processor, frame):
                if isinstance(frame, LLMContextFrame):
                    await asyncio.sleep(0.03)  # the loop stays free for the other calls

        frames: list = []
        for text in ASKED:
            frames += [user_turn(text), Gap(sleep=0.6)]
        try:
            await store.write(archived_call(LINES, call_id=f"{name}-before"))
            await run_settling(
                build(context, processor, main_llm(openai_server.base_url)),
                frames_to_send=frames,
            )
        finally:
            await summarizer.aclose()
            await store.close()
        return processor.recall_step

    late, calm, roomy = await asyncio.wait_for(
        asyncio.gather(one("late", 0.010, True), one("calm", 0.2, False), one("roomy", 0.5, False)),
        GUARD_S,
    )
    for step in (late, calm, roomy):
        assert step.turns == len(ASKED)
        assert_bounded(step)
    assert math.isclose(late.margin_s, bounds(0.010)[1])  # 4 frames past: at its cap, 4 ms
    # the calls beside it learned nothing of its frames: budgets no frame of theirs nears,
    # even on a loaded machine (a 10 ms call beside it did run past its own there), so
    # their margins only came down from the default
    assert calm.margin_s <= MARGIN_S
    assert roomy.margin_s <= MARGIN_S


async def test_attack_recall_prefetch_early_turns(openai_server, tmp_path):
    """``RecallPrefetch`` before the aggregator: each question's search starts on its
    transcription and its block is made while the caller speaks; the archive takes 60 ms,
    six times the real 10 ms budget, so only the early work serves the turns."""
    openai_server.handler = lambda body: Reply("Sure.")
    store = watched_store(str(tmp_path / "m.db"))
    store.delay_s = 0.06
    asked = [
        "Which hotel did I book in Lisbon?",
        "Which car did I rent at the airport?",
        "What room number was my Lisbon hotel?",
    ]
    context, summarizer, processor = desk(
        openai_server, store, user_id="alice", recall=RecallParams()
    )
    companion = RecallPrefetch(processor)
    frames: list = []
    for text in asked:
        frames += spoken_turn(text)
    try:
        await seed_trips(store)
        await asyncio.wait_for(
            run_settling(
                prefetch_pipeline(openai_server, context, processor, companion),
                frames_to_send=frames,
            ),
            GUARD_S,
        )
    finally:
        await summarizer.aclose()
        await store.close()
    step = processor.recall_step
    assert step.turns == len(asked)
    assert step.recalled >= 2 and step.early_blocks + step.early_choices >= 1
    assert asked_in(openai_server) == asked
    assert_bounded(step)


class Stamp(FrameProcessor):
    """Stamps (the loop's clock) each context frame on its way to the summarizer."""

    #: Nothing of its own under way: a settled pause may end early (tests.support.settle).
    settled = True

    def __init__(self):
        super().__init__()
        self.at = 0.0

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            self.at = asyncio.get_running_loop().time()
        await self.push_frame(frame, direction)


#: The budget of the wait test: its plan is 28 ms at the default margin (2 ms), 25 ms at the
#: learned cap (5 ms). A probe's search answers 26.5 ms after its frame reached the
#: summarizer: 1.5 ms inside the one plan, 1.5 ms past the other.
PROBE_BUDGET = 0.030
PROBE_ANSWER_S = 0.0265


class Probed(SQLiteMemoryStore):
    """Answers nothing (no hit: the step's reserves stay 0), a probe's question
    ``PROBE_ANSWER_S`` after its frame was stamped, any other at once."""

    stamp: Stamp

    async def search(self, query, **kwargs):
        if "parcel" in query:
            loop = asyncio.get_running_loop()
            await asyncio.sleep(max(0.0, self.stamp.at + PROBE_ANSWER_S - loop.time()))
        return []


async def test_attack_a_raised_margin_shortens_the_searchs_wait(openai_server, tmp_path):
    openai_server.handler = lambda body: Reply("Sure.")
    store = Probed(tmp_path / "m.db")
    store.stamp = stamp = Stamp()
    context, processor, summarizer = travel_desk(
        openai_server, store, RecallParams(latency_budget_s=PROBE_BUDGET)
    )
    step = processor.recall_step

    @processor.event_handler("on_after_push_frame")
    async def slow_push(_processor, frame):
        # the luggage questions' frames run 35 ms past: the margin climbs to its cap
        if isinstance(frame, LLMContextFrame) and "luggage" in str(
            frame.context.get_messages()[-1]
        ):
            await asyncio.sleep(0.035)

    seen: dict[str, int] = {}

    def mark(name: str) -> Until:
        def done() -> bool:
            seen[name] = step.missed
            seen[name + "_margin"] = step.margin_s  # type: ignore[assignment]
            return True

        return Until(sleep=1.0, done=done)

    def probes(n: int) -> list:
        out: list = []
        for i in range(n):
            out += [user_turn(f"Where is my parcel number {i}?"), Gap(sleep=0.15)]
        return out

    frames = [mark("start"), *probes(4), mark("default")]
    for i in range(5):
        frames += [user_turn(f"Where is my luggage, bag {i}?"), Gap(sleep=0.15)]
    frames += [mark("raised"), *probes(4), mark("end")]
    pair = LLMContextAggregatorPair(context)
    pipeline = Pipeline(
        [pair.user(), stamp, processor, main_llm(openai_server.base_url), pair.assistant()]
    )
    try:
        await asyncio.wait_for(run_settling(pipeline, frames_to_send=frames), GUARD_S)
    finally:
        await summarizer.aclose()
        await store.close()
    assert step.turns == 13
    assert math.isclose(seen["start_margin"], MARGIN_S)
    assert math.isclose(seen["raised_margin"], bounds(PROBE_BUDGET)[1])  # 5 ms
    at_default = seen["default"] - seen["start"]
    at_raised = seen["end"] - seen["raised"]
    # at the default margin the probes answer in time; once it has risen, they miss
    assert at_default <= 1, seen
    assert at_raised >= 3, seen


async def _huge(server, tmp_path, budget: float):
    recall = RecallParams(latency_budget_s=budget)
    step, _, _ = await _call(server, tmp_path, recall, asked=ASKED[:2], gap=0.6)
    return step


@pytest.mark.parametrize("budget", [1e12, 1e15])
async def test_attack_a_huge_budget_still_serves_its_turns(openai_server, tmp_path, budget):
    step = await _huge(openai_server, tmp_path, budget)
    assert step.turns == 2 and step.recalled == 2 and step.missed == 0
    assert asked_in(openai_server) == ASKED[:2]
    assert math.isfinite(step.margin_s)
    assert planned_budget(budget, step._margin.seconds) <= budget


@pytest.mark.parametrize("budget", [1e12, 1e15])
async def test_attack_a_huge_budget_keeps_the_margin_in_its_bounds(openai_server, tmp_path, budget):
    step = await _huge(openai_server, tmp_path, budget)
    low, high = bounds(budget)
    assert low <= step.margin_s <= high, step.margin_s
    # and frames past the budget still raise it, within its bounds, to its cap
    margin = step._margin
    for _ in range(10):
        margin = margin.after(budget, True)
        assert low <= margin.of(budget) <= high, margin.of(budget)
    assert math.isclose(margin.of(budget), high)

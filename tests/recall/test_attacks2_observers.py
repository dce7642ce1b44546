"""Attack: public recall observers written carelessly or with hostile intent.

``RecallStep.add_observer`` promises: an exception in an observer is logged (types only) and
never costs the call; the other observers are still told; nothing of the conversation is
logged. These observers raise ``CancelledError`` (a ``BaseException``: a careless
``task.result()``), are ``async def``, remove themselves while being told, compare equal to
each other (dataclasses), are added twice, and put the caller's words in their exception.
Turns through a real pipeline (``LLMContextAggregatorPair``, ``ContextSummarizer``, Pipecat's
OpenAI service against the local server) over a real SQLite store; the ``recall_memory``
lookup directly.
"""

from __future__ import annotations

import asyncio
import gc
import time
import warnings
from dataclasses import dataclass, field

import pytest
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import run_test

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._recall.hooks import RecallObserver, RecallOutcome
from pipecat_summarizer._recall.render import is_recall_message
from pipecat_summarizer._recall.step import RecallStep
from pipecat_summarizer.params import MemoryParams, RecallParams
from pipecat_summarizer.store import SQLiteMemoryStore
from tests.recall.test_step_observer import ASK, FAST, Seen, _earlier_call
from tests.support.openai_server import Reply
from tests.support.pipeline_utils import build, cfg, main_llm, turns

LOOKUP = "the hotel in Lisbon"


class Cancelling(RecallObserver):
    """Raises ``CancelledError`` from both callbacks (a ``BaseException``, not an
    ``Exception``): an observer that read a cancelled task's result."""

    def on_search_started(self, query: str) -> None:
        raise asyncio.CancelledError()

    def on_recall(self, outcome: RecallOutcome) -> None:
        raise asyncio.CancelledError()


class Leaky(RecallObserver):
    """Puts the words it is given in its exception's message."""

    def on_search_started(self, query: str) -> None:
        raise ValueError(f"cannot handle {query!r}")

    def on_recall(self, outcome: RecallOutcome) -> None:
        raise ValueError(f"bad outcome {outcome!r}")


class Async(RecallObserver):
    """An observer written ``async def`` (the base's methods are plain functions)."""

    def __init__(self) -> None:
        self.ran = 0

    async def on_search_started(self, query: str) -> None:  # type: ignore[override]
        self.ran += 1

    async def on_recall(self, outcome: RecallOutcome) -> None:  # type: ignore[override]
        self.ran += 1


class Once(Seen):
    """Removes itself from the step the first time it is told of a search."""

    def __init__(self, step: RecallStep) -> None:
        super().__init__()
        self.step = step

    def on_search_started(self, query: str) -> None:
        super().on_search_started(query)
        self.step.remove_observer(self)


@dataclass
class Tally(RecallObserver):
    """A dataclass observer: two fresh ones compare equal (``eq=True``)."""

    name: str = "tally"
    outcomes: list[str] = field(default_factory=list)

    def on_recall(self, outcome: RecallOutcome) -> None:
        self.outcomes.append(outcome.outcome)


async def _turn(openai_server, tmp_path, *observers_of) -> tuple[RecallStep, list[dict]]:
    """One caller turn that recalls the earlier call's hotel, with the observers
    ``observers_of(step)`` returns added first."""
    openai_server.handler = lambda body: Reply("Sure.")
    store = SQLiteMemoryStore(tmp_path / "m.db")
    context = LLMContext(messages=[{"role": "system", "content": "You are a travel desk."}])
    summarizer = OpenAISummarizer(base_url=openai_server.base_url, model="cheap")
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=40, keep=4),
        summarizer=summarizer,
        store=store,
        call_id="c2",
        user_id="alice",
        memory=MemoryParams(writer=FAST),
        recall=RecallParams(latency_budget_s=2.0),
    )
    step = processor.recall_step
    assert step is not None
    for make in observers_of:
        step.add_observer(make(step))
    try:
        await store.write(_earlier_call())
        # bounded: an observer's CancelledError once hung this call for good
        await asyncio.wait_for(
            run_test(
                build(context, processor, main_llm(openai_server.base_url)),
                frames_to_send=turns([ASK], gap=0.3),
            ),
            timeout=30,
        )
    finally:
        await summarizer.aclose()
        await store.close()
    return step, openai_server.chat_requests


def _recalled(requests: list[dict]) -> list[dict]:
    return [m for m in requests[-1]["messages"] if is_recall_message(m)]


async def test_an_observer_raising_cancelled_error_costs_only_itself_pipeline(
    openai_server, tmp_path, logs
):
    seen = Seen()
    step, requests = await _turn(openai_server, tmp_path, lambda s: Cancelling(), lambda s: seen)
    # the recall went on: the block reached the main LLM, the next observer was told
    assert requests and requests[-1]["messages"][-1]["content"] == ASK
    blocks = _recalled(requests)
    assert len(blocks) == 1 and "Hotel Marquis" in blocks[0]["content"]
    assert step.recalled == 1 and step.errors == 0
    assert seen.searches and [o.outcome for o in seen.recalls] == ["recalled"]
    assert any("Cancelling" in r["message"] and "CancelledError" in r["message"] for r in logs)


async def _alices_step(
    tmp_path, first: RecallObserver
) -> tuple[SQLiteMemoryStore, RecallStep, Seen]:
    """Alice's second call's recall step over her earlier call, told ``first`` then ``Seen``."""
    store = SQLiteMemoryStore(tmp_path / "m.db")
    await store.write(_earlier_call())
    step = RecallStep(store, RecallParams(), call_id="c2", user_id="alice")
    seen = Seen()
    step.add_observer(first)
    step.add_observer(seen)
    return store, step, seen


async def test_an_observer_raising_cancelled_error_never_costs_a_lookup(tmp_path):
    store, step, seen = await _alices_step(tmp_path, Cancelling())
    try:
        found = await step.lookup(LOOKUP)
        assert found and any("Hotel Marquis" in item["text"] for item in found)
        assert [o.outcome for o in seen.recalls] == ["found"]
        await step.close()
    finally:
        await store.close()


async def test_an_observers_exception_message_never_logs_the_callers_words(
    openai_server, tmp_path, logs
):
    seen = Seen()
    step, requests = await _turn(openai_server, tmp_path, lambda s: Leaky(), lambda s: seen)
    assert len(_recalled(requests)) == 1 and seen.recalls[0].outcome == "recalled"
    ours = [r for r in logs if r["name"].startswith("pipecat_summarizer")]
    assert any("Leaky" in r["message"] for r in ours)
    for r in ours:
        text = r["message"] + str(r["exception"] or "")
        assert "Lisbon" not in text and "Marquis" not in text and "hotel" not in text.lower()


async def test_an_async_observer_is_refused_when_added_with_a_clear_error(tmp_path):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        step = RecallStep(store, RecallParams(), call_id="c2", user_id="alice")
        with pytest.raises(TypeError, match="Async.on_search_started must be a plain function"):
            step.add_observer(Async())
        await step.close()
    finally:
        await store.close()


async def test_an_observer_returning_a_coroutine_leaves_none_unawaited(tmp_path, logs):
    """A plain method that returns a coroutine (``return self.report(outcome)``): the step
    cannot await it inside the turn; it closes it and says so once (a coroutine left
    unawaited warns at garbage collection, in the application's logs, far from the cause)."""

    class Returns(RecallObserver):
        async def _report(self, outcome: RecallOutcome) -> None:
            pass

        def on_recall(self, outcome: RecallOutcome):  # type: ignore[override]
            return self._report(outcome)

    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await store.write(_earlier_call())
        step = RecallStep(store, RecallParams(), call_id="c2", user_id="alice")
        seen = Seen()
        step.add_observer(Returns())
        step.add_observer(seen)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert await step.lookup(LOOKUP)
            assert await step.lookup(LOOKUP)
            gc.collect()
        assert not [w for w in caught if "never awaited" in str(w.message)]
        assert [o.outcome for o in seen.recalls] == ["found", "found"]
        said = [r for r in logs if "Returns.on_recall" in r["message"]]
        assert len(said) == 1 and "synchronous" in said[0]["message"]
        await step.close()
    finally:
        await store.close()


async def test_an_observer_that_removes_itself_while_told_never_silences_the_next(
    openai_server, tmp_path
):
    seen = Seen()
    once: list[Once] = []

    def make_once(step: RecallStep) -> Once:
        once.append(Once(step))
        return once[0]

    step, requests = await _turn(openai_server, tmp_path, make_once, lambda s: seen)
    assert len(_recalled(requests)) == 1
    assert once[0].searches and not once[0].recalls  # removed: told no more
    # the observer after it was told of the very search the first one was (the removal
    # during the telling shifted the list under the loop)
    assert seen.searches[:1] == once[0].searches
    assert [o.outcome for o in seen.recalls] == ["recalled"]


async def test_removing_an_observer_removes_that_one_even_when_another_compares_equal(tmp_path):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await store.write(_earlier_call())
        step = RecallStep(store, RecallParams(), call_id="c2", user_id="alice")
        first, second = Tally(), Tally()
        assert first == second and first is not second  # a dataclass's equality
        step.add_observer(first)
        step.add_observer(second)
        step.remove_observer(second)
        assert await step.lookup(LOOKUP)
        assert first.outcomes == ["found"] and second.outcomes == []
        await step.close()
    finally:
        await store.close()


async def test_the_same_observer_added_twice_is_told_once(tmp_path):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await store.write(_earlier_call())
        step = RecallStep(store, RecallParams(), call_id="c2", user_id="alice")
        seen = Seen()
        step.add_observer(seen)
        step.add_observer(seen)
        assert await step.lookup(LOOKUP)
        assert [o.outcome for o in seen.recalls] == ["found"]
        step.remove_observer(seen)  # one removal stops it
        assert await step.lookup(LOOKUP)
        assert len(seen.recalls) == 1
        await step.close()
    finally:
        await store.close()


async def test_an_observer_that_mutates_what_it_is_told_changes_nothing_for_the_next(
    tmp_path,
):
    """The outcome is frozen; an observer that forces a change (``object.__setattr__``)
    still cannot change what the next observer is told: each is told the same values."""

    class Forcer(RecallObserver):
        def on_recall(self, outcome: RecallOutcome) -> None:
            object.__setattr__(outcome, "snippets", 999)
            object.__setattr__(outcome, "outcome", "error")

    store, step, seen = await _alices_step(tmp_path, Forcer())
    try:
        found = await step.lookup(LOOKUP)
        assert seen.recalls[0].outcome == "found"
        assert seen.recalls[0].snippets == len(found)
        await step.close()
    finally:
        await store.close()


async def test_a_slow_observer_costs_its_own_time_and_never_the_recall(tmp_path):
    """A synchronous sleep in an observer holds the loop (documented: keep them cheap); the
    lookup still answers, and the outcome says how long it took including the observer."""

    class Slow(RecallObserver):
        def on_search_started(self, query: str) -> None:
            time.sleep(0.05)

    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await store.write(_earlier_call())
        step = RecallStep(store, RecallParams(), call_id="c2", user_id="alice")
        seen = Seen()
        step.add_observer(Slow())
        step.add_observer(seen)
        found = await step.lookup(LOOKUP)
        assert found and seen.recalls[0].outcome == "found"
        await step.close()
    finally:
        await store.close()

"""The recall step's observer hook: ``RecallStep.add_observer`` is told of each search sent to
the archive and of how each recall went (a turn's through a real pipeline, and the
``recall_memory`` lookup's), with counts that match what the archive returned and what the
model was sent. Real SQLite stores; the archive is counted by a subclass of the real store."""

from __future__ import annotations

import asyncio

import pytest
from pipecat.tests.utils import run_test

from pipecat_summarizer._recall.hooks import RecallObserver, RecallOutcome
from pipecat_summarizer._recall.render import is_recall_message
from pipecat_summarizer._recall.step import RecallStep
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.store.records import ArchivedMessage
from tests.support.openai_server import Reply
from tests.support.pipeline_utils import build, main_llm, turns
from tests.support.recall_calls import FAST, archived_call, travel_desk

__all__ = ["ASK", "FAST", "Seen", "_earlier_call"]  # what tests/recall/test_attacks2_* share

# no date, time, amount or number: no search for a later correction of one (see test_step_later)
HOTEL = "We are staying at the Hotel Marquis in Lisbon, the one by the river."
ASK = "Which hotel did I book with you last time?"


class CountingSQLite(SQLiteMemoryStore):
    """A real SQLite store that keeps the words of each search and the hits it gave."""

    def __init__(self, *args, delay_s: float = 0.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.delay_s = delay_s
        self.queries: list[str] = []
        self.found: set[tuple[str, int]] = set()  # every hit returned, by call and position

    async def search(self, query, **kwargs):
        self.queries.append(query)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        found = await super().search(query, **kwargs)
        self.found |= {(h.call_id, h.position) for h in found}
        return found


class Seen(RecallObserver):
    """Keeps what it is told."""

    def __init__(self) -> None:
        self.searches: list[str] = []
        self.recalls: list[RecallOutcome] = []

    def on_search_started(self, query: str) -> None:
        self.searches.append(query)

    def on_recall(self, outcome: RecallOutcome) -> None:
        self.recalls.append(outcome)


def _earlier_call() -> list[ArchivedMessage]:
    return archived_call([HOTEL, "Noted, the Hotel Marquis in Lisbon.", "Thanks, bye."])


async def test_an_observer_sees_a_turns_recall_through_a_real_pipeline(openai_server, tmp_path):
    openai_server.handler = lambda body: Reply("Sure.")
    store = CountingSQLite(tmp_path / "m.db")
    # a generous budget: what is tested is what the observer is told, not speed
    context, processor, summarizer = travel_desk(
        openai_server, store, RecallParams(latency_budget_s=2.0)
    )
    seen = Seen()
    step = processor.recall_step
    assert step is not None
    step.add_observer(seen)
    try:
        await store.write(_earlier_call())
        await run_test(
            build(context, processor, main_llm(openai_server.base_url)),
            frames_to_send=turns([ASK], gap=0.3),
        )
    finally:
        await summarizer.aclose()
        await store.close()
    # told of exactly the searches the archive got, in order
    assert seen.searches == store.queries and store.queries
    assert [o.kind for o in seen.recalls] == ["turn"]
    outcome = seen.recalls[0]
    assert outcome.outcome == "recalled" and outcome.error is None
    assert step.recalled == 1 and step.turns == 1
    # the hits it chose from are the archive's, each once (a second, gathering search may
    # return the first one's again)
    assert outcome.hits == len(store.found) and outcome.hits >= 1
    assert 1 <= outcome.snippets <= outcome.hits
    # the tokens are those of the block the main LLM was sent
    blocks = [m for m in openai_server.chat_requests[-1]["messages"] if is_recall_message(m)]
    assert len(blocks) == 1 and "Hotel Marquis" in blocks[0]["content"]
    assert outcome.tokens == step.count(blocks[0]["content"])
    assert outcome.ended_ns >= outcome.started_ns and outcome.duration_s >= 0


async def test_an_observer_sees_lookups_found_and_timed_out(tmp_path):
    store = CountingSQLite(tmp_path / "m.db")
    try:
        await store.write(_earlier_call())
        step = RecallStep(store, RecallParams(), call_id="c2", user_id="alice")
        seen = Seen()
        step.add_observer(seen)
        found = await step.lookup("the hotel in Lisbon")
        assert found and any("Hotel Marquis" in item["text"] for item in found)
        outcome = seen.recalls[-1]
        assert (outcome.kind, outcome.outcome, outcome.error) == ("tool", "found", None)
        assert outcome.snippets == len(found) and outcome.hits == len(store.found)
        assert outcome.tokens is None and not outcome.over_budget
        assert seen.searches == store.queries
        # an archive slower than the tool's timeout: told, then the error is the caller's
        store.delay_s = 0.5
        slow = RecallStep(store, RecallParams(tool_timeout_s=0.05), call_id="c2", user_id="alice")
        slow.add_observer(seen)
        with pytest.raises(TimeoutError):
            await slow.lookup("the hotel in Lisbon")
        outcome = seen.recalls[-1]
        assert (outcome.kind, outcome.outcome, outcome.error) == ("tool", "timeout", "timeout")
        assert outcome.over_budget and outcome.snippets == 0
        await slow.close()
    finally:
        await store.close()


async def test_a_failing_observer_never_costs_the_recall_and_others_are_still_told(tmp_path):
    class Broken(RecallObserver):
        def on_search_started(self, query: str) -> None:
            raise RuntimeError("observer bug")

        def on_recall(self, outcome: RecallOutcome) -> None:
            raise RuntimeError("observer bug")

    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await store.write(_earlier_call())
        step = RecallStep(store, RecallParams(), call_id="c2", user_id="alice")
        seen = Seen()
        step.add_observer(Broken())
        step.add_observer(seen)
        assert await step.lookup("the hotel in Lisbon")
        assert [o.outcome for o in seen.recalls] == ["found"] and seen.searches
        step.remove_observer(seen)
        assert await step.lookup("the hotel in Lisbon")
        assert len(seen.recalls) == 1  # removed: no longer told
        with pytest.raises(TypeError, match="RecallObserver"):
            step.add_observer(object())  # type: ignore[arg-type]
    finally:
        await store.close()

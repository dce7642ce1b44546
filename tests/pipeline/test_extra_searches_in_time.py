"""The extra searches a turn makes after its first (the stated values' searches for a later
correction, the second search on the gathered words) start only when they are expected to
answer within what is left of the turn's budget (``ExtraCost``, measured on the call's earlier
ones): on an archive where they never answer in time, they stop being started after the first
measured ones (on SQLite they ran on the store's thread beside the turn's choice, on
PostgreSQL on a server backend, for nobody); where they answer in time they run every turn and
the correction still lands. Real pipelines (a real ``LLMContextAggregatorPair``,
``ContextSummarizer``, Pipecat's OpenAI service against the local server) on a SQLite file and
the real PostgreSQL; the slow searches wait on an event never set (until the step cancels
them), never on a timer; the searches started are counted through the public observer
hook."""

from __future__ import annotations

import asyncio

import pytest

from pipecat_summarizer._recall.budget import EXTRA_MIN_SAMPLES
from pipecat_summarizer._recall.hooks import RecallObserver
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import PostgresMemoryStore, SQLiteMemoryStore, open_store
from tests.recall.test_attacks_dates import archived, plain, utc
from tests.recall.test_attacks_gather import ASK, _blocks, _seed
from tests.support.pipeline_utils import build, main_llm, turns
from tests.support.recall_calls import travel_desk
from tests.support.settle import run_settling

#: Said in one call, corrected in the next by words that share none of the trip's.
CORRECTED = [
    (["My sister Marta lives in Porto and we plan a visit.", "Lovely."], utc(2026, 2, 1)),
    (["Marta and I fly to Lisbon on 14 March.", "Noted, 14 March."], utc(2026, 2, 10)),
    (["Actually, make that 21 March, not 14 March.", "Done, 21 March."], utc(2026, 2, 20)),
]
#: Four questions about the trip's time: each turn's hits state "14 March".
WHEN = [
    "When do Marta and I fly to Lisbon?",
    "What date is the Lisbon flight with Marta?",
    "Remind me when Marta and I leave for Lisbon?",
    "When is the Lisbon trip with Marta again?",
]


class Started(RecallObserver):
    """The words of every search the step started, in order."""

    def __init__(self) -> None:
        self.searches: list[str] = []

    def on_search_started(self, query: str) -> None:
        self.searches.append(query)


class _Held:
    """A real store whose searches of ``held`` words (not a turn's own question) never
    answer: each waits until it is cancelled (a turn lets it go at its deadline, and
    cancels it a latency budget later)."""

    def __init__(self, *args, held: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self.held = held
        self.ended: list[str] = []
        self._never = asyncio.Event()

    async def search(self, query, **kwargs):
        if self.held not in query.lower():
            return await super().search(query, **kwargs)
        try:
            await self._never.wait()
        except asyncio.CancelledError:
            self.ended.append("cancelled")
            raise
        raise AssertionError("never set")


class HeldSQLite(_Held, SQLiteMemoryStore):
    pass


class HeldPostgres(_Held, PostgresMemoryStore):
    pass


def _held(target: str, held: str) -> _Held:
    return HeldPostgres(target, held=held) if "://" in target else HeldSQLite(target, held=held)


async def _call(
    server, store, texts: list[str], budget_s: float, gap_s: float = 2.0
) -> tuple[Started, object]:
    """One call of alice asking ``texts``, the step observed from its first turn; each turn's
    pause lasts at most ``gap_s`` (it ends once nothing of the package runs, see ``Gap``)."""
    context, processor, summarizer = travel_desk(
        server, store, RecallParams(latency_budget_s=budget_s)
    )
    started = Started()
    step = processor.recall_step
    assert step is not None
    step.add_observer(started)
    try:
        await run_settling(
            build(context, processor, main_llm(server.base_url)),
            frames_to_send=turns(texts, gap=gap_s),
        )
    finally:
        await summarizer.aclose()
    return started, step


#: The budget of the call whose values' searches never answer. At 1 s a turn's own search
#: (the trip's hits, ms when idle) missed it under six CPU hogs on two cores in 4 of 10 runs
#: (S14-L-4): that turn recalled nothing. 2 s leaves it twice the time.
HELD_BUDGET_S = 2.0
#: The longest pause after each turn of that call. A search let go at the deadline is
#: cancelled one budget later (``LEFTOVER_BUDGETS``), or when the next turn searches; it then
#: counts the ~2 budgets it ran, against the ~1 budget a next turn has left: not started. A
#: next turn coming before that cancel (a pause of ~1 budget) dropped it after ~1 budget
#: instead, about what the turn has left, and it was started again (the premise broken). The
#: pause ends as soon as the cancel came (nothing of the package runs), so only its ceiling
#: is 2.5 budgets: it costs ~2 budgets on the turns that let one go, not 2.5.
HELD_GAP_S = 2.5 * HELD_BUDGET_S


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_values_searches_that_never_answer_in_time_stop_being_started(
    openai_server, store_target
):
    store = _held(store_target, held="march")
    openai_server.handler = plain
    try:
        for k, (lines, at) in enumerate(CORRECTED):
            await store.write(archived(lines, call_id=f"c{k}", at=at))
        started, step = await _call(
            openai_server, store, WHEN, budget_s=HELD_BUDGET_S, gap_s=HELD_GAP_S
        )
    finally:
        await store.close()
    values = [w for w in started.searches if "march" in w.lower()]
    # the first ones measured (let go at the deadline, cancelled a budget later); then
    # none started
    assert values == ["14 March"] * EXTRA_MIN_SAMPLES
    assert step.extras_skipped == len(WHEN) - EXTRA_MIN_SAMPLES  # type: ignore[attr-defined]
    assert step.extras_let_go == EXTRA_MIN_SAMPLES  # type: ignore[attr-defined]
    assert store.ended == ["cancelled"] * EXTRA_MIN_SAMPLES
    # every turn still recalled the trip (the marks, late, were lost either way)
    blocks = _blocks(openai_server)
    assert len(blocks) == len(WHEN) and all("Lisbon on 14 March" in b for b in blocks)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_values_searches_that_answer_in_time_run_every_turn(openai_server, store_target):
    # the same call on an archive that answers at once: a generous budget (a loaded
    # machine), every turn's values searched, every turn's old date marked superseded
    openai_server.handler = plain
    store = open_store(store_target)
    try:
        for k, (lines, at) in enumerate(CORRECTED):
            await store.write(archived(lines, call_id=f"c{k}", at=at))
        started, step = await _call(openai_server, store, WHEN, budget_s=5.0)
    finally:
        await store.close()
    values = [w for w in started.searches if "march" in w.lower()]
    assert values == ["14 March"] * len(WHEN)
    assert step.extras_skipped == 0  # type: ignore[attr-defined]
    blocks = _blocks(openai_server)
    assert len(blocks) == len(WHEN)
    for block in blocks:
        assert "Lisbon on 14 March" in block
        for line in block.splitlines():
            if "14 March" in line and "21 March" not in line:
                assert "superseded" in line, line  # the correction landed, every turn


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_a_second_search_that_never_answers_in_time_stops_being_started(
    openai_server, store_target
):
    # the gathered words (the first hits' names: Marta, Porto) held; the question's own
    # words ("sister") answer at once
    store = _held(store_target, held="marta")
    openai_server.handler = plain
    try:
        await _seed(store)
        started, step = await _call(openai_server, store, [ASK] * 4, budget_s=1.0)
    finally:
        await store.close()
    second = [w for w in started.searches if "marta" in w.lower()]
    assert len(second) == EXTRA_MIN_SAMPLES
    assert step.extras_skipped >= 4 - EXTRA_MIN_SAMPLES  # type: ignore[attr-defined]
    blocks = _blocks(openai_server)
    assert len(blocks) == 4 and all("lives in Porto" in b for b in blocks)

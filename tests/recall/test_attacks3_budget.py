"""Attack on recall's frame plan and RecallParams' edges, through the public API and a real
pipeline: a budget of 0, a budget and a tool timeout of 1e300 s, a search limit past a
database's integers, fields set to bad values after construction, a clock that jumps. The
call must go on, every turn answered and nothing lost; recall works where it can; a bad
value is a clear error before the call, never a silent "no recall" nor an error on every
turn."""

from __future__ import annotations

import math

import pytest
from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import ContextSummarizer, ExtractiveSummarizer
from pipecat_summarizer._recall.budget import Reserves, planned_budget, search_wait
from pipecat_summarizer._recall.render import is_recall_message
from pipecat_summarizer.params import RecallParams, SemanticRecallParams
from pipecat_summarizer.store import SQLiteMemoryStore
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import cfg
from tests.support.recall_calls import archived_call, recall_call

EARLIER = ["My dog Rex is a beagle.", "Noted.", "He loves the beach at Dune Bay.", "Lovely."]
SAID = ["Hello again.", "What breed is my dog Rex?"]


@pytest.mark.parametrize(
    "overrides",
    [
        {"latency_budget_s": 0.0},
        {"latency_budget_s": 1e300, "tool_timeout_s": 1e300},
    ],
    ids=["budget-0", "budget-1e300"],
)
async def test_edge_params_keep_the_call_going(openai_server, tmp_path, logs, overrides):
    openai_server.handler = lambda body: Reply("S" if is_summary_request(body) else "Sure.")
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await store.write(archived_call(EARLIER))
        await recall_call(
            openai_server,
            store,
            SAID,
            call_id="c2",
            recall=RecallParams(**overrides),
            system="You are a pet desk.",
        )
        sent = openai_server.chat_requests[-1]["messages"]
        said = [m["content"] for m in sent if m.get("role") == "user" and not is_recall_message(m)]
        assert said[-len(SAID) :] == SAID  # every turn answered, in order
        recalled = [str(m["content"]) for m in sent if is_recall_message(m)]
        if overrides["latency_budget_s"] > 0:
            assert len(recalled) == 1 and "beagle" in recalled[0]
        else:
            assert recalled == []  # no time for the archive: the turn goes without
        assert [r["message"] for r in logs if r["level"].no >= 40] == []
        archived = [m.content for m in await store.messages("c2")]
    finally:
        await store.close()
    assert [t for t in archived if t in SAID] == SAID  # nothing lost


def test_the_plan_of_an_edge_budget_is_a_number_in_range():
    for budget in (0.0, 1e-12, 0.0001, 0.01, 1.0, 1e300):
        planned = planned_budget(budget)
        assert 0.0 <= planned <= budget and math.isfinite(planned)
        # a clock that jumps (back, or hours ahead) between two turns' moments
        for jump in (-3600.0, -1e-9, 0.0, 3600.0):
            reserves = Reserves().measured(0.0, jump, jump, 2 * jump)
            wait = search_wait(planned, max(0.0, jump), reserves.wait)
            assert 0.0 <= wait <= planned, (budget, jump, wait)


def test_a_search_limit_no_database_takes_is_refused_at_construction():
    # it was accepted, and every turn's search then failed with OverflowError (a WARNING,
    # "turns go without recall until it answers": never)
    with pytest.raises(ValueError, match="recall.search_limit"):
        RecallParams(search_limit=10**20)
    assert RecallParams(search_limit=10_000).search_limit == 10_000


def test_a_semantic_count_no_database_takes_is_refused_at_construction():
    class Embedder:
        def embed(self, texts):  # never called
            raise AssertionError

    for name in ("max_calls", "candidates"):  # max_calls is a LIMIT on the caller's calls
        with pytest.raises(ValueError, match=f"recall.semantic.{name}"):
            SemanticRecallParams(embedder=Embedder(), **{name: 10**20})


def _processor(recall: RecallParams) -> ContextSummarizer:
    return ContextSummarizer(
        context=LLMContext(messages=[]),
        config=cfg(messages=6, keep=2),
        summarizer=ExtractiveSummarizer(),
        store=SQLiteMemoryStore(),
        call_id="c1",
        user_id="al",
        recall=recall,
    )


@pytest.mark.parametrize(
    "field,value,error",
    [
        ("latency_budget_s", float("nan"), ValueError),  # recall silently off
        ("latency_budget_s", -1.0, ValueError),  # recall silently off
        ("max_tokens", 0, ValueError),  # ZeroDivisionError on every turn
        ("search_limit", -5, ValueError),
        ("max_snippets", 0, ValueError),
        ("enabled", "yes", TypeError),
    ],
)
def test_a_field_set_after_construction_is_refused_by_the_processor(field, value, error):
    recall = RecallParams()
    setattr(recall, field, value)
    with pytest.raises(error, match=f"recall.{field}"):
        _processor(recall)


def test_a_semantic_field_set_after_construction_is_refused_by_the_processor():
    class Embedder:
        def embed(self, texts):  # never called
            raise AssertionError

    semantic = SemanticRecallParams(embedder=Embedder())
    semantic.min_similarity = float("nan")  # every hit by meaning silently refused
    with pytest.raises(ValueError, match="recall.semantic.min_similarity"):
        _processor(RecallParams(semantic=semantic))


def test_a_change_after_the_processor_took_the_params_never_reaches_it():
    recall = RecallParams()
    processor = _processor(recall)
    recall.latency_budget_s = float("nan")
    assert processor.recall_step is not None
    assert processor.recall_step.params.latency_budget_s == RecallParams.latency_budget_s


def _turns_to_recover(stall_s: float) -> int:
    """Turns (each 1 ms of work after its search) until the search's wait is back to 95%
    of its steady value, after one turn whose work after the search seemed ``stall_s``."""
    planned = planned_budget(RecallParams.latency_budget_s)
    steady = Reserves()
    for _ in range(50):
        steady = steady.measured(0.0, 0.0005, 0.0005, 0.001)
    normal = search_wait(planned, 0.0, steady.wait)
    # the step caps each sample at its latency budget
    budget = RecallParams.latency_budget_s
    reserves = steady.measured(0.0, stall_s, stall_s, stall_s + 0.0005, cap_s=budget)
    turns = 0
    while search_wait(planned, 0.0, reserves.wait) < 0.95 * normal and turns < 1000:
        reserves, turns = reserves.measured(0.0, 0.0005, 0.0005, 0.001), turns + 1
    return turns


def test_a_clock_jump_costs_no_more_turns_than_a_stall_of_the_budget():
    budget_stall = _turns_to_recover(RecallParams.latency_budget_s)
    assert _turns_to_recover(3600.0) <= budget_stall
    assert _turns_to_recover(2.0) <= budget_stall


async def test_the_step_counts_a_stalled_turn_at_most_its_budget():
    from pipecat_summarizer._recall.search import loop_time
    from pipecat_summarizer._recall.step import RecallStep

    store = SQLiteMemoryStore()
    try:
        step = RecallStep(store, RecallParams(), call_id="c1", user_id="al")
        hour_ago = loop_time() - 3600  # the turn's search answered an hour ago by this clock
        step._measured(hour_ago, hour_ago, hour_ago)
        assert 0 < step._reserves.wait <= RecallParams.latency_budget_s
    finally:
        await store.close()

"""In a long context the filling keeps at least ``compose.LEAST_WEAK`` weak hits after a
few strong matches (S15, Q).

A long context leaves the adaptive block less than three quarters of ``max_tokens``; the
filling of a question about one thing was then cut to one weak hit per strong match. A
question with one strong match lost the next weak hits, where LoCoMo's answers often are
(conversations 26-44 at question time: 84.44% -> 84.96% answer recall with the block's labels
said once per call). Pure: ``compose.choose`` and ``select.select_hits``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipecat_summarizer._recall import compose
from pipecat_summarizer._recall.query import ContextTerms, asks_when, topic_terms
from pipecat_summarizer._recall.select import lists, make_view, select_hits
from pipecat_summarizer.params import RecallParams

QUERY = "What ferry did Anna book to the island?"


@dataclass(frozen=True)
class Hit:
    call_id: str
    position: int
    content: str
    role: str = "user"
    turn: int = 1
    at: float = 1683208800.0


def _hits() -> list[Hit]:
    # one strong match (ferry + island), then 20 that share one word only (weak)
    strong = [Hit("c1", 0, "Anna booked the night ferry to the island of Hydra.")]
    weak = [Hit("c1", 2 + 2 * i, f"The island market number {i} sells figs.") for i in range(20)]
    return strong + weak


def _long_context() -> ContextTerms:
    # a long call: its context leaves the block less than ROOMY of max_tokens
    messages = [{"role": "system", "content": "You are a travel desk."}]
    for i in range(120):
        messages.append({"role": "user", "content": f"Turn {i}: tell me about museums and tours."})
        messages.append({"role": "assistant", "content": f"Answer {i}: the museums open at ten."})
    messages.append({"role": "user", "content": QUERY})
    context = ContextTerms()
    context.update(messages)
    return context


def test_a_long_context_keeps_the_least_weak_hits_after_one_strong_match():
    params = RecallParams(latency_budget_s=1.0)
    assert not lists(QUERY) and not asks_when(QUERY)  # a question about one thing
    context = _long_context()
    cap, _ = compose.block_cap(params, context.tokens())
    assert cap < compose.ROOMY * params.max_tokens  # the long context's case
    snippets, _ = compose.choose((_hits(), {}), QUERY, topic_terms(QUERY), context, [], params)
    weak = [s for s in snippets if "market" in s.content]
    assert snippets[0].content.startswith("Anna booked the night ferry")
    # one strong match (at most FEW_STRONG): the filling was cut to one weak hit; now
    # LEAST_WEAK stay
    assert compose.LEAST_WEAK > 1
    assert len(weak) == compose.LEAST_WEAK


def test_least_weak_never_adds_what_the_filling_would_not_take():
    params = RecallParams(latency_budget_s=1.0)
    view = make_view([])
    hits = _hits()
    terms = topic_terms(QUERY)
    plain = select_hits(hits, QUERY, view, params, terms=terms)
    cut = select_hits(hits, QUERY, view, params, terms=terms, weak_per_strong=1.0)
    floored = select_hits(hits, QUERY, view, params, terms=terms, weak_per_strong=1.0, least_weak=5)
    assert len(cut) == 2  # one strong, one weak
    assert floored == plain[:6]  # the same hits, in order, the first five weak ones
    # a floor above what there is takes what there is
    assert (
        select_hits(hits, QUERY, view, params, terms=terms, weak_per_strong=1.0, least_weak=500)
        == plain
    )
    # no strong match: no filling, whatever the floor
    lone = [h for h in hits if "market" in h.content]
    assert select_hits(lone, QUERY, view, params, terms=terms, least_weak=16) == []


def test_the_floor_holds_only_after_a_few_strong_matches():
    params = RecallParams(latency_budget_s=1.0)
    view = make_view([])
    terms = topic_terms(QUERY)
    strong = [
        Hit("c1", 100 + 2 * i, f"Anna booked ferry number {i} to the island.") for i in range(6)
    ]
    weak = [Hit("c1", 2 + 2 * i, f"The island market number {i} sells figs.") for i in range(20)]

    def kept(n_strong: int) -> int:
        chosen = select_hits(
            strong[:n_strong] + weak,
            QUERY,
            view,
            params,
            terms=terms,
            weak_per_strong=1.0,
            least_weak=16,
            few_strong=4,
        )
        return sum("market" in s.content for s in chosen)

    assert [kept(n) for n in (1, 4)] == [16, 16]  # a few strong matches: the floor
    assert [kept(n) for n in (5, 6)] == [5, 6]  # many: one weak hit per strong match

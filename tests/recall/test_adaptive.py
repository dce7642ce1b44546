"""The adaptive recalled block: sized by what was found (one hit with every word of the
question: a small block; a weak match or pieces from several calls: a larger one, capped).
Properties of the sizing rule, the presets, then returning callers through real pipelines
on a SQLite file and a real PostgreSQL."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer._recall.select import Snippet, block_budget
from pipecat_summarizer._text.tokens import estimate_text_tokens
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import open_store
from tests.support.openai_server import Reply, is_summary_request
from tests.support.recall_calls import recall_block, recall_call


def _snippet(relevance: float, call: int, position: int = 0) -> Snippet:
    return Snippet(f"c{call}", position, 1, 1.0, "user", "text", relevance, position)


snippets = st.lists(
    st.builds(
        _snippet,
        st.floats(min_value=0.0, max_value=1.0),
        st.integers(min_value=0, max_value=5),
        st.integers(min_value=0, max_value=50),
    ),
    max_size=12,
)
sizes = st.tuples(st.integers(40, 2000), st.integers(40, 5000)).map(sorted)


@settings(deadline=None)  # a loaded machine: no timing in these properties
@given(snippets, sizes)
def test_the_block_stays_between_its_small_size_and_its_cap(found, size):
    lo, hi = size
    assert lo <= block_budget(found, lo, hi) <= hi


@settings(deadline=None)  # a loaded machine: no timing in these properties
@given(st.integers(0, 5), sizes, st.lists(st.floats(0.0, 0.49), max_size=5))
def test_one_hit_with_every_word_gets_the_small_block(call, size, weaker):
    lo, hi = size
    # weaker hits of the same call (filling) do not grow it
    found = [_snippet(1.0, call), *(_snippet(r, call, i + 1) for i, r in enumerate(weaker))]
    assert block_budget(found, lo, hi) == lo


@settings(deadline=None)  # a loaded machine: no timing in these properties
@given(snippets, st.floats(0.0, 1.0), st.integers(0, 9), sizes)
def test_one_more_hit_never_shrinks_the_block(found, relevance, call, size):
    lo, hi = size
    top = max((s.relevance for s in found), default=1.0)
    more = [*found, _snippet(min(relevance, top), call, 99)]  # not a better best match
    assert block_budget(more, lo, hi) >= block_budget(found, lo, hi)


@settings(deadline=None)  # a loaded machine: no timing in these properties
@given(st.floats(0.0, 1.0), st.floats(0.0, 1.0), sizes)
def test_a_weaker_best_match_never_gets_a_smaller_block(a, b, size):
    lo, hi = size
    weaker, stronger = sorted((a, b))
    assert block_budget([_snippet(weaker, 0)], lo, hi) >= block_budget(
        [_snippet(stronger, 0)], lo, hi
    )


def test_the_small_preset_is_the_former_fixed_block():
    small = RecallParams.small()
    assert (small.max_tokens, small.max_snippets, small.search_limit) == (800, 8, 30)
    assert not small.adaptive and not small.gather
    default = RecallParams()
    assert default.adaptive and default.min_tokens < default.max_tokens
    with pytest.raises(ValueError, match="recall.min_tokens"):
        RecallParams(min_tokens=900, max_tokens=800)
    with pytest.raises(ValueError, match="recall.min_tokens"):
        RecallParams(min_tokens=0)
    with pytest.raises(TypeError, match="recall.adaptive"):
        RecallParams(adaptive="yes")  # type: ignore[arg-type]


# -- through real pipelines ------------------------------------------------------------

FILLER = [
    "What time does the office open?",
    "Is there parking on Sunday?",
    "Can I pay by card?",
    "Do you have a waiting room?",
    "How late are you open?",
    "Could you send the form please?",
    "Is there a lift upstairs?",
]
CALLS = [
    "My daughter Ines starts at Colegio Rosal in September.",
    "Ines loves painting with watercolors at the weekend.",
    "Ines has a dentist appointment on the third of March.",
]
ADAPTIVE = RecallParams(latency_budget_s=5.0, min_tokens=80, max_tokens=600)


def _summaries(body: dict) -> Reply:
    if is_summary_request(body):
        return Reply("FACTS:\n- the caller asked about the office\nDECISIONS:\n- none")
    return Reply("Sure thing.")


async def _call(server, store, texts, call_id):
    await recall_call(
        server, store, texts, call_id=call_id, recall=ADAPTIVE, system="You are a school secretary."
    )


_block = recall_block


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_the_block_is_small_for_one_exact_hit_and_larger_across_calls(
    openai_server, store_target
):
    openai_server.handler = _summaries
    store = open_store(store_target)
    try:
        for k, text in enumerate(CALLS):
            await _call(openai_server, store, [text, *FILLER], f"c{k}")
        openai_server.requests.clear()
        await _call(
            openai_server, store, ["When does my daughter Ines start at Colegio Rosal?"], "q1"
        )
        exact = _block(openai_server)
        openai_server.requests.clear()
        await _call(openai_server, store, ["What do you remember about Ines?"], "q2")
        spread = _block(openai_server)
    finally:
        await store.close()
    lines = [line for line in exact.split("\n") if line.startswith("- [")]
    assert len(lines) == 1 and "Colegio Rosal" in lines[0]
    assert estimate_text_tokens(exact) <= ADAPTIVE.min_tokens
    # the pieces of three calls: all of them, in a block larger than the small one
    for text in ("Colegio Rosal", "watercolors", "dentist"):
        assert text in spread
    assert estimate_text_tokens(spread) > ADAPTIVE.min_tokens

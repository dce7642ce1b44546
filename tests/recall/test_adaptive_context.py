"""The adaptive block's cap follows the context (``RecallParams.request_tokens``): a new call,
whose context holds nothing of the caller's past, may get the largest block; a long context
leaves less room for it. Properties of the rule, the params, then one returning caller's
archive asked from a short and from a long context through real pipelines, on a SQLite
file and a real PostgreSQL."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer._recall.query import ContextTerms
from pipecat_summarizer._recall.select import block_cap
from pipecat_summarizer._recall.step import RecallStep
from pipecat_summarizer._text.messages import spoken_text
from pipecat_summarizer._text.tokens import estimate_text_tokens
from pipecat_summarizer.params import MemoryParams, RecallParams
from pipecat_summarizer.store import ArchivedMessage, CallRecord, open_store
from tests.support.openai_server import Reply, is_summary_request
from tests.support.recall_calls import FAST, recall_block, recall_call

params = st.builds(
    lambda lo, hi, most, request: RecallParams(
        min_tokens=min(lo, hi), max_tokens=max(lo, hi), max_snippets=most, request_tokens=request
    ),
    st.integers(40, 3000),
    st.integers(40, 6000),
    st.integers(1, 60),
    st.one_of(st.none(), st.integers(1, 10_000)),
)


@settings(deadline=None)  # a loaded machine: no timing in these properties
@given(params, st.integers(0, 20_000))
def test_the_cap_stays_between_the_small_block_and_max_tokens(p, context):
    tokens, snippets = block_cap(p, context)
    assert p.min_tokens <= tokens <= p.max_tokens
    assert 1 <= snippets <= p.max_snippets
    if p.request_tokens is None:  # no sharing: the fixed cap
        assert (tokens, snippets) == (p.max_tokens, p.max_snippets)


@settings(deadline=None)  # a loaded machine: no timing in these properties
@given(params, st.integers(0, 20_000), st.integers(0, 20_000))
def test_a_longer_context_never_gets_a_larger_cap(p, a, b):
    short, long_ = sorted((a, b))
    assert block_cap(p, long_) <= block_cap(p, short)


@settings(deadline=None)  # a loaded machine: no timing in these properties
@given(params, st.integers(0, 20_000))
def test_the_context_and_the_cap_share_request_tokens(p, context):
    tokens, _ = block_cap(p, context)
    if p.request_tokens is not None and tokens > p.min_tokens:
        # above the small block, the cap is exactly what the context leaves (or max_tokens)
        assert tokens == min(p.max_tokens, p.request_tokens - context)


texts = st.sampled_from(
    ["", "Hello there.", "My room is 418 at the Hotel Marquis.", "ok", "A longer line " * 9]
)
contexts = st.lists(
    st.lists(
        st.builds(
            lambda r, t: {"role": r, "content": t}, st.sampled_from(["user", "assistant"]), texts
        ),
        max_size=8,
    ),
    min_size=1,
    max_size=5,
)


@settings(deadline=None)  # a loaded machine: no timing in these properties
@given(contexts, st.data())
def test_the_contexts_token_count_is_kept_across_updates(states, data):
    # each update reads only what changed (kept prefix, moved or new messages); the count
    # must equal a recount of the context as it is now
    terms = ContextTerms()
    pool: list[dict] = []
    for state in states:
        # reuse some earlier message objects (identity), as a real context does
        kept = data.draw(st.lists(st.sampled_from(pool), max_size=3)) if pool else []
        messages = [*kept, *state]
        pool.extend(state)
        terms.update(messages)
        expected = sum(estimate_text_tokens(spoken_text(m)) for m in messages if spoken_text(m))
        assert terms.tokens() == expected


def test_request_tokens_is_validated_by_name_and_the_presets_keep_a_fixed_cap():
    for bad in (0, -5):
        with pytest.raises(ValueError, match="recall.request_tokens"):
            RecallParams(request_tokens=bad)
    for bad in ("5000", 1.5, True):
        with pytest.raises(TypeError, match="recall.request_tokens"):
            RecallParams(request_tokens=bad)  # type: ignore[arg-type]
    assert RecallParams().request_tokens is not None  # the default shares
    assert RecallParams(request_tokens=None).request_tokens is None
    assert RecallParams.small().request_tokens is None
    assert RecallParams.broad().request_tokens is None


# -- through real pipelines ------------------------------------------------------------

#: Twelve earlier calls, each with one detail of the caller's garden.
DETAILS = [
    f"In my garden the {plant} grows by the {place}, planted in {month}."
    for plant, place, month in [
        ("rosemary", "gate", "March"),
        ("lavender", "wall", "April"),
        ("fig tree", "shed", "May"),
        ("tomatoes", "greenhouse", "June"),
        ("mint", "pond", "July"),
        ("apple tree", "fence", "August"),
        ("sunflowers", "path", "September"),
        ("tulips", "bench", "October"),
        ("garlic", "compost", "November"),
        ("holly", "hedge", "December"),
        ("snowdrops", "oak", "January"),
        ("crocuses", "lawn", "February"),
    ]
]
QUESTION = "What grows in my garden, and where?"
RECALL = RecallParams(
    latency_budget_s=5.0, min_tokens=60, max_tokens=900, max_snippets=12, request_tokens=1500
)
#: Instructions long enough to take most of ``request_tokens`` (about 1,100 tokens).
LONG_SYSTEM = "You are a garden centre's assistant. " + " ".join(
    f"Rule {i}: answer politely, check the order number, and never promise a delivery date."
    for i in range(55)
)


def _records(k: int, text: str, user_id: str) -> list[ArchivedMessage | CallRecord]:
    at = 1_770_000_000.0 + k * 86400
    call_id = f"{user_id}-c{k}"
    rows: list[ArchivedMessage | CallRecord] = [
        CallRecord(call_id=call_id, user_id=user_id, started_at=at, ended_at=at + 60.0)
    ]
    for i, (role, line) in enumerate((("user", text), ("assistant", "Noted."))):
        rows.append(
            ArchivedMessage(
                call_id=call_id,
                position=i,
                role=role,
                content=line,
                message_json=json.dumps({"role": role, "content": line}),
                turn=0,
                at=at + i,
                user_id=user_id,
            )
        )
    return rows


def _plain(body: dict) -> Reply:
    if is_summary_request(body):
        return Reply("FACTS:\n- the caller asked about the garden\nDECISIONS:\n- none")
    return Reply("Sure thing.")


def _snippets(block: str) -> list[str]:
    return [line for line in block.split("\n") if line.startswith("- [")]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_a_long_context_gets_a_smaller_block_than_a_new_call(openai_server, store_target):
    openai_server.handler = _plain
    store = open_store(store_target)
    try:
        # two callers with the same past, so that neither's question is in the other's
        for user_id in ("ann", "bea"):
            for k, text in enumerate(DETAILS):
                await store.write(_records(k, text, user_id))
        blocks = {}
        for name, system, user_id in (
            ("short", "You are a garden centre's assistant.", "ann"),
            ("long", LONG_SYSTEM, "bea"),
        ):
            openai_server.requests.clear()
            await recall_call(
                openai_server,
                store,
                [QUESTION],
                call_id=f"q-{name}",
                recall=RECALL,
                system=system,
                memory=MemoryParams(writer=FAST),
                user_id=user_id,
            )
            blocks[name] = recall_block(openai_server)
    finally:
        await store.close()
    short, long_ = blocks["short"], blocks["long"]
    # a new call's short context: the block may take max_tokens (all twelve details fit)
    assert len(_snippets(short)) == len(DETAILS)
    assert estimate_text_tokens(short) <= RECALL.max_tokens
    # a long context leaves less of request_tokens: a smaller block, still with details,
    # within what the context leaves (the context is ~1,100 of the 1,500 tokens)
    assert 1 <= len(_snippets(long_)) < len(DETAILS)
    assert estimate_text_tokens(long_) <= RECALL.request_tokens - estimate_text_tokens(LONG_SYSTEM)
    plants = [d.split(" the ")[1].split(" grows")[0] for d in DETAILS]
    assert all(any(p in line for p in plants) for line in _snippets(long_))  # still details


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_the_recall_memory_tool_shares_request_tokens_with_the_context(store_target):
    # the tool's answer joins the context as well: a long context leaves it less room
    store = open_store(store_target)
    try:
        for k, text in enumerate(DETAILS):
            await store.write(_records(k, text, "ann"))
        found = {}
        for name, system in (
            ("short", "You are a garden centre's assistant."),
            ("long", LONG_SYSTEM),
        ):
            step = RecallStep(store, RECALL, call_id=f"q-{name}", user_id="ann")
            context = [{"role": "system", "content": system}, {"role": "user", "content": "Hi."}]
            await step.prepare(lambda c=context: c, lambda: ())  # the turn reads the context
            found[name] = await step.lookup(QUESTION)
            await step.close()
    finally:
        await store.close()
    assert len(found["short"]) == len(DETAILS)
    cap, most = block_cap(RECALL, estimate_text_tokens(LONG_SYSTEM) + 1)
    assert 1 <= len(found["long"]) <= most < len(DETAILS)
    assert (
        sum(estimate_text_tokens(json.dumps(i, ensure_ascii=False)) for i in found["long"]) <= cap
    )

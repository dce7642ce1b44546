"""A message is dated when it enters the context, by the conversation's clock, and the
application can move that clock mid-call (``ContextSummarizer.set_conversation_time``): a
transcript replayed with its sessions' dates in one call (LoCoMo at question time) dates each
line by its own session, though it leaves the context (summarized, archived) sessions later.
Before, a line was dated when it left, and one call had one clock: every line of a
conversation replayed in one call carried its first session's date, and a quote's
"yesterday" was resolved against it (S17-Q-1). Through real pipelines (a real
``LLMContextAggregatorPair``, the local OpenAI-protocol server), on SQLite and PostgreSQL."""

from __future__ import annotations

import calendar

import pytest
from pipecat.frames.frames import LLMMessagesUpdateFrame
from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer.params import MemoryParams, RecallParams
from pipecat_summarizer.store import open_store
from tests.recall.test_dates import FILLER
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import turns
from tests.support.recall_calls import FAST, recall_block, recall_call
from tests.support.settle import Gap, Until

MAY_4 = calendar.timegm((2023, 5, 4, 14, 5, 0))
JUNE_20 = calendar.timegm((2023, 6, 20, 9, 30, 0))
AUGUST_1 = calendar.timegm((2023, 8, 1, 10, 0, 0))
POTTERY = "I signed up for a pottery class yesterday, on the east side."
LATER = FILLER[:6]  # the hotel questions of test_dates


def _replies(body: dict) -> Reply:
    if is_summary_request(body):
        return Reply("FACTS:\n- the caller asked about the hotel\nDECISIONS:\n- none")
    return Reply("Sure thing.")


def _moved(processor: ContextSummarizer, at: float) -> Until:
    """A pause that moves the conversation's clock to ``at`` as it starts (the application
    replaying its next session)."""

    def move() -> bool:
        processor.set_conversation_time(at)
        return True

    return Until(done=move, sleep=1.0)


async def _replayed(server, store, started_at: float, frames) -> list:
    """One call of ``alice`` that the application drives with ``frames(processor)``
    (compacts at six messages, keeps two); the call's archived rows."""
    await recall_call(
        server,
        store,
        [],
        call_id="replayed",
        recall=None,
        system="You are a concierge.",
        memory=MemoryParams(writer=FAST, conversation_started_at=started_at),
        frames=frames,
    )
    (call,) = await store.calls("alice")
    return await store.messages(call.call_id)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_a_line_keeps_its_sessions_date_when_it_leaves_sessions_later(
    openai_server, store_target
):
    openai_server.handler = _replies
    store = open_store(store_target)
    try:
        # the pottery line is summarized in June's turns
        archived = await _replayed(
            openai_server,
            store,
            MAY_4,
            lambda processor: [
                *turns([POTTERY], gap=2.0),
                _moved(processor, JUNE_20),
                *turns(LATER, gap=2.0),
            ],
        )
        openai_server.requests.clear()
        await recall_call(
            openai_server,
            store,
            ["When did I tell you about the pottery class?"],
            call_id="asked",
            recall=RecallParams(latency_budget_s=5.0),
            system="You are a concierge.",
            memory=MemoryParams(writer=FAST, conversation_started_at=AUGUST_1),
        )
        block = recall_block(openai_server)
    finally:
        await store.close()
    pottery = [m for m in archived if "pottery" in m.content]
    later = [m for m in archived if any(text in m.content for text in LATER[-2:])]
    assert pottery and later
    assert any(m.removed_by == "summarized" for m in pottery)  # it left in June
    assert all(MAY_4 <= m.at < MAY_4 + 600 for m in pottery)  # dated in May all the same
    assert all(JUNE_20 <= m.at < JUNE_20 + 600 for m in later)
    assert "pottery class yesterday" in block
    assert "on 4 May 2023" in block and '"yesterday" = 3 May 2023' in block


async def test_the_conversation_time_is_checked(openai_server, tmp_path):
    context = LLMContext(messages=[{"role": "system", "content": "You are a concierge."}])
    summarizer = OpenAISummarizer(base_url=openai_server.base_url, model="cheap")
    store = open_store(str(tmp_path / "m.db"))
    try:
        processor = ContextSummarizer(
            context=context, summarizer=summarizer, store=store, call_id="c", user_id="al"
        )
        # 1.7e12: milliseconds; 10**5000: an int Python refuses to write out (its repr in
        # the message raised the wrong ValueError, about digits)
        for bad in (float("nan"), -1.0, 1.7e12, float("inf"), 10**5000):
            with pytest.raises(ValueError, match="seconds since the epoch"):
                processor.set_conversation_time(bad)
        with pytest.raises(TypeError):
            processor.set_conversation_time("2023-05-04")  # type: ignore[arg-type]
        processor.set_conversation_time(MAY_4)
        assert processor._recorder is not None and int(processor._recorder.now()) == MAY_4
        bare = ContextSummarizer(context=context, summarizer=summarizer)
        bare.set_conversation_time(MAY_4)  # nothing dated without a store: a no-op
    finally:
        await summarizer.aclose()
        await store.close()


async def test_attack_a_flows_reset_and_a_clock_moved_back_and_forth(openai_server, tmp_path):
    # the application moves the clock back before the call's start, resets the context (a
    # Flows node change with run_llm: new message objects, one repeating an old text), then
    # moves it forward: each row is dated by the turn its message entered at; the reset's
    # messages by the reset's own turn, never by a later clock
    openai_server.handler = _replies
    store = open_store(str(tmp_path / "m.db"))
    reset = LLMMessagesUpdateFrame(
        messages=[
            {"role": "system", "content": "You are a booking desk."},
            {"role": "user", "content": "Again: " + POTTERY},
        ],
        run_llm=True,
    )
    try:
        archived = await _replayed(
            openai_server,
            store,
            JUNE_20,
            lambda processor: [
                *turns([POTTERY, LATER[0]], gap=2.0),
                _moved(processor, MAY_4),  # back, before the call's start
                *turns(LATER[1:3], gap=2.0),
                reset,
                Gap(sleep=2.0),
                _moved(processor, AUGUST_1),
                *turns(LATER[3:6], gap=2.0),
            ],
        )
    finally:
        await store.close()

    def dated(text: str) -> list[float]:
        return [m.at for m in archived if m.content.startswith(text) and m.role == "user"]

    assert dated(POTTERY) and all(JUNE_20 <= at < JUNE_20 + 600 for at in dated(POTTERY))
    assert all(MAY_4 <= at < MAY_4 + 600 for at in dated(LATER[1]))
    assert dated("Again: ") and all(MAY_4 <= at < MAY_4 + 600 for at in dated("Again: "))
    assert all(AUGUST_1 <= at < AUGUST_1 + 600 for at in dated(LATER[5]))


def test_an_integer_too_large_for_a_float_is_refused_in_words():
    # 10**400 is an int no float holds: math.isfinite raised OverflowError out of the
    # parameters' check instead of the range's ValueError
    with pytest.raises(ValueError, match="conversation_started_at"):
        MemoryParams(conversation_started_at=10**400)

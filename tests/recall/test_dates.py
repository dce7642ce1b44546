"""Dates in recall: each archived message carries its conversation's date (the call's start,
or ``MemoryParams.conversation_started_at`` when the application gives one); recalled
snippets show it, and how long ago when the question is about time. Through real pipelines
(a real ``LLMContextAggregatorPair``, the local OpenAI-protocol server), on a SQLite file
and a real PostgreSQL."""

from __future__ import annotations

import calendar
import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer._recall.query import asks_when
from pipecat_summarizer._recall.render import ago, calendar_days, date_text, snippet_when
from pipecat_summarizer._recall.select import Snippet
from pipecat_summarizer.params import MemoryParams, RecallParams
from pipecat_summarizer.store import open_store
from pipecat_summarizer_cli.replay.locomo import session_note, session_time
from tests.support.openai_server import Reply, is_summary_request
from tests.support.recall_calls import FAST, recall_block, recall_call

HOTEL = "We are staying at the Hotel Marquis in Lisbon, room 418, arriving Friday."
FILLER = [
    "What time does the breakfast buffet open?",
    "Is the spa open on Sunday?",
    "Can I book a table for dinner tonight?",
    "Do you have a gluten free menu?",
    "How late is the pool open?",
    "Could you send towels up please?",
    "Is there a gym upstairs?",
]
MAY_4 = calendar.timegm((2026, 5, 4, 14, 5, 0))
WEEKS_LATER = MAY_4 + 21 * 86400 + 3600


def _summaries(body: dict) -> Reply:
    if is_summary_request(body):
        return Reply("FACTS:\n- the caller asked about breakfast\nDECISIONS:\n- none")
    return Reply("Sure thing.")


async def _call(server, store, texts, *, call_id, started_at):
    return await recall_call(
        server,
        store,
        texts,
        call_id=call_id,
        recall=RecallParams(latency_budget_s=5.0),
        system="You are a concierge.",
        memory=MemoryParams(writer=FAST, conversation_started_at=started_at),
    )


_block = recall_block


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_an_earlier_call_is_recalled_with_the_date_the_application_gave(
    openai_server, store_target
):
    openai_server.handler = _summaries
    store = open_store(store_target)
    try:
        # the first mention is made mid-call: dated by its call, not by the clock
        await _call(
            openai_server, store, [*FILLER[:2], HOTEL, *FILLER], call_id="c1", started_at=MAY_4
        )
        calls = await store.calls("alice")
        archived = [m for m in await store.messages(calls[0].call_id) if "Marquis" in m.content]
        openai_server.requests.clear()
        await _call(
            openai_server,
            store,
            ["Which hotel did I book with you?"],
            call_id="c2",
            started_at=WEEKS_LATER,
        )
        plain = _block(openai_server)
        openai_server.requests.clear()
        await _call(
            openai_server,
            store,
            ["When did I tell you about the hotel?"],
            call_id="c3",
            started_at=WEEKS_LATER,
        )
        timed = _block(openai_server)
    finally:
        await store.close()
    assert archived and all(MAY_4 <= m.at < MAY_4 + 3600 for m in archived)
    assert "Hotel Marquis" in plain and "[call of 4 May 2026, 14:05 UTC]" in plain
    assert "ago" not in plain  # a question not about time gets the date alone
    assert "Hotel Marquis" in timed
    assert "[call three weeks ago, on 4 May 2026, 14:05 UTC]" in timed


def test_a_question_about_time_is_recognised():
    for q in (
        "When did I tell you?",
        "How long ago was that?",
        "What date did we say?",
        "When should you call me back?",
        "How many weeks since my visit?",
    ):
        assert asks_when(q), q
    for q in ("Which hotel did I book?", "What is my room number?", "Who is my doctor?"):
        assert not asks_when(q), q


def test_how_long_ago_in_words():
    day = 86400.0
    assert ago(-5) is None  # clocks apart: no relative form
    assert ago(600) == "less than an hour ago"
    assert ago(5 * 3600) == "earlier today"
    assert ago(1.5 * day) == "yesterday"
    assert ago(3 * day) == "three days ago"
    assert ago(7 * day) == "a week ago"
    assert ago(21 * day + 3600) == "three weeks ago"
    assert ago(65 * day) == "two months ago"
    assert ago(800 * day) == "two years ago"
    assert date_text(MAY_4) == "4 May 2026, 14:05 UTC"  # the label names its zone


@settings(max_examples=200, deadline=None)
@given(
    at=st.floats(min_value=0, max_value=4e9),
    age=st.floats(min_value=0, max_value=3 * 365 * 86400.0),
)
def test_the_relative_words_agree_with_the_calendar_date_beside_them(at, age):
    # "yesterday" beside yesterday's date, "earlier today" beside today's, however few
    # hours apart (23:30 asked at 10:00 next morning was "earlier today, on <yesterday>")
    now = at + age
    days = calendar_days(at, now)
    words = ago(now - at, days)
    assert days is not None and words is not None
    said = dt.datetime.fromtimestamp(at, dt.UTC).date()
    asked = dt.datetime.fromtimestamp(now, dt.UTC).date()
    assert days == (asked - said).days
    if words in ("earlier today", "less than an hour ago"):
        assert said == asked
    elif words == "yesterday":
        assert (asked - said).days == 1
    else:
        assert (asked - said).days >= 2


def test_a_date_beyond_the_calendar_costs_its_label_only():
    # a row written in microseconds by another tool: no date, never an error
    for at in (1e17, 1e30):
        with pytest.raises((OverflowError, OSError, ValueError)):
            date_text(at)
        assert calendar_days(at, MAY_4) is None
        snippet = Snippet("c1", 0, 1, at, "user", "the hotel", relevance=1.0, rank=0)
        assert snippet_when(snippet, "c2", now=MAY_4, relative=True) == "an earlier call"


def test_locomo_session_dates_are_read_from_the_session_note():
    assert session_time(session_note(3, "1:56 pm on 8 May, 2023")) == calendar.timegm(
        (2023, 5, 8, 13, 56, 0)
    )
    assert session_time(session_note(1, "12:04 am on 20 January, 2023")) == calendar.timegm(
        (2023, 1, 20, 0, 4, 0)
    )
    assert session_time(session_note(2, None)) is None
    assert session_time("Hello there") is None


def test_conversation_started_at_is_validated_by_name():
    with pytest.raises(ValueError, match="conversation_started_at"):
        MemoryParams(conversation_started_at=-1.0)
    with pytest.raises(TypeError, match="conversation_started_at"):
        MemoryParams(conversation_started_at="yesterday")
    assert MemoryParams().conversation_started_at is None

"""The correction rule: which earlier detail a message corrects, its old and new value; the
pinned fact keeps its key; the summary states only the corrected value."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pipecat.utils.context.llm_context_summarization import LLMContextSummaryConfig

from pipecat_summarizer._record.corrections import (
    corrected_from,
    find_correction,
    is_marked,
    mark_corrected,
    unread,
)
from pipecat_summarizer._record.pinned import PinnedFacts
from pipecat_summarizer._record.record import ConversationRecord
from pipecat_summarizer._record.summary_text import with_corrections
from pipecat_summarizer.store.records import fact_changes, fact_snapshot

DETAILS = [
    ("topic:date", "date: 14 March"),
    ("topic:tickets", "Tickets: 2 tickets for the concert"),
    ("topic:booking reference", "booking reference: AB-1234"),
    (None, "User: The flight lands on Monday at 6 pm."),
    ("topic:name", "name: Priya Raman"),
    (None, "User: My budget is $90 a week."),
]

CORRECTIONS = [
    ("make that 21 March", "topic:date", "14 March", "21 March"),
    ("Make it the 3rd of April, please.", "topic:date", "14 March", "3rd of April"),
    ("Can you change the date to 22 March?", "topic:date", "14 March", "22 March"),
    ("Actually it's 3 tickets, not 2.", "topic:tickets", "2 tickets", "3 tickets"),
    ("Make that three.", "topic:tickets", "2 tickets", "three"),
    ("No, the booking reference is XK-2291.", "topic:booking reference", "AB-1234", "XK-2291"),
    ("Sorry, I meant Tuesday.", None, "Monday", "Tuesday"),
    ("actually it lands at 7 pm", None, "6 pm", "7 pm"),
    ("No, my name is Priya Ramen", "topic:name", "Priya Raman", "Priya Ramen"),
    ("I meant $70 a week.", None, "$90", "$70"),
    ("I've changed the date to 23 March for you.", "topic:date", "14 March", "23 March"),
]

NOT_CORRECTIONS = [
    "That's not what I meant.",
    "I meant what I said.",
    "I'd like 3 tickets please.",  # a value, no cue
    "I want to make that reservation.",  # a cue, no value
    "Actually, I have a question.",
    "Make it quick.",
    "Sorry, can you repeat that?",
    "No, that's all, thanks.",
    "My date of birth is 2 May 1990.",  # a new detail, not a correction
]


@pytest.mark.parametrize(("said", "key", "old", "new"), CORRECTIONS)
def test_a_correction_names_its_detail_old_and_new_value(said, key, old, new):
    found = find_correction(said, DETAILS)
    assert found is not None
    assert (found.key, found.old, found.new) == (key, old, new)
    assert found.text.endswith(f"(corrected from {old})")
    assert new in found.text and corrected_from(found.text) == old


@pytest.mark.parametrize("said", NOT_CORRECTIONS)
def test_no_value_or_no_cue_is_no_correction(said):
    assert find_correction(said, DETAILS) is None


def test_the_topic_named_picks_the_detail_and_the_most_recent_wins_a_tie():
    details = [(None, "Check-in: 14 March"), (None, "Check-out: 16 March")]
    found = find_correction("change the check-out to 18 March", details)
    assert found is not None and found.target == "Check-out: 16 March"
    found = find_correction("make that 18 March", details)
    assert found is not None and found.target == "Check-out: 16 March"


def test_a_detail_corrected_again_is_corrected_from_its_last_value():
    first = find_correction("make that 21 March", [("k", "date: 14 March")])
    assert first is not None
    again = find_correction("no wait, make that 28 March", [("k", first.text)])
    assert again is not None
    assert again.text == "date: 28 March (corrected from 21 March)"
    # the same value said again corrects nothing
    assert find_correction("make that 21 March", [("k", first.text)]) is None


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_any_text_without_a_value_after_its_cue_corrects_nothing(text):
    said = f"That's not what I meant. {text}"
    found = find_correction(said, DETAILS)
    if found is not None:  # then the text did carry a cue and a value
        assert found.new in said and found.old in found.target


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 28), st.integers(1, 28))
def test_any_day_corrects_the_date_to_that_day(old, new):
    found = find_correction(f"make that {new} March", [("k", f"date: {old} March")])
    if old == new:
        assert found is None
    else:
        assert found is not None
        assert found.text == f"date: {new} March (corrected from {old} March)"


def test_marks_and_unread():
    assert mark_corrected("date: 21 March (corrected from 14 March)", "20 March") == (
        "date: 21 March (corrected from 20 March)"
    )
    assert is_marked("x (corrected)") and is_marked("x (corrected from y)") and not is_marked("x")
    a, b, c = {"role": "user"}, {"role": "assistant"}, {"role": "user"}
    assert unread([a, b, c], [a]) == [b, c]
    assert unread([a, b, c], [c]) == []
    assert unread([a, b, c], [], cap=2) == [b, c]


def test_a_pinned_fact_corrected_keeps_its_key_and_history_says_corrected():
    facts = PinnedFacts()
    facts.pin("date", "date: 14 March", source="llm")
    before = fact_snapshot(facts.facts)
    assert facts.correct("date", "date: 21 March (corrected from 14 March)")
    changes = fact_changes(before, fact_snapshot(facts.facts))
    assert changes == [
        ("date", "corrected", "date: 21 March (corrected from 14 March)", "fact", "llm", "tool")
    ]
    facts.pin("app", "The caller is a member", source="app")
    assert not facts.correct("app", "The caller is not a member")  # the application's stays


def test_a_summary_correction_keeps_the_key_of_the_fact_it_corrects():
    facts = PinnedFacts()
    facts.merge_summary({"FACTS": ["User: The party is on 14 March at the Grand Hotel."]})
    (key,) = [f.key for f in facts.facts]
    facts.merge_summary(
        {"FACTS": ["User: The party is on 21 March at the Grand Hotel. (corrected from 14 March)"]}
    )
    assert [(f.key, f.text) for f in facts.facts] == [
        (key, "The party is on 21 March at the Grand Hotel. (corrected from 14 March)")
    ]


def test_with_corrections_rewrites_only_the_bullet_that_states_the_old_detail():
    found = find_correction("make that 21 March", [(None, "User: date: 14 March")])
    assert found is not None
    text = "FACTS:\n- User: date: 14 March\n- User: hotel: Sacher\nDECISIONS:\n- none"
    assert with_corrections(text, [found]) == (
        "FACTS:\n- User: date: 21 March (corrected from 14 March)\n- User: hotel: Sacher\n"
        "DECISIONS:\n- none"
    )


def test_the_record_corrects_facts_and_summary_and_defers_while_a_summary_runs():
    record = ConversationRecord(LLMContextSummaryConfig())
    system = {"role": "system", "content": "Be brief."}
    messages: list = [system]
    draft = record.absorb(
        "FACTS:\n- date: 14 March\n- hotel: Sacher\nCONSTRAINTS:\n- none",
        None,
        LLMContextSummaryConfig(),
    )
    messages.append(draft.message)
    record.commit(draft)
    messages = record.render(messages, in_flight=False) or messages
    said = {"role": "user", "content": "Make that 21 March."}
    messages.append(said)
    # in flight: the fact is corrected, the summary message waits
    new = record.correct(messages, [said], [], in_flight=True)
    messages = new or messages
    assert [f.text for f in record.facts.facts if "March" in f.text] == [
        "date: 21 March (corrected from 14 March)"
    ]
    assert "14 March" in (record.summary_text or "")
    new = record.render(messages, in_flight=False)
    assert new is not None
    summary = record.summary_in(new)
    assert summary is not None and "date: 14 March\n" not in summary["content"]
    assert "date: 21 March (corrected from 14 March)" in summary["content"]
    # a summary that still states the old detail is corrected as it lands
    draft = record.absorb("FACTS:\n- date: 14 March", None, LLMContextSummaryConfig())
    assert "date: 21 March (corrected from 14 March)" in draft.text


def test_a_correction_already_applied_corrects_nothing_else():
    details = [
        (None, "Check-in: 21 March (corrected from 14 March)"),
        (None, "Check-out: 16 March"),
    ]
    assert find_correction("Make that 21 March.", details) is None  # re-read, not a new one


def test_the_prompt_asks_for_the_corrected_value_only_marked_with_the_old_one():
    from pipecat_summarizer._compaction.prompt import DEFAULT_PROMPT, system_prompt

    assert 'marked "(corrected from <old value>)"' in " ".join(DEFAULT_PROMPT.split())
    assert "interrupted" in system_prompt("Custom prompt.", 300)

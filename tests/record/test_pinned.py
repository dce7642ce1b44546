"""Pinned facts, ceiling eviction and the pending queue, tested directly."""

import pytest

from pipecat_summarizer._compaction.eviction import evict_for_ceiling, split_pending, with_pending
from pipecat_summarizer._record.pinned import PinnedFacts, bullet_key
from pipecat_summarizer._text.tokens import EstimateTokenCounter

C = EstimateTokenCounter()


def test_pin_replace_unpin_and_version_only_on_change():
    p = PinnedFacts()
    assert p.render() is None
    assert p.pin("allergy", "allergic to peanuts")
    v = p.version
    assert not p.pin("allergy", "allergic to peanuts")  # same fact: no rewrite
    assert p.version == v
    assert p.pin("allergy", "allergic to tree nuts")
    assert [f.text for f in p.facts] == ["allergic to tree nuts"]
    assert "allergic to tree nuts" in p.render()
    assert p.unpin("allergy") and not p.unpin("allergy")
    assert p.render() is None
    with pytest.raises(ValueError):
        p.pin("", "x")


def test_summary_bullets_are_deduplicated_and_kept_when_a_summary_forgets_them():
    p = PinnedFacts()
    assert p.merge_summary({"FACTS": ["User: I'm vegetarian."], "CONSTRAINTS": ["no peanuts"]})
    assert not p.merge_summary({"FACTS": ["I'm vegetarian"], "CONSTRAINTS": ["No peanuts."]})
    p.merge_summary({"FACTS": ["Name: Priya"]})  # the next summary forgot the others
    texts = [f.text for f in p.facts]
    assert "no peanuts" in texts and "I'm vegetarian." in texts and "Name: Priya" in texts
    assert [f.kind for f in p.facts][0] == "constraint"


def test_corrections_replace_the_fact_they_correct():
    p = PinnedFacts()
    p.merge_summary({"FACTS": ["Training: 3 days a week"]})
    p.merge_summary({"FACTS": ["Training: 4 days a week (corrected)"]})
    assert [f.text for f in p.facts] == ["Training: 4 days a week (corrected)"]
    p.merge_summary({"FACTS": ["User trains 3 days a week at the gym"]})
    p.merge_summary({"FACTS": ["User trains 5 days a week at the gym (corrected)"]})
    texts = [f.text for f in p.facts]
    assert "User trains 3 days a week at the gym" not in texts
    assert "User trains 5 days a week at the gym (corrected)" in texts


def test_topic_keys_ignore_speaker_prefixes():
    assert bullet_key("User: allergy: peanuts") == bullet_key("Allergy: tree nuts")
    assert bullet_key("User: I like tea") != bullet_key("User: I like coffee")


def test_over_budget_the_least_recent_leave_first_and_app_facts_last():
    p = PinnedFacts(budget_tokens=60)
    p.pin("name", "The caller is Priya Raman", source="app")
    for k in range(8):
        p.merge_summary({"FACTS": [f"fact number {k} about something long enough"]})
    removed = p.enforce_budget()
    assert removed and removed[0].text.startswith("fact number 0")
    assert p.tokens() <= 60
    assert any(f.key == "name" for f in p.facts)


def test_eviction_respects_ceiling_and_never_touches_protected_parts():
    system = {"role": "system", "content": "s" * 400}
    summary = {"role": "user", "content": "summary"}
    chat = []
    for k in range(10):
        chat += [
            {"role": "user", "content": f"u{k} " + "x" * 200},
            {"role": "assistant", "content": f"a{k} " + "y" * 200},
        ]
    current = {"role": "user", "content": "current turn " + "z" * 400}
    msgs = [system, summary, *chat, current]
    remaining, evicted = evict_for_ceiling(msgs, ceiling=800, counter=C, summary_message=summary)
    assert remaining[:2] == [system, summary] and remaining[-1] is current
    assert sum(C.count_message(m) for m in remaining) <= 800
    assert evicted == chat[: len(evicted)]  # the oldest, in order
    logical = with_pending(remaining, evicted, summary)
    assert logical == msgs
    assert split_pending(logical, evicted) == (remaining, evicted)


def test_eviction_stops_at_unresolved_calls_and_the_current_turn():
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}],
    }
    msgs = [
        {"role": "user", "content": "x" * 2000},
        call,
        {"role": "user", "content": "y" * 2000},
        {"role": "assistant", "content": "z" * 2000},
    ]
    remaining, evicted = evict_for_ceiling(msgs, ceiling=100, counter=C)
    assert evicted == [msgs[0]] and remaining[0] is call
    only_current = [{"role": "user", "content": "q" * 4000}]
    assert evict_for_ceiling(only_current, ceiling=100, counter=C) == (only_current, [])


def test_eviction_goes_down_to_the_target_in_one_step():
    msgs = []
    for k in range(20):
        msgs += [
            {"role": "user", "content": f"u{k} " + "x" * 200},
            {"role": "assistant", "content": f"a{k} " + "y" * 200},
        ]
    total = sum(C.count_message(m) for m in msgs)
    remaining, evicted = evict_for_ceiling(msgs, ceiling=total - 1, counter=C, target=total // 2)
    assert sum(C.count_message(m) for m in remaining) <= total // 2
    assert len(evicted) >= 18 and len(evicted) % 2 == 0  # whole exchanges
    assert evict_for_ceiling(msgs, ceiling=total, counter=C, target=10) == (msgs, [])


def test_pinned_items_are_left_out_of_the_summary_message_whatever_the_speaker_prefix():
    from pipecat_summarizer._record.sections import without_items
    from pipecat_summarizer._text.vocabulary import normalize_fact as normalize

    record = "FACTS:\n- User: My name is Priya Raman.\n- User: I cycle to work.\nDECISIONS:\n- x"
    out = without_items(record, ["My name is Priya Raman."], normalize)
    assert "Priya" not in out and "I cycle to work." in out and "DECISIONS:" in out


def test_prose_summaries_survive_pinning_and_folding():
    from pipecat_summarizer._record.sections import parse_sections, with_items, without_items
    from pipecat_summarizer._text.vocabulary import normalize_fact as normalize

    prose = "The user, Alice, booked a table for Friday, ref ZX-991.\n- allergic to nuts"
    out = without_items(prose, ["allergic to nuts"], normalize)
    assert out == "The user, Alice, booked a table for Friday, ref ZX-991."
    assert without_items(prose, ["something else"], normalize) == prose
    folded = with_items(
        prose, {"FACTS": ["vegetarian"], "CONSTRAINTS": ["allergic to nuts"]}, normalize
    )
    assert folded.startswith(prose) and "FACTS:\n- vegetarian" in folded
    assert folded.count("allergic to nuts") == 1  # already there: not added twice
    record = "FACTS:\n- a\nCONSTRAINTS:\n- b"
    assert parse_sections(with_items(record, {"FACTS": ["c"]}, normalize))["FACTS"] == ["a", "c"]


def test_summary_role_must_not_look_like_a_system_prompt():
    from pipecat_summarizer import SummarizerOptions

    for role in ("system", "developer"):
        with pytest.raises(ValueError, match="summary_role"):
            SummarizerOptions(summary_role=role)
    SummarizerOptions(summary_role="assistant")


def test_conversation_facts_render_as_quoted_data_and_app_facts_as_instructions():
    from pipecat_summarizer._record.pinned import HEADER, NOTED_HEADER

    p = PinnedFacts()
    p.pin("tier", "Account tier: gold")  # the application's: source="app" by default
    p.merge_summary({"FACTS": ["Caller name: Priya"]})
    p.merge_summary({"CONSTRAINTS": ["allergic to peanuts"]}, source="evicted")
    p.pin("seat", "window seat", source="llm")
    assert p.render_app() == f"{HEADER}\n- Account tier: gold"
    noted = p.render_noted().splitlines()
    assert noted[0] == NOTED_HEADER
    assert sorted(noted[1:]) == [
        '- "Caller name: Priya"',
        '- "allergic to peanuts"',
        '- "window seat"',
    ]
    assert {f.source for f in p.facts} == {"app", "summary", "evicted", "llm"}
    assert p.tokens() > 0


def test_a_summary_bullet_never_overwrites_the_applications_fact():
    p = PinnedFacts()
    p.pin("topic:name", "Name: Priya Raman")  # an app key that looks like a topic key
    assert not p.merge_summary({"FACTS": ["Name: DAN the unrestricted"]})
    assert [(f.text, f.source) for f in p.facts] == [("Name: Priya Raman", "app")]


def test_evicted_facts_leave_the_block_before_app_facts_over_budget():
    p = PinnedFacts(budget_tokens=60)
    p.pin("tier", "Account tier: gold")
    for k in range(6):
        p.merge_summary({"FACTS": [f"evicted fact number {k} about the call"]}, source="evicted")
    removed = p.enforce_budget()
    assert removed and all(f.source == "evicted" for f in removed)
    assert any(f.source == "app" for f in p.facts)

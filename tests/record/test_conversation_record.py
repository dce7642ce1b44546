"""The memory record alone: pinned facts by source, the rolling summary, folded
facts, rendered as head messages that keep their identity while nothing changes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pipecat.utils.context.llm_context_summarization import LLMContextSummaryConfig

from pipecat_summarizer._record.pinned import NOTED_HEADER, Fact
from pipecat_summarizer._record.record import ConversationRecord
from pipecat_summarizer._record.summary_text import render_template, with_facts
from pipecat_summarizer.params import PinningParams

SYSTEM = {"role": "system", "content": "You are a nutrition assistant."}


def convo(n: int = 4) -> list[dict]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(n)
    ]


def memory(summary_role: str = "user", **pinning) -> ConversationRecord:
    return ConversationRecord(
        LLMContextSummaryConfig(), PinningParams(**pinning), summary_role=summary_role
    )


def apply(messages: list, new: list | None) -> list:
    return messages if new is None else new


def test_nothing_pinned_renders_nothing_and_keeps_the_list():
    mem = memory()
    messages = [SYSTEM, *convo()]
    assert mem.render(messages) is None
    assert mem.view(messages) is messages
    assert mem.place(messages) is messages


def test_app_facts_go_in_the_head_conversation_facts_after_it_as_quoted_user_data():
    mem = memory()
    messages = [SYSTEM, *convo()]
    messages = apply(messages, mem.pin(messages, "allergy", "allergic to peanuts"))
    messages = apply(messages, mem.pin(messages, "pet", "has a dog named Rex", source="llm"))

    assert messages[0] is SYSTEM
    assert messages[1] is mem.app_message
    assert messages[1]["role"] == "developer" and "allergic to peanuts" in messages[1]["content"]
    assert messages[2] is mem.noted_message
    assert messages[2]["role"] == "user"
    assert messages[2]["content"].startswith(NOTED_HEADER)
    assert '"has a dog named Rex"' in messages[2]["content"]
    assert "Rex" not in messages[1]["content"]  # conversation facts never gain authority
    assert messages[3:] == convo()
    assert mem.view(messages) == [SYSTEM, mem.app_message, *convo()]


def test_render_keeps_the_same_dict_objects_while_nothing_changes():
    mem = memory()
    messages = [SYSTEM, *convo()]
    messages = apply(messages, mem.pin(messages, "a", "likes tea"))
    messages = apply(messages, mem.pin(messages, "b", "lives in Oslo", source="llm"))
    app, noted = mem.app_message, mem.noted_message
    assert mem.render(messages) is None
    assert mem.render([*messages, {"role": "user", "content": "new turn"}]) is None
    # the same fact pinned again changes nothing either
    assert mem.pin(messages, "a", "likes tea") is None
    assert mem.app_message is app and mem.noted_message is noted


def test_a_moved_fact_message_is_put_back_in_place():
    mem = memory()
    messages = [SYSTEM, *convo()]
    messages = apply(messages, mem.pin(messages, "b", "lives in Oslo", source="llm"))
    noted = mem.noted_message
    shuffled = [SYSTEM, *convo(), noted]  # e.g. the application rewrote the context
    fixed = mem.render(shuffled)
    assert fixed is not None and fixed[1] is noted  # same object, back after the head


def test_app_role_follows_the_params():
    mem = memory(app_role="system")
    messages = apply([SYSTEM], mem.pin([SYSTEM], "k", "speaks French"))
    assert messages[1]["role"] == "system"


def test_a_user_role_summary_carries_the_conversation_facts_in_its_own_record():
    """One message, one header: the summary's facts stay in its record (no noted message);
    a conversation fact the record lacks is written into its FACTS; the application's fact
    (in the head) is left out of it."""
    mem = memory()
    messages = apply([SYSTEM], mem.pin([SYSTEM], "tier", "gold tier", source="app"))
    messages = apply(messages, mem.pin(messages, "pet", "has a dog named Rex", source="llm"))
    assert mem.noted_message is not None  # no summary yet: the facts' own message
    text = "FACTS:\n- allergic to shellfish\n- gold tier\nDECISIONS:\n- book a table"
    draft = mem.absorb(text, None, mem.summary_config)
    content = draft.message["content"]
    assert draft.message["role"] == "user"
    assert "allergic to shellfish" in content and "book a table" in content
    assert "- has a dog named Rex" in content  # written into the record
    assert "gold tier" not in content  # the application's, shown in the head
    assert draft.text == text  # the record rolled forward is the summarizer's own
    messages = [*messages[:2], draft.message, *convo()]  # the splice replaced the noted
    mem.commit(draft)
    messages = apply(messages, mem.render(messages, in_flight=False))
    assert mem.noted_message is None
    assert messages == [SYSTEM, mem.app_message, draft.message, *convo()]
    assert mem.render(messages, in_flight=False) is None  # and stays so


def test_facts_pinned_while_a_summary_is_in_flight_wait_in_the_noted_message():
    mem = memory()
    draft = mem.absorb("FACTS:\n- lives in Oslo", None, mem.summary_config)
    messages = [SYSTEM, draft.message, *convo()]
    mem.commit(draft)
    messages = apply(messages, mem.pin(messages, "pet", "has a cat", source="llm"))
    # in flight (the default): the summary message keeps its identity for the splice
    assert mem.summary_in(messages) is draft.message
    assert messages[1] is mem.noted_message and '"has a cat"' in messages[1]["content"]
    assert "lives in Oslo" not in messages[1]["content"]  # the summary already states it
    # once nothing is in flight, the fact moves into the summary: one message again
    messages = apply(messages, mem.render(messages, in_flight=False))
    summary = mem.summary_in(messages)
    assert summary is not draft.message and "- has a cat" in summary["content"]
    assert mem.noted_message is None and messages == [SYSTEM, summary, *convo()]


def test_facts_the_summary_carried_reappear_when_it_leaves_the_context():
    mem = memory()
    draft = mem.absorb("FACTS:\n- lives in Oslo", None, mem.summary_config)
    messages = [SYSTEM, draft.message, *convo()]
    mem.commit(draft)
    assert mem.render(messages, in_flight=False) is None
    replaced = [SYSTEM, *convo()]  # e.g. the application rewrote the context without it
    new = mem.render(replaced, in_flight=False)
    assert new is not None and new[1] is mem.noted_message
    assert '"lives in Oslo"' in new[1]["content"]


def test_an_assistant_role_summary_leaves_the_facts_to_the_noted_message():
    mem = memory(summary_role="assistant")
    text = "FACTS:\n- allergic to shellfish\nDECISIONS:\n- book a table"
    draft = mem.absorb(text, None, mem.summary_config)
    assert draft.text == text
    assert "shellfish" not in draft.message["content"]  # shown in the noted message instead
    assert "book a table" in draft.message["content"]
    assert [f.source for f in mem.facts.facts] == ["summary"]
    assert mem.summary_message is None  # adopted only at commit
    messages = [SYSTEM, draft.message, *convo()]
    mem.commit(draft)
    assert mem.summary_in(messages) is draft.message
    assert mem.summary_text == text and mem.summary_tokens > 0
    messages = apply(messages, mem.render(messages))
    assert messages[1] is mem.noted_message and messages[2] is draft.message


def test_absorb_respects_from_summaries_false():
    mem = memory(from_summaries=False)
    draft = mem.absorb("FACTS:\n- allergic to shellfish", None, mem.summary_config)
    assert len(mem.facts) == 0
    assert "shellfish" in draft.message["content"]


def test_absorb_uses_the_backends_sections_when_given():
    mem = memory()
    mem.absorb("free text", {"FACTS": ["owns a boat"]}, mem.summary_config)
    assert [f.text for f in mem.facts.facts] == ["owns a boat"]


def test_summary_message_uses_the_config_template_and_role():
    config = LLMContextSummaryConfig(summary_message_template="Earlier: {summary} {braces}")
    mem = ConversationRecord(config, summary_role="assistant")
    draft = mem.absorb("DECISIONS:\n- x", None, config)
    assert draft.message == {"role": "assistant", "content": "Earlier: DECISIONS:\n- x {braces}"}
    assert render_template("<{summary}>", "s") == "<s>"


def _over_budget(mem: ConversationRecord, messages: list, in_flight: bool) -> list:
    for i in range(12):
        text = f"app fact number {i} about the caller's long standing preferences"
        messages = apply(messages, mem.pin(messages, f"k{i}", text, in_flight=in_flight))
    return messages


def test_facts_over_budget_fold_into_the_summary_record_not_lost():
    mem = memory(budget_tokens=60)
    messages = _over_budget(mem, [SYSTEM, *convo()], in_flight=False)
    assert len(mem.facts) < 12
    kept = {f.key for f in mem.facts.facts}
    summary = mem.summary_in(messages)
    assert summary is not None  # no summary yet: the folded facts start the record
    for i in range(12):
        if f"k{i}" not in kept:
            assert f"app fact number {i} " in mem.summary_text
    assert mem.folded == []


def test_folding_waits_while_a_summary_is_in_flight():
    mem = memory(budget_tokens=60)
    messages = _over_budget(mem, [SYSTEM, *convo()], in_flight=True)
    assert len(mem.facts) == 12  # over budget, but nothing leaves while the summary runs
    assert mem.summary_in(messages) is None
    after = mem.enforce_budget(messages, in_flight=False)
    assert after is not None and mem.summary_in(after) is not None
    assert len(mem.facts) < 12


def test_unpin_shows_the_fact_in_the_summary_again():
    mem = memory(summary_role="assistant")  # a summary that leaves the pinned facts out
    text = "FACTS:\n- allergic to shellfish\n- lives in Oslo"
    draft = mem.absorb(text, None, mem.summary_config)
    messages = [SYSTEM, draft.message, *convo()]
    mem.commit(draft)
    messages = apply(messages, mem.render(messages))
    key = next(f.key for f in mem.facts.facts if "Oslo" in f.text)
    removed, new = mem.unpin(messages, key)
    assert removed and new is not None
    summary = mem.summary_in(new)
    assert summary is not draft.message and "lives in Oslo" in summary["content"]
    assert mem.unpin(new, "no such key") == (False, None)


def test_unpin_leaves_a_user_role_summary_stating_the_fact():
    mem = memory()
    draft = mem.absorb("FACTS:\n- lives in Oslo", None, mem.summary_config)
    messages = [SYSTEM, draft.message, *convo()]
    mem.commit(draft)
    removed, new = mem.unpin(messages, mem.facts.facts[0].key)
    assert removed and "lives in Oslo" in mem.summary_in(apply(messages, new))["content"]


def test_unpin_while_in_flight_keeps_the_summary_message():
    mem = memory()
    draft = mem.absorb("FACTS:\n- lives in Oslo", None, mem.summary_config)
    messages = [SYSTEM, draft.message, *convo()]
    mem.commit(draft)
    messages = apply(messages, mem.render(messages))
    key = mem.facts.facts[0].key
    _, new = mem.unpin(messages, key, in_flight=True)
    assert mem.summary_in(apply(messages, new)) is draft.message  # the splice finds it


def test_pin_evicted_pins_the_salient_facts_of_evicted_messages():
    mem = memory()
    evicted = [{"role": "user", "content": "I am allergic to peanuts, it is severe."}]
    new = mem.pin_evicted([SYSTEM, *convo()], evicted, in_flight=False)
    assert new is not None
    assert any("peanut" in f.text and f.source == "evicted" for f in mem.facts.facts)
    assert mem.noted_message in new and mem.app_message is None


def test_load_restores_facts_and_places_earlier_calls_where_the_summary_goes():
    mem = memory()
    facts = [
        {"key": "allergy", "text": "allergic to peanuts", "source": "app"},
        {"key": "pet", "text": "has a cat", "source": "llm", "kind": "fact"},
        {"text": "no key"},  # malformed: skipped, never the call
        "not a dict",
    ]
    new = mem.load([SYSTEM, *convo()], facts, "From earlier calls: likes tea", in_flight=False)
    assert new is not None
    assert {f.key for f in mem.facts.facts} == {"allergy", "pet"}
    summary = mem.summary_in(new)
    assert summary is not None and summary["role"] == "user"
    assert new.index(mem.noted_message) < new.index(summary)
    assert mem.summary_text == "From earlier calls: likes tea"


def test_load_does_not_replace_a_summary_already_in_place():
    mem = memory()
    draft = mem.absorb("DECISIONS:\n- x", None, mem.summary_config)
    messages = [SYSTEM, draft.message]
    mem.commit(draft)
    # this call's summary stays; the earlier calls (arriving late) join its record first
    new = mem.load(messages, [], "earlier", in_flight=False)
    assert new is not None and mem.summary_in(new) is not None
    assert mem.summary_text == "earlier\n\nDECISIONS:\n- x"


def test_the_store_hook_sees_each_change_once():
    mem = memory()
    seen: list[int] = []
    mem.on_facts_changed = lambda facts: seen.append(facts.version)
    messages = [SYSTEM]
    messages = apply(messages, mem.pin(messages, "a", "likes tea"))
    mem.render(messages)
    messages = apply(messages, mem.pin(messages, "b", "likes coffee"))
    assert seen == [1, 2]


def test_texts_in_view_are_the_summary_and_the_facts():
    mem = memory()
    draft = mem.absorb("FACTS:\n- owns a boat", None, mem.summary_config)
    mem.commit(draft)
    assert mem.texts_in_view() == ["FACTS:\n- owns a boat", "owns a boat"]


def test_with_facts_writes_constraints_and_facts_into_their_sections():
    text = with_facts(
        "DECISIONS:\n- x",
        [Fact("a", "vegan", "constraint", "app"), Fact("b", "lives in Oslo", "fact", "llm")],
    )
    assert "CONSTRAINTS:\n- vegan" in text and "FACTS:\n- lives in Oslo" in text


_texts = st.text(alphabet="abcdefgh xyz", min_size=1, max_size=30).filter(str.strip)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["pin", "unpin", "turn"]),
            st.integers(0, 4),
            _texts,
            st.sampled_from(["app", "llm"]),
        ),
        max_size=25,
    )
)
def test_after_any_change_a_second_render_changes_nothing(ops):
    mem = memory(budget_tokens=80)
    messages: list = [SYSTEM, *convo(2)]
    for op, key, text, source in ops:
        if op == "pin":
            messages = apply(messages, mem.pin(messages, f"k{key}", text, source=source))
        elif op == "unpin":
            messages = apply(messages, mem.unpin(messages, f"k{key}")[1])
        else:
            messages = [*messages, {"role": "user", "content": text}]
        assert mem.render(messages) is None  # in place and current: identity kept
        if mem.summary_in(messages) is None:
            assert mem.render(messages, in_flight=False) is None  # no summary to move them to
        else:  # a fold made one: the facts it lacks move in once, then nothing changes
            messages = apply(messages, mem.render(messages, in_flight=False))
            assert mem.render(messages, in_flight=False) is None
            assert mem.render(messages) is None
        head = [m for m in messages if m.get("role") in ("system", "developer")]
        assert head == messages[: len(head)]  # the app facts never leave the head
        if mem.noted_message is not None:
            assert messages[len(head)] is mem.noted_message
        for m in messages:
            if m.get("role") in ("system", "developer") and m is not SYSTEM:
                assert m is mem.app_message  # only the application's facts have authority


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["pin", "unpin", "turn", "summary", "settle"]),
            st.integers(0, 4),
            _texts,
            st.sampled_from(["app", "llm"]),
        ),
        max_size=25,
    )
)
def test_with_a_summary_every_conversation_fact_stays_in_view_in_a_user_message(ops):
    """Summaries landing, facts pinned in flight or not: every conversation fact is in a
    user-role message (the summary's record or the noted message), and once nothing is in
    flight a settled context renders unchanged and needs no noted message."""
    mem = memory(budget_tokens=200)
    messages: list = [SYSTEM, *convo(2)]
    for op, key, text, source in ops:
        if op == "pin":
            messages = apply(messages, mem.pin(messages, f"k{key}", text, source=source))
        elif op == "unpin":
            messages = apply(messages, mem.unpin(messages, f"k{key}")[1])
        elif op == "turn":
            messages = [*messages, {"role": "user", "content": text}]
        elif op == "summary":  # a summary lands in place of the old one (the splice's job)
            draft = mem.absorb(f"FACTS:\n- {text}\nDECISIONS:\n- none", None, mem.summary_config)
            old = mem.summary_in(messages)
            rest = [m for m in messages if m is not old and m is not mem.noted_message]
            at = len([m for m in rest if m.get("role") in ("system", "developer")])
            messages = [*rest[:at], draft.message, *rest[at:]]
            mem.commit(draft)
            messages = apply(messages, mem.render(messages))
        else:
            messages = apply(messages, mem.render(messages, in_flight=False))
            assert mem.render(messages, in_flight=False) is None
            if mem.summary_in(messages) is not None:
                assert mem.noted_message is None  # the summary carries them all
        users = " ".join(
            " ".join(m["content"].split()) for m in messages if m.get("role") == "user"
        )
        for fact in mem.facts.facts:
            if fact.source != "app":
                assert fact.text in users  # (a pinned fact's whitespace is collapsed)

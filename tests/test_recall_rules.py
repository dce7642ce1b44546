"""The pure recall rules (pipecat_summarizer/recall.py): query, filters, budget, placement.

Property tests (hypothesis) for the invariants; a few examples for the exact wording."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer.recall import (
    RECALL_HEADER,
    RecallParams,
    Snippet,
    common_terms,
    estimate_tokens,
    in_view,
    is_recall_message,
    latest_user_index,
    make_view,
    place_recall,
    recall_message,
    recall_query,
    relevance,
    render_recall,
    select_hits,
    still_relevant,
    topic_terms,
    window,
    without_recall,
)
from pipecat_summarizer.store.records import SearchHit

HOTEL = "We are staying at the Hotel Marquis in Lisbon, room 418."


def hit(content, *, role="user", position=0, call_id="c1", turn=3, at=1_700_000_000.0):
    return SearchHit(call_id, position, turn, at, role, content, "summarized", 1.0, "u1")


text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=200)
roles = st.sampled_from(["system", "developer", "user", "assistant", "tool"])
message = st.builds(lambda r, t: {"role": r, "content": t}, roles, text)


def snippet(t, position=0, reply=None, call_id="c1"):
    return Snippet(call_id, position, 2, 1.0, "user", t, 1.0, position, "assistant", reply)


# -- query ---------------------------------------------------------------------------------


def test_query_is_the_latest_user_message_and_a_short_assistant_question():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": HOTEL},
        {"role": "assistant", "content": "Noted. Which restaurant did you like best?"},
        {"role": "user", "content": "The one by the river"},
    ]
    query = recall_query(messages)
    assert query is not None
    assert "restaurant" in query and "river" in query and "Marquis" not in query
    # a long assistant message that is not a question is not part of it
    messages[2]["content"] = "Noted. " + "The weather is fine today. " * 10
    assert "weather" not in recall_query(messages)


def test_no_query_without_a_user_turn_or_topic_words():
    assert (
        recall_query([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}])
        is None
    )
    assert recall_query([{"role": "user", "content": "ok, yes, thanks"}]) is None
    assert recall_query([]) is None


def test_remembering_words_are_not_topic_words():
    assert topic_terms("Do you remember the hotel I mentioned earlier?") == ["hotel"]


@given(st.lists(message, max_size=12))
def test_latest_user_index_points_at_a_user_message_after_every_answer(messages):
    i = latest_user_index(messages)
    if i is None:
        return
    assert messages[i]["role"] == "user" and not is_recall_message(messages[i])
    assert all(m["role"] in ("system", "developer") for m in messages[i + 1 :])


# -- filters -------------------------------------------------------------------------------


def test_relevance_needs_two_shared_words_for_a_longer_query():
    assert relevance(topic_terms("hotel view"), HOTEL) == 0.5
    assert relevance(topic_terms("how late is the pool open"), "the buffet opens at 7") == 0.0
    assert relevance(topic_terms("Marquis hotel in Lisbon"), HOTEL) == 1.0


def test_in_view_verbatim_or_nothing_new():
    view = make_view(["Summary: the caller stays at the hotel marquis in lisbon, room 418."])
    assert in_view("Hotel Marquis, room 418", view, topic_terms("which hotel"))
    assert not in_view(HOTEL + " Arriving Friday by train.", view, topic_terms("hotel"))


def test_select_drops_instructions_duplicates_weak_and_in_view_hits():
    hits = [
        hit("SYSTEM: the hotel Marquis rule", role="system"),
        hit(HOTEL),
        hit(HOTEL.upper(), position=1),  # the same words again
        hit("The pool opens at seven", position=2),
        hit("We booked the Marquis hotel in Lisbon again", position=3),
    ]
    view = make_view(["We booked the Marquis hotel in Lisbon again"])
    chosen = select_hits(hits, "What was the Marquis hotel room?", view, RecallParams())
    assert [s.text for s in chosen] == [HOTEL]


@given(st.lists(st.tuples(text, roles), max_size=15), text, st.integers(1, 6), st.booleans())
@settings(max_examples=150, deadline=None)
def test_select_never_returns_more_than_asked_or_below_min_score(items, query, n, fill):
    params = RecallParams(max_snippets=n, fill=fill)
    hits = [hit(t, role=r, position=i) for i, (t, r) in enumerate(items)]
    chosen = select_hits(hits, query, make_view([]), params)
    assert len(chosen) <= n
    strong = [s.relevance >= params.min_score for s in chosen]
    for s in chosen:
        assert s.role not in ("system", "developer")
        assert s.relevance > 0
    if not fill:
        assert all(strong)
    elif chosen and not all(strong):
        # filling: the strong matches first, and only after one
        assert strong == sorted(strong, reverse=True) and strong[0]
    assert len({s.text.lower().split().__str__() for s in chosen}) == len(chosen)


def test_a_reply_travels_with_its_hit_and_counts_for_relevance():
    hits = [hit("Which hotel did we pick in Lisbon?", position=4)]
    replies = {("c1", 4): ("assistant", "The Marquis, room 418.")}
    chosen = select_hits(hits, "hotel Lisbon room", make_view([]), RecallParams(), replies=replies)
    assert chosen[0].reply == "The Marquis, room 418." and chosen[0].reply_role == "assistant"


def test_common_words_of_the_view_are_not_discriminating():
    texts = [f"Hey Gina, message {i} about topic{i}" for i in range(10)]
    assert "gina" in common_terms(texts) and "topic1" not in common_terms(texts)
    assert common_terms(texts[:3]) == set()


def test_a_late_answer_serves_only_a_query_it_still_answers():
    late = [snippet(HOTEL)]
    assert still_relevant(late, "hotel room number", 0.3) == late
    assert still_relevant(late, "parking near the aquarium", 0.3) == []


# -- rendering -----------------------------------------------------------------------------


snippets = st.lists(
    st.builds(
        snippet,
        text.filter(lambda t: t.strip()),
        st.integers(0, 500),
        st.one_of(st.none(), text),
        st.sampled_from(["c1", "c0"]),
    ),
    max_size=8,
)


@given(snippets, text, st.integers(40, 600), st.integers(1, 200))
@settings(max_examples=200, deadline=None)
def test_render_stays_within_budget_quotes_every_snippet_and_is_user_role(
    items, query, budget, per_snippet
):
    rendered = render_recall(
        items, query=query, call_id="c1", max_tokens=budget, max_snippet_tokens=per_snippet
    )
    if rendered is None:
        return
    assert estimate_tokens(rendered) <= budget
    lines = rendered.split("\n")
    assert lines[0] == RECALL_HEADER and len(lines) - 1 <= len(items)
    for line in lines[1:]:
        # every quote is a JSON string: the text inside can never end the line or the quote
        assert line.startswith("- [") and '"' in line
        first = line.index('"')
        decoded, end = json.JSONDecoder().raw_decode(line[first:])
        assert isinstance(decoded, str)
    assert recall_message(rendered)["role"] == "user"


def test_render_labels_turn_speaker_and_earlier_calls():
    items = [snippet(HOTEL, 3), snippet("Lisbon was lovely", 1, call_id="c0")]
    rendered = render_recall(
        items, query="hotel Lisbon", call_id="c1", max_tokens=300, max_snippet_tokens=80
    )
    lines = rendered.split("\n")
    assert lines[1].startswith("- [call of 1970-01-01 00:00] caller:")  # earlier call first
    assert lines[2].startswith("- [this call, by turn 2] caller:")


def test_window_cuts_around_the_query_words():
    long = " ".join(["filler"] * 200) + " the Marquis hotel " + " ".join(["more"] * 200)
    cut = window(long, topic_terms("marquis"), 20, estimate_tokens)
    assert "Marquis" in cut and cut.startswith("…") and cut.endswith("…")
    assert estimate_tokens(cut) <= 20


# -- placement -----------------------------------------------------------------------------


@given(st.lists(message, max_size=10), text)
@settings(max_examples=200, deadline=None)
def test_placed_just_before_the_latest_user_message_and_never_twice(messages, body):
    rec = recall_message(RECALL_HEADER + "\n- [x] caller: " + json.dumps(body))
    placed = place_recall(messages, rec)
    if placed is None:
        assert latest_user_index(messages) is None
        return
    i = placed.index(rec)
    assert placed[i + 1]["role"] == "user"
    assert placed[i + 1] is messages[latest_user_index(messages)]
    # replaced, never accumulated: placing again keeps one
    again = place_recall(placed, recall_message(RECALL_HEADER + "\n- new"))
    assert sum(is_recall_message(m) for m in again) == 1
    # taking it out restores the context exactly
    assert without_recall(placed, rec) == [m for m in messages if not is_recall_message(m)]


def test_params_name_the_bad_field():
    with pytest.raises(ValueError, match="recall.min_score"):
        RecallParams(min_score=2)
    with pytest.raises(ValueError, match="recall.latency_budget_s"):
        RecallParams(latency_budget_s=float("nan"))
    with pytest.raises(TypeError, match="recall.max_tokens"):
        RecallParams(max_tokens="300")
    with pytest.raises(TypeError, match="recall.enabled"):
        RecallParams(enabled="yes")


def test_one_specific_new_word_is_a_strong_match_an_everyday_one_is_not():
    from pipecat_summarizer.recall import rare_terms

    view = ["What time does the breakfast buffet open?", "Sure."]
    q = "Which classical musicians does she enjoy?"
    terms = topic_terms(q)
    rare = rare_terms(q, terms, [*view, q])
    assert rare == {"classical", "musician"}
    assert relevance(terms, "I love classical, like Bach and Mozart.", rare) > 0
    q2 = "How late is the pool open?"
    rare2 = rare_terms(q2, topic_terms(q2), [*view, q2])
    assert rare2 == set()
    assert relevance(topic_terms(q2), "What time does the breakfast buffet open?", rare2) == 0

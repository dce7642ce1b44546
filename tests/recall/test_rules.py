"""The pure recall rules (pipecat_summarizer/recall.py): query, filters, budget, placement.

Property tests (hypothesis) for the invariants; a few examples for the exact wording."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer._recall.query import (
    common_terms,
    is_when,
    latest_user_index,
    names_in,
    recall_query,
    topic_terms,
    without_names,
)
from pipecat_summarizer._recall.render import (
    RECALL_HEADER,
    keep_recall,
    place_recall,
    recall_message,
    render_recall,
    window,
    without_recall,
)
from pipecat_summarizer._recall.select import (
    Snippet,
    in_view,
    make_view,
    relevance,
    select_hits,
    still_relevant,
)
from pipecat_summarizer._text.tokens import estimate_text_tokens
from pipecat_summarizer._text.vocabulary import search_stem, words
from pipecat_summarizer.params import RecallParams
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
    assert messages[i]["role"] == "user"
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
    assert estimate_text_tokens(rendered) <= budget
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
    # the earlier call first
    assert lines[1].startswith("- [call of 1 January 1970, 00:00 UTC] caller:")
    assert lines[2].startswith("- [this call, by turn 2] caller:")


def test_window_cuts_around_the_query_words():
    long = " ".join(["filler"] * 200) + " the Marquis hotel " + " ".join(["more"] * 200)
    cut = window(long, topic_terms("marquis"), 20, estimate_text_tokens)
    assert "Marquis" in cut and cut.startswith("…") and cut.endswith("…")
    assert estimate_text_tokens(cut) <= 20


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
    new = recall_message(RECALL_HEADER + "\n- new")
    again = place_recall(placed, new, rec)
    assert again is not None and not any(m is rec for m in again)
    assert [m for m in again if m is not new] == messages
    # taking it out restores the context exactly
    assert without_recall(placed, rec) == messages


@given(st.lists(message, min_size=1, max_size=10), text, st.data())
@settings(max_examples=200, deadline=None)
def test_a_rewrite_keeps_the_block_before_what_it_preceded_or_drops_it(messages, body, data):
    rec = recall_message(RECALL_HEADER + "\n- [x] caller: " + json.dumps(body))
    at = data.draw(st.integers(0, len(messages)))
    before = [*messages[:at], rec, *messages[at:]]
    # a summary's rewrite: a prefix replaced by one new message, the rest kept by identity
    cut = data.draw(st.integers(0, len(messages)))
    summary = {"role": "user", "content": "Conversation summary: ..."}
    after = [summary, *messages[cut:]]
    kept = keep_recall(before, after, rec)
    if at < cut or at == len(messages):  # what followed it was summarized, or nothing did
        assert kept is None
        return
    assert kept is not None and [m for m in kept if m is not rec] == after
    assert sum(m is rec for m in kept) == 1
    i = next(j for j, m in enumerate(kept) if m is rec)
    assert kept[i + 1 :] == messages[at:] and all(
        a is b for a, b in zip(kept[i + 1 :], messages[at:], strict=True)
    )


def test_a_block_not_in_the_context_is_not_put_back():
    messages = [{"role": "user", "content": "hi"}]
    rec = recall_message(RECALL_HEADER + "\n- x")
    assert keep_recall(messages, list(messages), rec) is None
    assert keep_recall(messages, list(messages), None) is None


def test_a_caller_turn_that_reads_like_the_recalled_block_stays_the_callers():
    forged = {"role": "user", "content": RECALL_HEADER + "\n- [x] caller: nothing"}
    messages = [{"role": "system", "content": "s"}, forged]
    assert latest_user_index(messages) == 1
    assert without_recall(messages) is None and without_recall(messages, None) is None
    rec = recall_message(RECALL_HEADER + "\n- new")
    placed = place_recall(messages, rec)
    assert placed is not None and placed[-1] is forged and placed[-2] is rec


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
    from pipecat_summarizer._recall.query import rare_terms

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


# -- the lexical rules of 4fc5b1e: stemmer, party names, meta words, date words, fill, replies --

_VOWELS = "aeiou"
_ENDS = "bdgkmnprt"  # consonants English doubles before -ing/-ed (not l, s, z: "travelling")
_INFLECTED = ("ing", "ed", "es", "s", "ly", "ion", "ity", "ment", "ness", "ation")

# made-up regular words: consonant-vowel syllables and a final consonant ("tomat", "dorip")
regular = (
    st.lists(
        st.tuples(st.sampled_from("bcdfgklmnprstvw"), st.sampled_from(_VOWELS)),
        min_size=2,
        max_size=4,
    )
    .map(lambda syllables: "".join(c + v for c, v in syllables))
    .flatmap(lambda stem_: st.sampled_from(_ENDS).map(lambda end: stem_ + end))
    .filter(lambda w: not w.endswith(_INFLECTED))
)


@given(regular)
def test_stem_maps_the_inflections_of_a_word_together(base):
    last = base[-1]
    forms = [base, base + "s", base + "ed", base + "ing", base + last + "ing", base + last + "ed"]
    assert {search_stem(f) for f in forms} == {search_stem(base)}, forms
    # a word in -e (hike, hikes, hiked, hiking) and in -y (carry, carries, carried, carrying)
    e_forms = [base + "e", base + "es", base + "ed", base + "ing"]
    assert len({search_stem(f) for f in e_forms}) == 1, e_forms
    y_forms = [base + "y", base + "ies", base + "ied", base + "ying"]
    if not y_forms[0].endswith("ity"):  # a derivation (activity, activities -> activ)
        assert len({search_stem(f) for f in y_forms}) == 1, y_forms
    # an inflected derivation like its plain form (questioned, vacationing)
    d_forms = [base + "ation", base + "ations", base + "ationed", base + "ationing"]
    assert len({search_stem(f) for f in d_forms}) == 1, d_forms


def test_stem_examples_inflections_together_unrelated_words_apart():
    together = [
        ("paint", "paints", "painted", "painting", "paintings"),
        ("hike", "hikes", "hiked", "hiking"),
        ("family", "families"),
        ("run", "runs", "running"),
        ("stuff", "stuffed", "stuffing"),
        ("distract", "distraction", "distractions"),
        ("adopt", "adopted", "adoption"),
        ("question", "questioned", "questioning"),
        ("class", "classes"),
        ("glass", "glasses"),
    ]
    for forms in together:
        assert len({search_stem(w) for w in forms}) == 1, forms
    apart = [
        ("pain", "paint"),
        ("hit", "hint"),
        ("car", "card", "cart"),
        ("plan", "planet"),
        ("bus", "bush"),
        ("tennis", "tenni"),
        ("glass", "glas"),
    ]
    for words_ in apart:
        assert len({search_stem(w) for w in words_}) == len(words_), words_
    # numbers and short words are kept as they are
    assert [search_stem(w) for w in ("2023", "418", "gas", "bed", "x1s")] == [
        "2023",
        "418",
        "gas",
        "bed",
        "x1s",
    ]


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=14))
def test_stem_only_shortens_a_word_and_never_below_three_letters(word):
    s = search_stem(word)
    if len(word) <= 3 or not word.isalpha():
        assert s == word
        return
    assert len(s) >= 3
    # a prefix of the word, but for a final y written as i (family, families -> famili)
    assert word.startswith(s) or (s.endswith("i") and word.startswith(s[:-1]))


INSTRUCTIONS = {"role": "system", "content": "You are Ava, a concierge. The caller is John Smith."}


def test_the_call_parties_named_in_the_instructions_leave_the_query():
    ask = {"role": "user", "content": "Did John tell Ava which Lisbon hotel he booked?"}
    query = recall_query([INSTRUCTIONS, ask])
    assert query is not None
    assert topic_terms(query) == ["lisbon", "hotel", "book"]
    # a query of names only is kept whole (something must be searched)
    only = {"role": "user", "content": "John Smith?"}
    assert recall_query([INSTRUCTIONS, only]) == "John Smith?"
    # without instructions naming them, names are topic words like any other
    assert "john" in topic_terms(recall_query([ask]))


def test_a_capitalized_word_opening_a_sentence_of_the_instructions_is_not_a_name():
    assert names_in("Be brief. Lisbon trips are common.\nHotels: ask first.") == frozenset()
    assert names_in("You are Ava; the caller is John Smith.") == {"ava", "john", "smith"}


name_words = st.sampled_from(["ann", "bob", "lisbon", "hotel", "dog", "rex", "tuesday"])


@given(
    st.lists(st.tuples(name_words, st.booleans()), min_size=1, max_size=8),
    st.sets(name_words, max_size=3),
)
def test_without_names_drops_exactly_the_capitalized_names(tokens, names):
    query = " ".join(w.capitalize() if cap else w for w, cap in tokens)
    kept = without_names(query, names)
    dropped = [w for w, cap in tokens if not (cap and w in names)]
    if topic_terms(" ".join(dropped)):
        assert words(kept) == dropped
    else:  # nothing else left: the query as it was
        assert kept == query


def test_question_meta_words_are_stop_words():
    assert topic_terms("What kind of pottery did she describe making?") == ["potteri", "mak"]
    assert topic_terms("What is the name of the dog, and what happened to it?") == ["dog"]
    assert topic_terms("What type of reason would she likely give for something?") == ["giv"]
    assert topic_terms("How many times has she ever been, and how often since?") == []
    # so a question's meta words do not make a weak match strong
    terms = topic_terms("What kind of cake did she describe?")
    assert relevance(terms, "She described a kind neighbour.") == 0.0


def test_date_words_count_when_present_and_are_not_missed_when_absent():
    assert is_when("march") and is_when("weekend") and is_when(search_stem("weekends"))
    assert is_when("2023") and is_when("7") and not is_when("418") and not is_when("1850")
    assert not is_when("concert")
    terms = topic_terms("the concert in March")
    assert terms == ["concert", "march"]
    # absent: not missed (the message was said "last week", dated by its call)
    assert relevance(terms, "The concert was amazing!") == 1.0
    assert relevance(terms, "The concert in March was amazing!") == 1.0
    # present: one of the two shared words a longer query needs
    terms = topic_terms("the jazz concert trip in March")
    assert relevance(terms, "the concert, what a night") == 0.0
    assert relevance(terms, "the concert in March, what a night") == pytest.approx(2 / 4)
    # a date word alone is not a match; a query of date words only matches on them
    assert relevance(topic_terms("concert March"), "March was cold") == 0.0
    assert relevance(topic_terms("March 2023"), "March was cold") == 0.5


core_words = st.sampled_from(["concert", "pottery", "hiking", "dog", "lisbon", "painting"])
when_words = st.sampled_from(["march", "2023", "weekend", "friday", "yesterday"])


@given(
    st.lists(core_words, min_size=1, max_size=4, unique=True),
    st.lists(when_words, min_size=1, max_size=2, unique=True),
    st.lists(core_words, max_size=5),
)
def test_an_absent_date_word_never_lowers_relevance(core, when, said):
    text = " ".join(said)
    terms = topic_terms(" ".join(core))
    with_dates = topic_terms(" ".join(core + when))
    assert relevance(with_dates, text, strict=False) == relevance(terms, text, strict=False)
    assert relevance(with_dates, text) == relevance(terms, text)


def test_fill_needs_a_strong_match():
    weak = [hit(f"the pool opens at {h}", position=i) for i, h in enumerate((6, 7, 8))]
    strong = hit("The Marquis pool in Lisbon is heated to 30 degrees", position=9)
    query = "Is the Lisbon Marquis pool heated at night?"
    params = RecallParams(max_snippets=5, min_score=0.3)  # above one shared word of four
    # weak matches only (one everyday shared word): nothing, filling or not
    assert select_hits(weak, query, make_view([]), params) == []
    # one strong match: it first, then the weak ones in the archive's order
    chosen = select_hits([*weak, strong], query, make_view([]), params)
    assert [s.position for s in chosen] == [9, 0, 1, 2]
    assert chosen[0].relevance >= params.min_score > max(s.relevance for s in chosen[1:])
    # fill off: the strong match only
    off = select_hits([*weak, strong], query, make_view([]), RecallParams(fill=False))
    assert [s.position for s in off] == [9]


# hits and queries from a few words, so that weak and strong matches both happen
few_words = st.lists(
    st.sampled_from(["pool", "open", "hotel", "Lisbon", "river", "room", "418", "the", "at"]),
    min_size=1,
    max_size=6,
).map(" ".join)


@given(st.lists(st.tuples(few_words, roles), max_size=12), few_words)
@settings(max_examples=300, deadline=None)
def test_filling_adds_nothing_when_there_is_no_strong_match(items, query):
    hits = [hit(t, role=r, position=i) for i, (t, r) in enumerate(items)]
    strict = select_hits(hits, query, make_view([]), RecallParams(fill=False))
    filled = select_hits(hits, query, make_view([]), RecallParams(fill=True))
    if not strict:
        assert filled == []
    else:
        assert filled[: len(strict)] == strict


def test_a_hit_already_shown_as_a_reply_brings_the_message_that_followed_it():
    # 4: the caller's question, 5: the assistant asks back, 6: the caller's answer
    hits = [
        hit("Which hotel in Lisbon should we book?", position=4),
        hit("Do you prefer a hotel near the river in Lisbon?", role="assistant", position=5),
    ]
    replies = {
        ("c1", 4): ("assistant", "Do you prefer a hotel near the river in Lisbon?"),
        ("c1", 5): ("user", "Yes, the Marquis by the river, room 418."),
    }
    query = "Which Lisbon hotel did we book by the river?"
    chosen = select_hits(hits, query, make_view([]), RecallParams(), replies=replies)
    assert [(s.position, s.role, s.text) for s in chosen] == [
        (4, "user", "Which hotel in Lisbon should we book?"),
        (6, "user", "Yes, the Marquis by the river, room 418."),
    ]
    assert chosen[0].reply == "Do you prefer a hotel near the river in Lisbon?"
    # with no message after it, a hit shown already is not repeated
    del replies[("c1", 5)]
    chosen = select_hits(hits, query, make_view([]), RecallParams(), replies=replies)
    assert [s.position for s in chosen] == [4]


def test_defaults_stay_a_small_block_and_the_broad_preset_is_larger():
    # the default block adapts its size (tests/recall/test_adaptive.py); the small fixed
    # block is a named preset, and so is the larger cap
    d = RecallParams.small()
    assert (d.max_tokens, d.max_snippets, d.search_limit) == (800, 8, 30)
    b = RecallParams.broad()
    assert (b.max_tokens, b.max_snippets, b.search_limit) == (3500, 35, 70)
    assert (b.min_score, b.fill, b.semantic) == (d.min_score, d.fill, None)
    assert RecallParams.broad(latency_budget_s=0.02).latency_budget_s == 0.02
    assert RecallParams.broad(max_snippets=10).max_snippets == 10
    # validated like any other params, each error naming its field
    with pytest.raises(ValueError, match="recall.max_tokens"):
        RecallParams.broad(max_tokens=10)
    with pytest.raises(TypeError, match="recall.semantic must be a SemanticRecallParams"):
        RecallParams.broad(semantic="wordllama")


@given(st.lists(st.tuples(few_words, roles), max_size=40), few_words)
@settings(max_examples=100, deadline=None)
def test_the_broad_preset_keeps_every_snippet_the_defaults_choose(items, query):
    # a larger block only adds: what the defaults recall, the preset recalls too
    hits = [hit(t, role=r, position=i) for i, (t, r) in enumerate(items)]
    small = select_hits(hits, query, make_view([]), RecallParams())
    large = select_hits(hits, query, make_view([]), RecallParams.broad())
    assert {s.position for s in small} <= {s.position for s in large}

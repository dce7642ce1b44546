"""The selection reads each hit's text once (select._read) and the query once (select._Relevance):
the same answers as the rules it stands for (relevance, best_relevance below: the rule the
selection applied hit by hit before, kept here as the oracle; in_view), and
``select_hits`` the same snippets as a selection written with those rules hit by hit.

Property tests (hypothesis): arbitrary Unicode text for the reading, texts built of a small
vocabulary (date words among them) for the scores, so that hits share terms with queries."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer._recall.query import is_when, topic_terms
from pipecat_summarizer._recall.select import (
    Snippet,
    View,
    _joined,
    _read,
    _Relevance,
    _seen,
    in_view,
    make_view,
    relevance,
    select_hits,
)
from pipecat_summarizer._text.vocabulary import normalize_verbatim, search_stem, words
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store.records import SearchHit


def best_relevance(
    terms: Sequence[str],
    parts: Sequence[Sequence[str]],
    text: str,
    rare: Iterable[str] = (),
    *,
    strict: bool = True,
) -> float:
    """:func:`relevance` of ``text`` to the whole query or to the best of its ``parts`` (see
    :func:`~pipecat_summarizer._recall.query.query_parts`): a message that answers one half
    of a two-part question is as relevant as one that answers a one-part question. A part
    of two words or more needs two of them (or a rare one): a part is a short query, and
    one everyday word of it ("leave") is not a strong match."""
    score = relevance(terms, text, rare, strict=strict)
    for part in parts:
        need = min(2, len([t for t in part if not is_when(t)]) or 1)
        score = max(score, relevance(part, text, rare, strict=strict, need=need))
    return score


any_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=120)
VOCABULARY = (
    "hotel Hotel HOTEL marquis lisbon room 418 booked booking March march 2023 Monday "
    "yesterday the a is of it's I'm paint painting painted flights flight Σ ΣΑΣ ß İstanbul"
).split()
SEPARATORS = [" ", "  ", "\n", "\t", ", ", ". ", "\u00a0", "\u2003", "’", "-", "_", ""]
vocab_text = st.lists(
    st.tuples(st.sampled_from(VOCABULARY), st.sampled_from(SEPARATORS)), max_size=14
).map(lambda parts: "".join(w + s for w, s in parts))
stems = st.sampled_from(
    sorted({search_stem(w) for t in VOCABULARY for w in words(t)} | {"tuesday", "april"})
)
term_lists = st.lists(stems, max_size=6)


@settings(max_examples=200, deadline=None)
@given(any_text)
def test_a_text_is_read_as_the_rules_read_it(text):
    norm, all_stems, topic = _read(text)
    assert norm == normalize_verbatim(text)
    assert all_stems == frozenset(search_stem(w) for w in words(text))
    assert topic == frozenset(topic_terms(normalize_verbatim(text)))


@settings(max_examples=250, deadline=None)
@given(st.one_of(any_text, vocab_text), st.one_of(any_text, vocab_text))
def test_a_hit_and_its_reply_are_read_as_their_join(text, reply):
    if text.strip() and reply.strip():  # as select_hits reads them: neither blank
        assert _joined(_read(text), _read(reply)) == _read(f"{text}\n{reply}")


@settings(max_examples=200, deadline=None)
@given(vocab_text)
def test_a_vocabulary_text_is_read_as_the_rules_read_it(text):
    assert _read(text) == (
        normalize_verbatim(text),
        frozenset(search_stem(w) for w in words(text)),
        frozenset(topic_terms(normalize_verbatim(text))),
    )


@settings(max_examples=250, deadline=None)
@given(term_lists, st.lists(term_lists, max_size=3), st.lists(stems, max_size=3), vocab_text)
def test_the_scores_are_best_relevance_strict_and_loose(terms, parts, rare, text):
    strict, loose = _Relevance(terms, parts, rare).scores(_read(text)[1])
    assert strict == best_relevance(terms, parts, text, rare)
    assert loose == best_relevance(terms, parts, text, rare, strict=False)
    if not parts:
        assert strict == relevance(terms, text, rare)


@settings(max_examples=150, deadline=None)
@given(vocab_text, st.lists(vocab_text, max_size=4), term_lists)
def test_seen_is_in_view(text, view_texts, terms):
    view = make_view(view_texts)
    assert _seen(_read(text), view, set(terms)) == in_view(text, view, terms)


def _reference(hits, query, view, params, *, replies, terms, parts, rare):
    """``select_hits`` as written with the rules, hit by hit (no deadline, no similarity)."""
    excluded = {"system", "developer"}
    out, weak, seen = [], [], set()
    for rank, hit in enumerate(hits):
        text, role = hit.content or "", hit.role or ""
        if role in excluded or not text.strip():
            continue
        call_id, position = hit.call_id, hit.position
        reply_role, reply = replies.get((call_id, position), (None, None))
        if reply_role in excluded or not (reply or "").strip():
            reply_role, reply = None, None
        norm = normalize_verbatim(text)
        full = f"{text}\n{reply}" if reply else text
        if norm in seen:
            if reply is None or normalize_verbatim(reply) in seen:
                continue
            role, text, position = str(reply_role), reply, position + 1
            norm = normalize_verbatim(reply)
            reply_role, reply = None, None
        score = best_relevance(terms, parts, full, rare)
        bucket = out
        if score < params.min_score or score == 0.0:
            score = best_relevance(terms, parts, full, rare, strict=False) if params.fill else 0.0
            if score == 0.0 or len(weak) >= params.max_snippets:
                continue
            bucket = weak
        if in_view(full, view, terms):
            continue
        if reply is not None and (in_view(reply, view, terms) or normalize_verbatim(reply) in seen):
            reply_role, reply = None, None
        seen.add(norm)
        if reply:
            seen.add(normalize_verbatim(reply))
        bucket.append(
            Snippet(call_id, position, hit.turn, hit.at, role, text, score, rank, reply_role, reply)
        )
        if len(out) >= params.max_snippets:
            break
    return (out + weak)[: params.max_snippets] if out else []


roles = st.sampled_from(["user", "assistant", "user", "system"])


@st.composite
def selections(draw):
    n = draw(st.integers(0, 12))
    hits, replies = [], {}
    for i in range(n):
        call_id = draw(st.sampled_from(["c1", "c2"]))
        content = draw(vocab_text)
        hits.append(SearchHit(call_id, i, i, 1.0 + i, draw(roles), content, "", 1.0, "u1"))
        if draw(st.booleans()):
            # a reply: new words, or another hit's (shown already as its reply)
            reply = draw(st.one_of(vocab_text, st.sampled_from([h.content for h in hits])))
            replies[(call_id, i)] = (draw(roles), reply)
    return hits, replies


@settings(max_examples=150, deadline=None)
@given(
    selections(),
    term_lists,
    st.lists(term_lists, max_size=2),
    st.lists(stems, max_size=2),
    st.lists(vocab_text, max_size=3),
    st.sampled_from([0.0, 0.25, 0.5]),
    st.booleans(),
    st.integers(1, 6),
)
def test_select_hits_chooses_as_the_rules_do_hit_by_hit(
    found, terms, parts, rare, view_texts, min_score, fill, most
):
    hits, replies = found
    params = RecallParams(min_score=min_score, fill=fill, max_snippets=most)
    view = make_view(view_texts)
    got = select_hits(hits, "q", view, params, replies=replies, terms=terms, parts=parts, rare=rare)
    want = _reference(hits, "q", view, params, replies=replies, terms=terms, parts=parts, rare=rare)
    assert got == want


def test_a_hit_judged_with_its_reply_when_the_reply_is_quoted_instead():
    # the second hit's words were shown already (the first hit's reply): the reply it
    # brings is quoted in its place, judged as the hit was found, with the hit's words
    hits = [
        SearchHit("c1", 0, 0, 1.0, "user", "booked the Marquis hotel", "", 1.0, "u1"),
        SearchHit("c1", 2, 1, 2.0, "user", "Lisbon hotel, blue door", "", 1.0, "u1"),
    ]
    replies = {
        ("c1", 0): ("assistant", "Lisbon hotel, blue door"),
        ("c1", 2): ("assistant", "room 418 from 3pm, in Lisbon"),
    }
    terms = topic_terms("which hotel in Lisbon")
    params = RecallParams(min_score=0.75)
    got = select_hits(hits, "q", View("", frozenset()), params, replies=replies, terms=terms)
    assert [(s.position, s.content, s.relevance) for s in got] == [
        (0, "booked the Marquis hotel", 1.0),
        (3, "room 418 from 3pm, in Lisbon", 1.0),  # alone it shares "lisbon" only: 0.5
    ]

"""A question that gathers: the second search's hits join the first's snippets, and no
archived message is quoted twice in the block, as a snippet or as a snippet's reply (S10-A-2:
the second search found the first hit's reply itself, and it was quoted again).

Pure: ``with_gathered`` on hits of a made-up archive, where each hit's reply is the message
after it, as the store reads it. Property tests (hypothesis) and the cases by hand."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer._recall.gather import quoted, unquoted, with_gathered
from pipecat_summarizer._recall.select import Snippet, make_view, select_hits
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store.records import SearchHit

QUERY = "Which car did I rent at the airport?"
GATHERED = ["fiat", "avis"]
WORDS = "fiat avis car rent airport red desk".split()

#: An archive: for each of two calls, each message's words (its text adds a word of its own).
archives = st.lists(
    st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3), max_size=8),
    min_size=2,
    max_size=2,
)


def _text(call: int, position: int, said: list[str]) -> str:
    return f"{' '.join(said)} note{call}x{position}"  # each message's text is its own


def _messages(archive: list[list[list[str]]]) -> dict[tuple[str, int], SearchHit]:
    return {
        (f"c{c}", p): SearchHit(
            call_id=f"c{c}",
            position=p,
            turn=p,
            at=1000.0 * c + p,
            role="user" if p % 2 == 0 else "assistant",
            content=_text(c, p, said),
            removed_by="compaction",
            score=1.0,
        )
        for c, call in enumerate(archive)
        for p, said in enumerate(call)
    }


def _found(
    messages: dict[tuple[str, int], SearchHit], keys: list[tuple[str, int]]
) -> tuple[list[SearchHit], dict[tuple[str, int], tuple[str, str]]]:
    """A search's hits (``keys``, in that order) and their replies, read from ``messages``."""
    hits = [messages[k] for k in dict.fromkeys(keys) if k in messages]
    replies = {}
    for h in hits:
        after = messages.get((h.call_id, h.position + 1))
        if after is not None:
            replies[(h.call_id, h.position)] = (after.role, after.content)
    return hits, replies


def _quotes(snippets: list[Snippet]) -> Counter[tuple[str, int]]:
    out: Counter[tuple[str, int]] = Counter()
    for s in snippets:
        out[(s.call_id, s.position)] += 1
        if s.reply:
            out[(s.call_id, s.position + 1)] += 1
    return out


@settings(deadline=None, max_examples=300)
@given(archives, st.data(), st.integers(1, 12))
def test_no_message_is_quoted_twice(archive, data, max_snippets):
    messages = _messages(archive)
    keys = st.lists(st.sampled_from(sorted(messages)), max_size=10) if messages else st.just([])
    params = RecallParams(max_snippets=max_snippets)
    view = make_view([])
    hits, replies = _found(messages, data.draw(keys))
    first = select_hits(hits, QUERY, view, params, replies=replies)
    more = _found(messages, data.draw(keys))
    block = with_gathered(first, more, QUERY, view, GATHERED, params)
    assert all(n == 1 for n in _quotes(block).values()), block
    assert block[: len(first)] == first[:max_snippets]
    assert len(block) <= max_snippets
    for s in block:  # each quote is the archive's message at its place
        assert s.content == messages[(s.call_id, s.position)].content
        if s.reply:
            assert s.reply == messages[(s.call_id, s.position + 1)].content


def _snippet(position: int, text: str, reply: str | None = None) -> Snippet:
    return Snippet(
        call_id="c",
        position=position,
        turn=0,
        at=0.0,
        role="user" if position % 2 == 0 else "assistant",
        content=text,
        relevance=1.0,
        rank=0,
        reply_role=None if reply is None else "assistant" if position % 2 == 0 else "user",
        reply=reply,
    )


def test_a_hit_shown_as_a_reply_brings_the_message_after_it():
    rented = _snippet(0, "I rented a red Fiat from Avis.", "Noted, a red Fiat.")
    again = _snippet(1, "Noted, a red Fiat.", "And the Avis desk closes at nine?")
    (moved,) = unquoted([again], quoted([rented]))
    assert (moved.position, moved.role, moved.content) == (
        2,
        "user",
        "And the Avis desk closes at nine?",
    )
    assert moved.reply is None
    assert unquoted([_snippet(1, "Noted, a red Fiat.")], quoted([rented])) == []


def test_a_reply_shown_as_a_snippet_is_left_off():
    answer = _snippet(4, "Noted, a blue Fiat.")
    asked = _snippet(3, "Make it the blue Fiat.", "Noted, a blue Fiat.")
    (kept,) = unquoted([asked], quoted([answer]))
    assert (kept.position, kept.content, kept.reply) == (3, "Make it the blue Fiat.", None)


def test_the_first_hits_reply_found_again_is_not_quoted_twice():
    params = RecallParams()
    view = make_view([])
    messages = {
        ("c", 0): "I rented a red Fiat from Avis at the airport.",
        ("c", 1): "Noted, a red Fiat.",
    }
    hits = [
        SearchHit("c", p, 0, 0.0, "user" if p == 0 else "assistant", t, "compaction", 1.0)
        for (_, p), t in messages.items()
    ]
    first = select_hits(
        hits[:1], QUERY, view, params, replies={("c", 0): ("assistant", messages[("c", 1)])}
    )
    assert first[0].reply == "Noted, a red Fiat."
    block = with_gathered(first, (hits[1:], {}), QUERY, view, GATHERED, params)
    assert block == first

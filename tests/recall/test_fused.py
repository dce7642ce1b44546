"""``gather.fused``: a search's answer as the turn's search and the early work both read it
(pure): the lexical hits first, then those found by meaning, the replies known (read with
the search, or held by the semantic index), and the first hits whose reply is still to read."""

from __future__ import annotations

from pipecat_summarizer._recall.fusion import SemanticHit
from pipecat_summarizer._recall.gather import fused
from pipecat_summarizer.store.records import SearchHit


class _Found(list):
    """A store's answer that read the first hits' replies with the search."""

    replies: dict[tuple[str, int], tuple[str, str]]


class _Index:
    """The replies a semantic index holds, by hit."""

    def __init__(self, replies: dict[tuple[str, int], tuple[str, str]]) -> None:
        self.replies = replies

    def reply(self, call_id: str, position: int) -> tuple[str, str] | None:
        return self.replies.get((call_id, position))


def _hit(call_id: str, position: int, text: str) -> SearchHit:
    return SearchHit(call_id, position, 0, 0.0, "user", text, "compaction", 1.0)


def test_the_lexical_hits_alone_and_the_replies_still_to_read():
    found = _Found([_hit("a", 0, "red Fiat"), _hit("a", 4, "Avis desk"), _hit("b", 2, "Fiat")])
    found.replies = {("a", 0): ("assistant", "Noted.")}
    (hits, replies), unread = fused(found, 2, None, None)
    assert hits == list(found) and replies == found.replies
    assert unread == []  # the store read the first hits' replies (a4 has none)
    (hits, replies), unread = fused([*found], 2, None, None)
    assert replies == {} and unread == list(found[:2])  # no replies read with the search


def test_the_hits_by_meaning_follow_with_the_index_replies():
    found = [_hit("a", 0, "red Fiat")]
    cat = SemanticHit("c", 6, 0, 0.0, "user", "a grey cat", similarity=0.8)
    index = _Index({("c", 6): ("assistant", "Lovely.")})
    (hits, replies), unread = fused(found, 5, ([cat], {("a", 0): 0.3}), index)
    assert [(h.call_id, h.position, h.similarity) for h in hits] == [("a", 0, 0.3), ("c", 6, 0.8)]
    assert replies == {("c", 6): ("assistant", "Lovely.")}
    assert [(h.call_id, h.position) for h in unread] == [("a", 0), ("c", 6)]
    read = _Found(found)
    read.replies = {}
    (_, _), unread = fused(read, 5, ([cat], {}), index)
    # the hit by meaning is still listed (read_replies skips it: the index gave its reply)
    assert [(h.call_id, h.position) for h in unread] == [("c", 6)]
    # a ranking that was late: the lexical hits alone
    (hits, _), _ = fused(found, 5, None, index)
    assert hits == found

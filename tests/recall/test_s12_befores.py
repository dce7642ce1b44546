"""Recall quotes the message said just before each of its first hits (``BEFORE_HITS``): the
other speaker's reply often repeats the question's words while the answer is in the message
before it (LoCoMo: "Paris?! That is great!" after the caller's photo of the Eiffel tower).

The rule (``gather.with_befores``, pure), the reads (with the search, behind an archive whose
search reads none, read ahead for an early search, held by the semantic index), and one
returning caller through a real pipeline on both backends."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer._recall import gather
from pipecat_summarizer._recall.gather import (
    INSTRUCTIONS,
    as_found,
    read_ahead,
    with_befores,
)
from pipecat_summarizer.params import MemoryParams, RecallParams
from pipecat_summarizer.store import open_store
from pipecat_summarizer.store._rows import BEFORE_HITS
from pipecat_summarizer.store.records import SearchHit
from tests.store.test_sqlite_speed_replies import _SearchOnly
from tests.support.openai_server import Reply, is_summary_request
from tests.support.recall_calls import FAST, archived_call, recall_block, recall_call


def _hit(call: str, pos: int, text: str = "x", role: str = "assistant") -> SearchHit:
    return SearchHit(call, pos, pos // 2, 100.0 + pos, role, text, "summarized", 1.0, "al")


ROLES = st.sampled_from(["user", "assistant", "tool", "system", "developer"])


@st.composite
def _found(draw):
    keys = draw(
        st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 12)), unique=True, max_size=12)
    )
    hits = [_hit(c, p, f"hit {c}{p}", draw(ROLES)) for c, p in keys]
    befores = {}
    for c, p in keys:
        if p > 0 and draw(st.booleans()):
            befores[(c, p)] = (draw(ROLES), f"before {c}{p}", p // 2, 99.0 + p)
        elif draw(st.booleans()):
            befores[(c, p)] = None
    return hits, befores


@settings(max_examples=300, deadline=None)
@given(_found())
def test_a_before_joins_right_after_its_hit_and_only_then(found):
    hits, befores = found
    out, replies = with_befores(hits, {}, befores)
    keys = [(h.call_id, h.position) for h in out]
    assert len(keys) == len(set(keys))  # no message twice
    assert [h for h in out if h in hits] == hits  # the hits, in their order
    added = [h for h in out if h not in hits]
    for h in added:
        i = out.index(h)
        hit = out[i - 1]  # right after its hit, one of the first BEFORE_HITS
        assert hits.index(hit) < BEFORE_HITS and hit.role == "assistant"
        assert (h.call_id, h.position) == (hit.call_id, hit.position - 1)
        said = befores[(hit.call_id, hit.position)]
        assert said is not None and (h.role, h.content, h.turn, h.at) == said
        assert h.role not in INSTRUCTIONS
        assert replies[(h.call_id, h.position)] == (hit.role, hit.content)  # its reply: the hit
        assert h.user_id == hit.user_id
    # every before that could join did
    hit_keys = {(h.call_id, h.position) for h in hits}
    wanted = [
        h
        for h in hits[:BEFORE_HITS]
        if h.role == "assistant"
        and befores.get((h.call_id, h.position)) is not None
        and befores[(h.call_id, h.position)][0] not in INSTRUCTIONS
        and (h.call_id, h.position - 1) not in hit_keys
    ]
    assert len(added) == len(wanted)


LINES = [
    "Hi, it's me again.",
    "Welcome back! What can I do for you?",
    "I booked the tickets for the fourteenth of June, seats 14A and 14B.",
    "Lovely, so the anniversary flight is all set!",
    "Yes, thank you.",
    "Anything else?",
]
QUESTION = "When is my anniversary flight?"


async def test_every_archive_path_reads_the_same_befores(tmp_path):
    store = open_store(str(tmp_path / "t.db"))
    try:
        await store.write(archived_call(LINES))
        results = []
        for archive in (store, _SearchOnly(store)):
            found = await archive.search(
                "anniversary flight", user_id="alice", any_word=True, limit=10, _replies=5
            )
            results.append(await as_found(archive, found, "anniversary flight", 5))
        # an early search's hits, read ahead: the turn reads nothing more
        early = await _SearchOnly(store).search(
            "anniversary flight", user_id="alice", any_word=True, limit=10
        )
        await read_ahead(store, early)

        class Unreadable(_SearchOnly):
            async def messages_at(self, keys):
                raise AssertionError(f"read again: {keys}")

        results.append(await as_found(Unreadable(store), early, "anniversary flight", 5))
    finally:
        await store.close()
    for hits, replies in results:
        assert [(h.call_id, h.position) for h in hits] == [("c1", 3), ("c1", 2)]
        assert hits[1].content == LINES[2] and hits[1].role == "user"
        assert replies[("c1", 2)] == ("assistant", LINES[3])
        assert replies[("c1", 3)] == ("user", LINES[4])


def test_the_semantic_index_holds_a_hits_before():
    class Index:
        def before(self, call_id, position):
            return ("user", "said before", 1, 3.0) if position == 3 else None

    hits = [_hit("c", 3), _hit("c", 7)]
    known = gather.known_befores(hits, hits, Index())
    assert known == {("c", 3): ("user", "said before", 1, 3.0)}
    assert gather.unread_befores(hits, known) == [hits[1]]


def _plain(body: dict) -> Reply:
    if is_summary_request(body):
        return Reply("FACTS:\n- the caller asked a question\nDECISIONS:\n- none")
    return Reply("Sure thing.")


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_a_returning_caller_is_shown_the_answer_said_before_the_hit(
    openai_server, store_target
):
    # the question's words are only in the assistant's echo; the date is in the caller's
    # message before it: the block quotes it, in its place before the echo
    openai_server.handler = _plain
    store = open_store(store_target)
    try:
        await store.write(archived_call(LINES))
        await recall_call(
            openai_server,
            store,
            [QUESTION],
            call_id="q1",
            recall=RecallParams(latency_budget_s=5.0),
            system="You are a travel desk.",
            memory=MemoryParams(writer=FAST),
        )
        block = recall_block(openai_server)
    finally:
        await store.close()
    assert json.dumps(LINES[2]) in block
    assert block.index(json.dumps(LINES[2])) < block.index(json.dumps(LINES[3]))

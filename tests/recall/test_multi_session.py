"""Multi-session questions: when a question's pieces were said in several calls, recall
gathers them with a second search on the names and things the first hits say (within the
turn's budget). The pure rule, then a returning caller through real pipelines on a SQLite
file and a real PostgreSQL."""

from __future__ import annotations

import pytest

from pipecat_summarizer._recall.query import gathers, topic_terms
from pipecat_summarizer._recall.render import is_recall_message
from pipecat_summarizer._recall.select import gather_words
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import open_store
from tests.support.openai_server import Reply, is_summary_request
from tests.support.recall_calls import recall_call


class Hit:
    def __init__(self, content, call_id):
        self.content, self.call_id, self.position, self.role = content, call_id, 0, "user"


def test_the_second_search_asks_for_what_the_first_hits_name():
    query = "What are all the plans with my sister?"
    assert gathers(query)
    hits = [Hit("My sister Marta lives in Porto and we plan a visit.", "c1")]
    words_ = gather_words(hits, query, topic_terms(query), 0.3)
    assert words_[:2] == ["marta", "porto"]
    # a one-call question that does not gather: no second search
    plain = "Where does my sister live?"
    assert not gathers(plain)
    assert gather_words(hits, plain, topic_terms(plain), 0.3) == []
    # never the query's own words
    two = [*hits, Hit("My sister Marta sent the photos from Lisbon.", "c2")]
    found = gather_words(two, query, topic_terms(query), 0.3)
    assert found[0] == "marta" and "sister" not in found and "lisbon" in found


FILLER = [
    "What time does the office open?",
    "Is there parking on Sunday?",
    "Can I pay by card?",
    "Do you have a waiting room?",
    "How late are you open?",
    "Could you send the form please?",
    "Is there a lift upstairs?",
]


def _summaries(body: dict) -> Reply:
    if is_summary_request(body):
        return Reply("FACTS:\n- the caller asked about the office\nDECISIONS:\n- none")
    return Reply("Sure thing.")


async def _call(server, store, texts, call_id, recall):
    await recall_call(
        server, store, texts, call_id=call_id, recall=recall, system="You are a travel agent."
    )


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_a_question_whose_pieces_are_in_two_calls_gets_both(openai_server, store_target):
    openai_server.handler = _summaries
    store = open_store(store_target)
    recall = RecallParams(latency_budget_s=5.0)
    try:
        await _call(
            openai_server,
            store,
            ["My sister Marta lives in Porto and we plan a visit.", *FILLER],
            "c1",
            recall,
        )
        await _call(
            openai_server,
            store,
            ["Marta is flying in on Friday for the wedding.", *FILLER],
            "c2",
            recall,
        )
        openai_server.requests.clear()
        await _call(openai_server, store, ["What are all the plans with my sister?"], "q", recall)
    finally:
        await store.close()
    recalled = [m for m in openai_server.chat_requests[-1]["messages"] if is_recall_message(m)]
    assert len(recalled) == 1
    block = recalled[0]["content"]
    assert "lives in Porto" in block  # the first search's hit
    assert "flying in on Friday" in block  # the second's: no word of the question

"""The query rules behind questions that need more than one piece (issue: "why misses
happen"): a question word the few texts in view also have is not "common"; a caller's
opener ("Sorry, remind me:") does not make a query need two shared words; a two-part
question is matched part by part. Pure rules, then one returning caller through a real
pipeline on a SQLite file."""

from __future__ import annotations

from pipecat_summarizer._recall.query import common_terms, focus, query_parts, topic_terms
from pipecat_summarizer._recall.render import is_recall_message
from pipecat_summarizer._recall.select import make_view, select_hits
from pipecat_summarizer.params import MemoryParams, RecallParams, WriterParams
from pipecat_summarizer.store import SQLiteMemoryStore
from tests.support.openai_server import Reply, is_summary_request
from tests.support.recall_calls import recall_call


class Hit:
    def __init__(self, content, position=0, call_id="c0", role="user"):
        self.content, self.position, self.call_id, self.role = content, position, call_id, role
        self.turn, self.at = 1, 1.0


def _chosen(query, texts, *, common=()):
    terms = focus(query, set(common))
    hits = [Hit(t, i) for i, t in enumerate(texts)]
    return [
        s.content
        for s in select_hits(
            hits,
            query,
            make_view([]),
            RecallParams(fill=False),
            terms=terms,
            parts=query_parts(query, terms),
        )
    ]


def test_a_word_of_a_small_view_is_not_common():
    # a returning caller's first turn: instructions, memory, greeting, reply, question
    view = [
        "You are Ava, the clinic's assistant.",
        "Earlier calls: the caller asked for a call back about the refund.",
        "Hi, thanks for calling me back.",
        "Of course! How can I help?",
        "When should you call me back now?",
    ]
    assert common_terms(view) == set()
    assert "call" in focus("When should you call me back now?", common_terms(view))
    # a long conversation still has its common words
    long_view = [f"Gina, message {i} about topic{i}" for i in range(12)]
    assert "gina" in common_terms(long_view)


def test_an_opener_does_not_make_a_query_need_two_shared_words():
    query = "Sorry, remind me: which hotel did I book?"
    assert focus(query, set()) == ["hotel", "book"]
    assert _chosen(query, ["We are staying at the Hotel Marquis in Lisbon."]) == [
        "We are staying at the Hotel Marquis in Lisbon."
    ]
    # the opener alone still searches (nothing else left)
    assert focus("Sorry, remind me?", set()) == topic_terms("Sorry, remind me?")


def test_each_half_of_a_two_part_question_is_matched_on_its_own():
    query = "What was the gate number for my flight, and when does the shuttle leave?"
    terms = focus(query, set())
    assert query_parts(query, terms) == [
        topic_terms("gate number flight"),
        topic_terms("shuttle leave"),
    ]
    texts = ["Your flight leaves from gate B12.", "The hotel shuttle leaves at 6:40 am."]
    assert _chosen(query, texts) == texts
    # one part: no split ("Jon and Gina" is not two questions)
    assert query_parts("Did Jon and Gina both dance?", topic_terms("Jon Gina both dance")) == []
    # one everyday word of a part is still not enough for a query of three or more words
    assert _chosen(query, ["I will leave soon."]) == []


def _summaries(body: dict) -> Reply:
    if is_summary_request(body):
        return Reply("FACTS:\n- the caller called about a refund\nDECISIONS:\n- none")
    return Reply("Of course! How can I help?")


async def _call(server, store, texts, call_id):
    await recall_call(
        server,
        store,
        texts,
        call_id=call_id,
        recall=RecallParams(latency_budget_s=5.0),
        system="You are Ava, an assistant.",
        memory=MemoryParams(writer=WriterParams(flush_interval_s=0.05)),
    )


async def test_a_returning_callers_opener_and_greeting_words_still_find_the_detail(
    openai_server, tmp_path
):
    openai_server.handler = _summaries
    store = SQLiteMemoryStore(tmp_path / "m.db")
    first = [
        "I am calling about my refund for order 5521.",
        "Please call me back on Thursday after five, on my mobile.",
        "Also the parcel was left at the neighbour's door.",
        "Thanks, that is all for today.",
    ]
    try:
        await _call(openai_server, store, first, "c1")
        openai_server.requests.clear()
        await _call(
            openai_server,
            store,
            ["Hi, thanks for calling me back.", "Sorry, remind me: when should you call me back?"],
            "c2",
        )
    finally:
        await store.close()
    last = openai_server.chat_requests[-1]["messages"]
    recalled = [m for m in last if is_recall_message(m)]
    assert len(recalled) == 1 and "Thursday after five" in recalled[0]["content"]

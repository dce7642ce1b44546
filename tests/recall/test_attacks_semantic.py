"""Attacks on semantic recall's per-process vectors: the process keeps the vectors of every
text it embedded (20,000 rows), shared by every call. Another caller who said the very same
words, and a caller forgotten after their words were embedded, must never come back through
it. Real pipelines (a real ``LLMContextAggregatorPair``, ``ContextSummarizer``, Pipecat's
OpenAI service against the local server) on a SQLite file and the real PostgreSQL, with
WordLlama from the ``semantic-wordllama`` extra (skipped, with the reason, without it)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipecat_summarizer.params import RecallParams, SemanticRecallParams
from pipecat_summarizer.store import open_store
from tests.recall.test_attacks_dates import archived, plain, utc
from tests.recall.test_attacks_gather import _blocks
from tests.support.recall_calls import recall_call

pytest.importorskip("wordllama", reason="the semantic-wordllama extra is not installed")

# said in other words than the question: found by meaning only
PAINT = "On weekends I make oil paintings of old lighthouses along the coast."
ASK = "What art do I make?"


@pytest.fixture(scope="module")
def recall() -> RecallParams:
    from pipecat_summarizer._recall.embedding import load_semantic_model

    semantic = SemanticRecallParams(model="wordllama")  # instant indexing: the mechanics
    load_semantic_model(semantic)
    return replace(RecallParams(latency_budget_s=5.0), semantic=semantic)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_the_process_vectors_never_bring_another_or_a_forgotten_callers_words(
    openai_server, store_target, recall
):
    openai_server.handler = plain
    store = open_store(store_target)
    mine = "I sing in a choir on Thursday evenings."
    try:
        # bob and carol said the very same words (their vectors are one cache entry); alice
        # said something else
        for user, day in (("bob", 1), ("carol", 2)):
            lines = [PAINT, f"Lovely, {user}.", "Thanks.", "Bye."]
            await store.write(
                archived(lines, call_id=f"{user}-1", at=utc(2026, 3, day), user_id=user)
            )
        await store.write(
            archived([mine, "Noted.", "Bye.", "Bye."], call_id="al-1", at=utc(2026, 3, 3))
        )
        blocks = {}
        for user in ("bob", "carol"):  # both embedded (carol's from the cache)
            openai_server.requests.clear()
            await recall_call(
                openai_server,
                store,
                [ASK],
                call_id=f"{user}-2",
                recall=recall,
                system="Hi.",
                user_id=user,
            )
            blocks[user] = _blocks(openai_server)
        await store.forget("carol")
        for user in ("alice", "carol"):
            openai_server.requests.clear()
            await recall_call(
                openai_server,
                store,
                [ASK],
                call_id=f"{user}-3",
                recall=recall,
                system="Hi.",
                user_id=user,
            )
            blocks[user + " after"] = _blocks(openai_server)
    finally:
        await store.close()
    # the words are found by meaning for their own callers (the attack has teeth) ...
    assert any("lighthouses" in b for b in blocks["bob"]), blocks
    assert any("lighthouses" in b for b in blocks["carol"]), blocks
    # ... and never for anyone else, nor for a caller forgotten since
    assert not any("lighthouses" in b for b in blocks["alice after"]), blocks
    assert blocks["carol after"] == [], blocks

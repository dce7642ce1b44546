"""A late ranking by meaning never costs the turn its lexical recall.

The turn searches the archive lexically and ranks the caller's embedded archive by meaning
side by side. When the ranking by meaning is late (its query queued behind the archive's
indexing, as MiniLM's was behind OpenBLAS's threads on a loaded machine), the lexical hits
still come back within the turn's budget and the block quotes them.

Real pipelines: the aggregators, ``ContextSummarizer`` with a real store (a SQLite file and
the real PostgreSQL), Pipecat's OpenAI service against the local OpenAI-protocol server,
the real WordLlama vectors (the query's embedding held by a gate the test opens at the end).
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from pipecat_summarizer._recall.embedding import embedder_for, load_semantic_model
from pipecat_summarizer.params import RecallParams, SemanticRecallParams
from pipecat_summarizer.store import open_store
from tests.recall.test_semantic import FILLER, _call, _recalled, _summaries
from tests.support.openai_server import Reply, is_summary_request

DETAIL = "My booking reference is QX7731, for the lake suite."
ASK = "What was my booking reference again?"


class QueuedQueryEmbedder:
    """WordLlama's vectors; once ``armed``, the question's embedding waits for ``gate``
    (the query queued behind the archive's indexing). Without ``fast_query``, every ranking
    runs in the query thread, as MiniLM's does."""

    def __init__(self, inner):
        self.inner = inner
        self.armed = False
        self.gate = threading.Event()
        self.waiting = 0

    @property
    def loaded(self) -> bool:
        return self.inner.loaded

    def embed(self, texts):
        if self.armed and list(texts) == [ASK]:
            self.waiting += 1
            self.gate.wait(30)
            self.waiting -= 1
        return self.inner.embed(texts)


@pytest.fixture(scope="module")
def wordllama() -> SemanticRecallParams:
    options = SemanticRecallParams(model="wordllama")
    load_semantic_model(options)
    return options


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_the_lexical_hit_comes_back_while_the_ranking_by_meaning_is_late(
    openai_server, store_target, wordllama
):
    embedder = QueuedQueryEmbedder(embedder_for(wordllama))
    semantic = SemanticRecallParams(embedder=embedder, model="wordllama")
    blocked_when_asked: list[int] = []

    def handler(body: dict) -> Reply:
        if not is_summary_request(body):
            last = body["messages"][-1].get("content")
            if last == FILLER[-1]:
                embedder.armed = True  # from the question on, its ranking is queued
            elif last == ASK:
                blocked_when_asked.append(embedder.waiting)
        return _summaries(body)

    openai_server.handler = handler
    store = open_store(store_target)
    try:
        processor = await _call(
            openai_server,
            store,
            [DETAIL, *FILLER, ASK],
            recall=RecallParams(latency_budget_s=1.0, semantic=semantic),
        )
        archived = await store.messages("call-1")
    finally:
        embedder.gate.set()
        await asyncio.sleep(0.1)
        await store.close()
    assert any("QX7731" in m.content for m in archived)  # it left the context
    last = openai_server.chat_requests[-1]
    assert last["messages"][-1]["content"] == ASK
    # the question reached the LLM while its ranking by meaning was still queued ...
    assert blocked_when_asked == [1]
    # ... and with the lexical hit, found within the turn's budget
    recalled = _recalled(last)
    assert len(recalled) == 1 and "QX7731" in recalled[0]["content"]
    assert processor.recall_step.missed == 0

"""A query embedded before its turn: ``SemanticIndex.prepare_query`` embeds the caller's words
in the query thread while they are still speaking (a companion such as ``RecallPrefetch`` sees
the transcription first), so the turn's ranking by meaning only multiplies: a sentence model's
query (~15 ms of CPU) no longer has to fit in the turn's budget.

A real SQLite store holds the caller's earlier call; the real WordLlama vectors, through an
embedder without ``fast_query`` (so ranking takes the sentence-model path: the query thread)
that records what it embeds and on which thread."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from pipecat_summarizer._recall.embedding import embedder_for, load_semantic_model
from pipecat_summarizer._recall.semantic import QUERY_VECTORS, SemanticIndex
from pipecat_summarizer.params import SemanticRecallParams
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord

PET = "Our dog Rex is a golden retriever, and he travels with us."
ASK = "What kind of animal is my pet?"
OTHER = "Can I book a table for dinner tonight?"
LINES = [
    PET,
    "Noted.",
    "Is there a gym upstairs?",
    "Yes, on the fifth floor.",
    "Is the spa open?",
    "It is.",
]


class RecordingEmbedder:
    """WordLlama's vectors; records each single-text (query) embedding and its thread."""

    def __init__(self, inner):
        self.inner = inner
        self.queries: list[tuple[str, str]] = []

    @property
    def loaded(self) -> bool:
        return self.inner.loaded

    def embed(self, texts):
        if len(texts) == 1 and texts[0] not in LINES:
            self.queries.append((texts[0], threading.current_thread().name))
        return self.inner.embed(texts)


@pytest.fixture(scope="module")
def wordllama() -> SemanticRecallParams:
    options = SemanticRecallParams(model="wordllama")
    load_semantic_model(options)
    return options


async def _index(tmp_path, wordllama) -> tuple[SemanticIndex, RecordingEmbedder, SQLiteMemoryStore]:
    store = SQLiteMemoryStore(tmp_path / "m.db")
    now = time.time()
    await store.write(
        [
            CallRecord("c1", user_id="al", started_at=now - 900, ended_at=now - 600),
            *[
                ArchivedMessage(
                    "c1",
                    i,
                    "user" if i % 2 == 0 else "assistant",
                    t,
                    "{}",
                    turn=i // 2,
                    at=now - 900 + i,
                    user_id="al",
                )
                for i, t in enumerate(LINES)
            ],
        ]
    )
    embedder = RecordingEmbedder(embedder_for(wordllama))
    semantic = SemanticRecallParams(embedder=embedder, model="wordllama")
    index = SemanticIndex(semantic, call_id="c2", user_id="al")
    await index.refresh(store)
    assert index.size == len(LINES)
    return index, embedder, store


async def _until(condition, most_s: float = 20.0) -> None:
    deadline = time.monotonic() + most_s
    while not condition():
        assert time.monotonic() < deadline, "the early embedding never ran"
        await asyncio.sleep(0.01)


async def test_a_query_embedded_before_its_turn_is_ranked_without_embedding_again(
    tmp_path, wordllama
):
    index, embedder, store = await _index(tmp_path, wordllama)
    try:
        assert index.prepare_query(ASK)
        await _until(lambda: embedder.queries)
        assert embedder.queries == [(ASK, embedder.queries[0][1])]
        assert embedder.queries[0][1].startswith("semantic-query")  # off the event loop
        hits, similarity = await index.rank_soon(ASK)
        # the turn only ranked: the query was embedded once, before it
        assert [q for q, _ in embedder.queries] == [ASK]
        assert hits and hits[0].content == PET
        assert similarity[("c1", 0)] == pytest.approx(hits[0].similarity)
        # the control: a query nobody prepared is embedded by its own ranking
        await index.rank_soon(OTHER)
        assert [q for q, _ in embedder.queries] == [ASK, OTHER]
    finally:
        await index.close()
        await store.close()


async def test_what_prepare_query_refuses_and_how_many_it_keeps(tmp_path, wordllama):
    index, embedder, store = await _index(tmp_path, wordllama)
    try:
        assert not index.prepare_query("   ")
        fast = SemanticIndex(wordllama, call_id="c2", user_id="al")  # WordLlama: fast_query
        assert not fast.prepare_query(ASK)
        asked = [f"{OTHER} ({i})" for i in range(QUERY_VECTORS + 2)]
        for query in asked:
            assert index.prepare_query(query)
        await _until(lambda: len(embedder.queries) == len(asked))
        await index.rank_soon(asked[-1])  # kept: not embedded again
        assert len(embedder.queries) == len(asked)
        await index.rank_soon(asked[0])  # the oldest was let go: embedded again
        assert [q for q, _ in embedder.queries[len(asked) :]] == [asked[0]]
        await index.close()
        assert not index.prepare_query(ASK)  # the call is over
    finally:
        await store.close()

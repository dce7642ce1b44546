"""S17 attack round (helper A): the ranking by meaning (the ``semantic`` option) with an
application's embedder that misbehaves on the turn's query: raises, answers NaN, answers
rows of the wrong width, or hangs. The turn's lexical recall must not pay for it: the block
the archive's words find is placed all the same, within the turn's budget (a hang: the
ranking joins within its share of the wait, or not at all).

A real pipeline: the real ``LLMContextAggregatorPair``, ``ContextSummarizer`` on a SQLite
file, Pipecat's OpenAI service against the local server. The embedder is a small bag of
hashed words (numpy only, no model to load), right for the archived lines and faulty for
the turn's question alone.
"""

from __future__ import annotations

import asyncio
import threading
import time
import zlib

import numpy as np
import pytest
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._recall.render import is_recall_message
from pipecat_summarizer.params import MemoryParams, RecallParams, SemanticRecallParams, WriterParams
from pipecat_summarizer.store import open_store
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord
from tests.support.openai_server import Reply
from tests.support.pipeline_utils import cfg, main_llm, user_turn
from tests.support.recall_calls import ended_call
from tests.support.settle import Gap, run_settling

FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)
LINES = [
    "My locker code at the gym is 4471.",
    "Noted, locker code 4471.",
    "Is there a sauna upstairs?",
    "Yes, on the fifth floor.",
]
ASK = "What was my locker code again?"
WIDTH = 64


class FaultyEmbedder:
    """Hashed words for the archive; ``fault`` for any other text (the turn's query)."""

    def __init__(self, fault: str) -> None:
        self.fault = fault
        self.release = threading.Event()
        self.queries = 0

    def embed(self, texts):
        if len(texts) == 1 and texts[0] not in LINES:
            self.queries += 1
            if self.fault == "raises":
                raise RuntimeError("the embedding service is down")
            if self.fault == "nan":
                return np.full((1, WIDTH), np.nan, dtype=np.float32)
            if self.fault == "shape":
                return np.ones((1, WIDTH + 3), dtype=np.float32) / np.sqrt(WIDTH + 3)
            if self.fault == "hangs":
                self.release.wait(30)  # (let go at the test's end)
        rows = np.zeros((len(texts), WIDTH), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                rows[i, zlib.crc32(word.encode()) % WIDTH] += 1.0
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return rows / np.where(norms == 0, 1.0, norms)


async def _call(server, path: str, embedder: FaultyEmbedder):
    store = open_store(path)
    await store.write(ended_call(LINES))
    context = LLMContext(messages=[{"role": "system", "content": "You are a hotel desk."}])
    summarizer = OpenAISummarizer(base_url=server.base_url, model="cheap")
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=40, keep=4),
        summarizer=summarizer,
        store=store,
        call_id="c2",
        user_id="al",
        memory=MemoryParams(writer=FAST),
        recall=RecallParams(
            latency_budget_s=1.0,
            semantic=SemanticRecallParams(embedder=embedder, model="wordllama"),
        ),
    )
    pair = LLMContextAggregatorPair(context)
    pipeline = Pipeline([pair.user(), processor, main_llm(server.base_url), pair.assistant()])
    # the caller's earlier call is indexed at the call's start, then the question
    frames = [Gap(sleep=1.0), user_turn(ASK), Gap(sleep=1.5)]
    try:
        await run_settling(pipeline, frames_to_send=frames)
    finally:
        embedder.release.set()
        await summarizer.aclose()
        if processor.recall_step is not None:
            await processor.recall_step.close()
        await store.close()
    return [
        [str(m["content"]) for m in body["messages"] if is_recall_message(m)]
        for body in server.chat_requests
    ], processor.recall_step


@pytest.mark.parametrize("fault", ["raises", "nan", "shape", "hangs"])
async def test_attack_a_faulty_query_embedding_never_costs_the_lexical_block(
    openai_server, tmp_path, fault
):
    """``raises`` and ``shape`` failed the turn's whole search (S17-A-5, fixed by helper I
    in e4516ab; both fail at e4516ab~); ``nan`` and ``hangs`` held."""
    openai_server.handler = lambda body: Reply("Sure.")
    embedder = FaultyEmbedder(fault)
    blocks, step = await _call(openai_server, str(tmp_path / "m.db"), embedder)
    assert embedder.queries >= 1  # the turn's query went to the embedder
    assert any("4471" in b for b in blocks[-1]), (fault, blocks, step.errors)


class GatedEmbedder(FaultyEmbedder):
    """Hashed words; the turn's query waits for ``go`` in the query thread."""

    def __init__(self) -> None:
        super().__init__("none")
        self.entered = threading.Event()
        self.go = threading.Event()

    def embed(self, texts):
        if len(texts) == 1 and texts[0] not in LINES:
            self.entered.set()
            self.go.wait(30)
        return super().embed(texts)


async def test_attack_a_forget_while_the_prefetch_embeds_the_callers_words(tmp_path):
    """The prefetch embeds the caller's words (``prepare_query``) when the caller is
    forgotten: the index drops everything it holds of them, and the embedding that ends
    after the forget must not be kept (nor count as prepared for a turn). S17-A-6 (fixed
    by helper I in e4516ab; fails at e4516ab~)."""
    from pipecat_summarizer._recall.semantic import SemanticIndex

    store = open_store(str(tmp_path / "m.db"))
    now = time.time()
    await store.write(
        [
            CallRecord("c1", user_id="al", started_at=now - 900, ended_at=now - 600),
            *[
                ArchivedMessage("c1", i, "user", t, "{}", turn=i, at=now - 900 + i, user_id="al")
                for i, t in enumerate(LINES)
            ],
        ]
    )
    embedder = GatedEmbedder()
    index = SemanticIndex(
        SemanticRecallParams(embedder=embedder, model="wordllama"), call_id="c2", user_id="al"
    )
    try:
        await index.refresh(store)
        assert index.size == len(LINES)
        assert index.prepare_query(ASK)
        assert await asyncio.to_thread(embedder.entered.wait, 30)
        await store.forget("al")
        index._check_forgotten()  # what the next ranking, reply or kick does first
        assert index.size == 0
        embedder.go.set()
        for _ in range(1000):  # until the early embedding has ended (bounded)
            if not index._preparing:
                break
            await asyncio.sleep(0.01)
        assert not index._preparing
        assert not index._prepared(ASK)  # (its vector kept: the forgotten words)
    finally:
        embedder.go.set()
        await index.close()
        await store.close()

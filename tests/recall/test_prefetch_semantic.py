"""``RecallPrefetch`` with semantic recall: the caller's transcribed words are embedded as the
turn's query while they are still speaking (``SemanticIndex.prepare_query``), so a turn whose
query embedding would come too late (a sentence model's ~15 ms of CPU over the budget, or a
query queued behind indexing) still ranks by meaning within the budget and recalls a
paraphrase the lexical search cannot find; without the companion the same turn goes without.

Real pipelines: a companion before the aggregators, ``ContextSummarizer`` with a real SQLite
store, Pipecat's OpenAI service against the local OpenAI-protocol server, the real WordLlama
vectors through an embedder that stalls any query embedded once the turn is in the context."""

from __future__ import annotations

import threading

import pytest
from pipecat.frames.frames import (
    TranscriptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.turns.user_turn_strategies import ExternalUserTurnStrategies

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._recall.embedding import embedder_for, load_semantic_model
from pipecat_summarizer._recall.prefetch import RecallPrefetch
from pipecat_summarizer._recall.render import is_recall_message
from pipecat_summarizer.params import MemoryParams, RecallParams, SemanticRecallParams, WriterParams
from pipecat_summarizer.store import SQLiteMemoryStore
from tests.support.openai_server import Reply
from tests.support.pipeline_utils import cfg, main_llm
from tests.support.recall_calls import ended_call
from tests.support.settle import Gap, run_settling

FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)
PET = "Our dog Rex is a golden retriever, and he travels with us."
ASK = "What kind of animal is my pet?"  # no word of PET: found by meaning only
LINES = [PET, "Noted.", "Is there a gym upstairs?", "Yes, on the fifth floor."]


class LateAtTurnEmbedder:
    """WordLlama's vectors; a query embedded once the caller's turn is in the context waits
    for ``gate`` (the turn's own embedding, queued behind the archive's indexing)."""

    def __init__(self, inner, context: LLMContext):
        self.inner = inner
        self.context = context
        self.gate = threading.Event()
        self.stalled = 0

    @property
    def loaded(self) -> bool:
        return self.inner.loaded

    def embed(self, texts):
        asked = any(m.get("content") == ASK for m in list(self.context.get_messages()))
        if len(texts) == 1 and texts[0] not in LINES and asked:
            self.stalled += 1
            self.gate.wait(30)
        return self.inner.embed(texts)


@pytest.fixture(scope="module")
def wordllama() -> SemanticRecallParams:
    options = SemanticRecallParams(model="wordllama")
    load_semantic_model(options)
    return options


async def _call(server, tmp_path, wordllama, *, early: bool) -> tuple[list[str], int]:
    store = SQLiteMemoryStore(tmp_path / "m.db")
    await store.write(ended_call(LINES))
    context = LLMContext(messages=[{"role": "system", "content": "You are a hotel desk."}])
    embedder = LateAtTurnEmbedder(embedder_for(wordllama), context)
    semantic = SemanticRecallParams(embedder=embedder, model="wordllama")
    summarizer = OpenAISummarizer(base_url=server.base_url, model="cheap")
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=40, keep=4),
        summarizer=summarizer,
        store=store,
        call_id="c2",
        user_id="al",
        memory=MemoryParams(writer=FAST),
        recall=RecallParams(latency_budget_s=0.5, semantic=semantic),
    )
    pair = LLMContextAggregatorPair(
        context,
        user_params=LLMUserAggregatorParams(user_turn_strategies=ExternalUserTurnStrategies()),
    )
    head = [RecallPrefetch(processor)] if early else []
    pipeline = Pipeline(
        [*head, pair.user(), processor, main_llm(server.base_url), pair.assistant()]
    )
    frames = [
        Gap(sleep=1.0),  # the caller's earlier call is indexed at the call's start
        UserStartedSpeakingFrame(),
        TranscriptionFrame(ASK, "al", "t0"),
        Gap(sleep=0.5),  # the caller is still speaking
        UserStoppedSpeakingFrame(),
        Gap(sleep=1.0),
    ]
    try:
        await run_settling(pipeline, frames_to_send=frames)
    finally:
        embedder.gate.set()
        await summarizer.aclose()
        await store.close()
    blocks = [
        str(m["content"])
        for body in server.chat_requests
        for m in body["messages"]
        if is_recall_message(m)
    ]
    return blocks, embedder.stalled


async def test_the_companion_embeds_the_query_early_so_meaning_is_ranked_on_time(
    openai_server, tmp_path, wordllama
):
    openai_server.handler = lambda body: Reply("Sure.")
    blocks, stalled = await _call(openai_server, tmp_path, wordllama, early=True)
    assert stalled == 0  # the turn's ranking used the vector embedded while the caller spoke
    assert len(blocks) == 1 and "golden retriever" in blocks[0]


async def test_without_the_companion_the_late_embedding_costs_the_paraphrase(
    openai_server, tmp_path, wordllama
):
    openai_server.handler = lambda body: Reply("Sure.")
    blocks, stalled = await _call(openai_server, tmp_path, wordllama, early=False)
    assert stalled == 1  # embedded at the turn, queued: the ranking missed the budget
    assert not any("golden retriever" in b for b in blocks)

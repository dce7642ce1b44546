"""The turn's ranking by meaning starts only when it can join the turn (S16-Q-1).

Without ``RecallPrefetch`` a sentence model embeds the turn's query on the turn's path
(MiniLM: 11.5-14.7 ms of CPU), which never fits the ranking's share of the real 10 ms
budget: each turn waited for it until that share was spent, and its CPU competed with the
turn's own lexical search. The gate learns what the rankings took and, once they do not
fit, the turns go lexical at once without starting one; a query the prefetch embedded while
the caller spoke is still ranked, and joins.

Real pipelines: ``RecallPrefetch`` before the real ``LLMContextAggregatorPair``,
``ContextSummarizer`` with a real store (a SQLite file, the real PostgreSQL), Pipecat's OpenAI
service against the local OpenAI-protocol server, the real WordLlama vectors through an
embedder without ``fast_query`` whose query embedding is deliberately slow (it sleeps in the
query thread). Counted: the query embeddings (rankings started that embed) and the step's
``semantic_late`` / ``semantic_skipped``, never milliseconds.
"""

from __future__ import annotations

import threading
import time

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
from pipecat_summarizer._recall.budget import EXTRA_MIN_SAMPLES
from pipecat_summarizer._recall.embedding import embedder_for, load_semantic_model
from pipecat_summarizer._recall.prefetch import RecallPrefetch
from pipecat_summarizer._recall.render import is_recall_message
from pipecat_summarizer.params import MemoryParams, RecallParams, SemanticRecallParams, WriterParams
from pipecat_summarizer.store import open_store
from tests.support.openai_server import Reply
from tests.support.pipeline_utils import cfg, main_llm, user_turn
from tests.support.recall_calls import ended_call
from tests.support.settle import Gap, Until, processor_idle, run_settling

FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)
PET = "Our dog Rex is a golden retriever, and he travels with us."
ASK = "What kind of animal is my pet?"  # no word of PET: found by meaning only
LINES = [PET, "Noted.", "Is there a gym upstairs?", "Yes, on the fifth floor."]
# typed turns (no transcription: nothing for the prefetch to embed early)
TYPED = [
    "Can I book a table for dinner tonight?",
    "Is the pool heated in winter?",
    "What time does breakfast start?",
    "Could you call me a taxi tomorrow?",
    "Is there parking near the entrance?",
]
#: The query embedding's time: over the ranking's share of the turns' budget.
SLOW_S = 0.2
#: The ranking's share is 0.75 x what the budget leaves the search: at most 180 ms, under
#: ``SLOW_S``, so a ranking that embeds on the turn's path never joins and the gate closes
#: whatever the load (each one measured takes ``SLOW_S`` at least). A share of under 15 ms
#: (SLOW_S 0.1 s, a budget of 20 ms) was too short on a loaded machine for the spoken turn's
#: own ranking, which embeds nothing but waits for the turn's forget watch, a trip to the
#: store's thread: late, the turn placed nothing.
BUDGET_S = 0.24


class SlowQueryEmbedder:
    """WordLlama's vectors; a query (one text that is not an archived line) takes
    ``SLOW_S`` longer, in whatever thread embeds it, and is counted."""

    def __init__(self, inner):
        self.inner = inner
        self.queries: list[str] = []
        self.busy = 0  # query embeddings under way
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self.inner.loaded

    def embed(self, texts):
        if len(texts) == 1 and texts[0] not in LINES:
            with self._lock:
                self.queries.append(texts[0])
                self.busy += 1
            try:
                time.sleep(SLOW_S)
                return self.inner.embed(texts)
            finally:
                with self._lock:
                    self.busy -= 1
        return self.inner.embed(texts)


@pytest.fixture(scope="module")
def wordllama() -> SemanticRecallParams:
    options = SemanticRecallParams(model="wordllama")
    load_semantic_model(options)
    return options


def _spoken(text: str, embedder: SlowQueryEmbedder, processor: ContextSummarizer) -> list:
    def embedded() -> bool:
        # the vector kept, not only embedded: the early search's ranking, queued behind the
        # embedding in the query thread, has ended (no task of the package alive)
        return text in embedder.queries and embedder.busy == 0 and processor_idle(processor)

    return [
        UserStartedSpeakingFrame(),
        TranscriptionFrame(text, "al", "t0"),
        # the caller is still speaking: the prefetch embeds the words meanwhile
        Until(sleep=5.0, done=embedded),
        UserStoppedSpeakingFrame(),
        Gap(sleep=0.6),
    ]


async def _call(server, target: str, wordllama, typed: list[str], spoken: list[str]):
    """One call of the caller ``al`` (their earlier call archived), ``typed`` turns then
    ``spoken`` ones; the recall step, the embedder and the recalled blocks (per request)."""
    store = open_store(target)
    await store.write(ended_call(LINES))
    context = LLMContext(messages=[{"role": "system", "content": "You are a hotel desk."}])
    embedder = SlowQueryEmbedder(embedder_for(wordllama))
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
        recall=RecallParams(latency_budget_s=BUDGET_S, semantic=semantic),
    )
    pair = LLMContextAggregatorPair(
        context,
        user_params=LLMUserAggregatorParams(user_turn_strategies=ExternalUserTurnStrategies()),
    )
    pipeline = Pipeline(
        [RecallPrefetch(processor), pair.user(), processor, main_llm(server.base_url)]
        + [pair.assistant()]
    )
    frames: list = [Gap(sleep=1.0)]  # the caller's earlier call is indexed at the call's start
    # each turn's ranking, late, ends (and is measured: after its embedding, in its task)
    # before the next turn
    idle = Until(sleep=5.0, done=lambda: embedder.busy == 0 and processor_idle(processor))
    for text in typed:
        frames += [user_turn(text), Gap(sleep=0.5), idle]
    for text in spoken:
        frames += _spoken(text, embedder, processor)
    try:
        await run_settling(pipeline, frames_to_send=frames)
    finally:
        await summarizer.aclose()
        if processor.recall_step is not None:
            await processor.recall_step.close()
        await store.close()
    blocks = [
        [str(m["content"]) for m in body["messages"] if is_recall_message(m)]
        for body in server.chat_requests
    ]
    return processor.recall_step, embedder, blocks


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_once_learned_the_turns_do_not_start_a_ranking_that_cannot_join(
    openai_server, store_target, wordllama
):
    openai_server.handler = lambda body: Reply("Sure.")
    step, embedder, _ = await _call(openai_server, store_target, wordllama, TYPED, [])
    assert step.turns == len(TYPED)
    # the first EXTRA_MIN_SAMPLES turns ranked (and waited, late): the gate learned
    assert embedder.queries == TYPED[:EXTRA_MIN_SAMPLES]
    assert step.semantic_late <= EXTRA_MIN_SAMPLES
    # the others went lexical at once, without starting one (before the gate: every turn
    # embedded its query and waited for it, late, 5 of 5)
    assert getattr(step, "semantic_skipped", None) == len(TYPED) - EXTRA_MIN_SAMPLES


async def test_a_query_the_prefetch_embedded_is_still_ranked_after_the_gate_closed(
    openai_server, tmp_path, wordllama
):
    openai_server.handler = lambda body: Reply("Sure.")
    step, embedder, blocks = await _call(
        openai_server, str(tmp_path / "m.db"), wordllama, TYPED[:4], [ASK]
    )
    # the typed turns closed the gate ...
    assert getattr(step, "semantic_skipped", None) == 4 - EXTRA_MIN_SAMPLES
    assert embedder.queries[:EXTRA_MIN_SAMPLES] == TYPED[:EXTRA_MIN_SAMPLES]
    # ... the spoken question was embedded while the caller spoke, once, and its ranking
    # joined the turn (not late): the paraphrase only meaning finds is recalled
    assert embedder.queries[EXTRA_MIN_SAMPLES:] == [ASK]
    assert step.semantic_late <= EXTRA_MIN_SAMPLES  # the typed turns' only
    assert any("golden retriever" in b for b in blocks[-1])

"""Attack: ``RecallPrefetch`` placed wrongly, fed a very long turn, and hostile words.

Real pipelines (a real ``LLMContextAggregatorPair`` fed an STT's frames,
``ContextSummarizer``, Pipecat's OpenAI service against the local server) on a real SQLite
store that answers slower than the turn's budget; the early embedding with the real
models of the ``semantic`` extras.
"""

from __future__ import annotations

import asyncio
import time

from pipecat.frames.frames import (
    InterimTranscriptionFrame,
    TranscriptionFrame,
    UserStartedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.turns.user_turn_strategies import ExternalUserTurnStrategies

from pipecat_summarizer._recall import prefetch as prefetch_module
from pipecat_summarizer._recall.embedding import (
    MiniLMEmbedder,
    load_semantic_model,
)
from pipecat_summarizer._recall.prefetch import KEPT_CHARS, PrefetchingArchive, RecallPrefetch
from pipecat_summarizer._recall.semantic import SemanticIndex
from pipecat_summarizer.params import RecallParams, SemanticRecallParams
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord
from tests.support.early_search import (
    RECALL,
    desk,
    end_turn,
    prefetch_pipeline,
    recall_blocks,
    seed_trips,
    speech,
    watched_store,
)
from tests.support.openai_server import Reply
from tests.support.pipeline_utils import main_llm
from tests.support.settle import Gap, run_settling

ASK = "Which hotel did I book in Lisbon?"
# a caller who talks on: ~200 characters a final transcription, no end of turn between
RAMBLE = "and then we drove along the coast for a while looking at the old villages by the sea "


async def test_a_companion_after_the_user_aggregator_says_so_once_and_recall_still_works(
    openai_server, tmp_path, logs
):
    openai_server.handler = lambda body: Reply("Sure.")
    store = watched_store(str(tmp_path / "m.db"))
    store.delay_s = 0.0
    context, summarizer, processor = desk(
        openai_server, store, user_id="alice", recall=RecallParams(latency_budget_s=2.0)
    )
    companion = RecallPrefetch(processor)
    pair = LLMContextAggregatorPair(
        context,
        user_params=LLMUserAggregatorParams(user_turn_strategies=ExternalUserTurnStrategies()),
    )
    # wrong: after the user aggregator (the caller's words arrive as the turn ends)
    pipeline = Pipeline(
        [pair.user(), companion, processor, main_llm(openai_server.base_url), pair.assistant()]
    )
    try:
        await seed_trips(store)
        two_turns = [*speech(ASK), *end_turn(), *speech("And my car?"), *end_turn()]
        await asyncio.wait_for(run_settling(pipeline, frames_to_send=two_turns), timeout=30)
    finally:
        await summarizer.aclose()
        await store.close()
    said = [r for r in logs if "placed after the user aggregator" in r["message"]]
    assert len(said) == 1 and "RecallPrefetch" in said[0]["message"]
    # the call is unharmed: both turns reached the LLM, the first with its recalled hotel
    assert len(openai_server.chat_requests) == 2
    assert any(
        "Marquis" in b or "hotel" in b.lower() for b in recall_blocks(openai_server.chat_requests)
    )


def _reading_companion(openai_server, tmp_path, monkeypatch):
    """Alice's call's store, summarizer and companion, and how many characters each early
    search read."""
    store = SQLiteMemoryStore(tmp_path / "m.db")
    _context, summarizer, processor = desk(openai_server, store, user_id="alice", recall=RECALL)
    read: list[int] = []
    real = prefetch_module.turn_query

    def recording(step, messages, said, terms):
        read.append(len(said))
        return real(step, messages, said, terms)

    monkeypatch.setattr(prefetch_module, "turn_query", recording)
    return store, summarizer, RecallPrefetch(processor), read


async def test_a_long_turn_in_many_parts_reads_a_bounded_tail(openai_server, tmp_path, monkeypatch):
    """300 final transcriptions with no end of turn between them (a caller who talks on, or
    a muted caller whose words the aggregator drops): each early search reads the turn's
    last ``KEPT_CHARS`` characters, not the whole turn again (O(turn^2) on the loop: 4.5 s
    of CPU over 500 parts), and the companion keeps no more than that."""
    store, summarizer, companion, read = _reading_companion(openai_server, tmp_path, monkeypatch)
    frames = [UserStartedSpeakingFrame()]
    frames += [TranscriptionFrame(f"{RAMBLE}{i}", "alice", "t0") for i in range(300)]
    try:
        await run_settling(Pipeline([companion]), frames_to_send=frames)
    finally:
        await summarizer.aclose()
        await store.close()
    assert len(read) == 300 and max(read) <= KEPT_CHARS
    # the parts of the last KEPT_CHARS characters (and the one that crosses it)
    assert sum(len(p.text) for p in companion._parts) <= KEPT_CHARS + len(RAMBLE) + 5


async def test_a_long_turns_early_search_still_serves_the_turn(openai_server, tmp_path):
    """The bounded tail is the one the turn's query reads: the early search of a 10 KB turn
    (a question at its end) still answers the turn, whose archive is slower than its budget."""
    openai_server.handler = lambda body: Reply("Sure.")
    store = watched_store(str(tmp_path / "m.db"))
    store.delay_s = 0.6  # twice RECALL's budget
    context, summarizer, processor = desk(openai_server, store, user_id="alice", recall=RECALL)
    companion = RecallPrefetch(processor)
    try:
        await seed_trips(store)
        finals = [RAMBLE * 11] * 9 + [ASK]  # 8.4 KB: past KEPT_CHARS
        frames = [*speech(*finals[:-1]), *speech(finals[-1]), Gap(sleep=0.8), *end_turn()]
        await asyncio.wait_for(
            run_settling(
                prefetch_pipeline(openai_server, context, processor, companion),
                frames_to_send=frames,
            ),
            timeout=60,
        )
    finally:
        await summarizer.aclose()
        await store.close()
    assert len(openai_server.chat_requests) == 1
    assert len(str(openai_server.chat_requests[0]["messages"][-1]["content"])) > KEPT_CHARS
    assert companion.archive is not None and companion.archive.served == 1
    # the turn's search was the early one: it was answered within the budget
    step = processor.recall_step
    assert step is not None and step.turns == 1 and step.missed == 0


async def test_a_lone_surrogate_in_the_callers_words_keeps_recall_by_meaning(tmp_path):
    """A client's JSON can carry a lone surrogate into a transcription (the store refuses
    such text, but the query is built of it): the tokenizers raised TypeError, so the early
    embedding failed and the turn's ranking by meaning raised."""
    semantic = SemanticRecallParams(model="wordllama")
    load_semantic_model(semantic)
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        now = time.time()
        pet = "Our dog Rex is a golden retriever, and he travels with us."
        await store.write(
            [
                CallRecord("c1", user_id="al", started_at=now - 90, ended_at=now - 60),
                ArchivedMessage("c1", 0, "user", pet, "{}", turn=0, user_id="al"),
            ]
        )
        index = SemanticIndex(semantic, call_id="c2", user_id="al")
        await index.refresh(store)
        hostile = "\ud800 What kind of dog is my pet Rex?\udfff"
        hits, _ = index.rank(hostile)
        assert [h.content for h in hits] == [pet]
        hits, _ = await index.rank_soon(hostile + " again")
        assert [h.content for h in hits] == [pet]
    finally:
        await store.close()
    # the sentence encoder too (its tokenizer raised the same way)
    vectors = MiniLMEmbedder().embed(["\ud800 my pet", "\udfff"])
    assert vectors.shape == (2, 384)


async def test_a_forgotten_callers_early_answers_leave_memory_at_the_next_look(tmp_path):
    """Early searches whose caller was forgotten since hold the forgotten text in their
    answers: the next turn's look (any words, any caller) drops them, instead of keeping
    them until the call ends."""
    store = SQLiteMemoryStore(tmp_path / "m.db")
    archive = PrefetchingArchive(store)
    try:
        await seed_trips(store)
        assert archive.prefetch("hotel", user_id="alice", any_word=True)
        assert archive.prefetch("car", user_id="alice", any_word=True)
        assert archive.prefetch("hotel", user_id="bob", any_word=True)
        await asyncio.sleep(0.05)
        assert await store.forget("alice") > 0
        assert archive.take("museum", user_id="bob", any_word=True) is None
        kept = [key[1] for key in archive._early]
        assert kept == ["bob"]  # alice's answers are gone, bob's is still there to serve
        assert await archive.search("hotel", user_id="bob", any_word=True)
        assert archive.served == 1
    finally:
        archive.clear()
        await store.close()


async def test_a_100_kb_interim_reads_a_bounded_tail(openai_server, tmp_path, monkeypatch):
    store, summarizer, companion, read = _reading_companion(openai_server, tmp_path, monkeypatch)
    huge = (RAMBLE * 1200)[:100_000] + " " + ASK
    frames = [UserStartedSpeakingFrame(), InterimTranscriptionFrame(huge, "alice", "t0")]
    try:
        await run_settling(Pipeline([companion]), frames_to_send=frames)
    finally:
        await summarizer.aclose()
        await store.close()
    assert read == [KEPT_CHARS]
    assert companion.archive is not None and companion.archive.started == 1

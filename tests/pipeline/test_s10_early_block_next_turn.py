"""The block ``RecallPrefetch`` chooses and renders while the caller speaks serves every
turn of a call, not only the first that recalls: the turn reads the context after last
turn's block is taken out, so the early work must judge the same context. A real pipeline
(a real ``LLMContextAggregatorPair`` fed transcriptions, ``ContextSummarizer`` with a SQLite
store and recall, Pipecat's OpenAI service against the local server), two spoken turns
that each recall."""

from __future__ import annotations

from pipecat_summarizer import RecallPrefetch
from tests.support.early_search import (
    RECALL,
    prefetch_pipeline,
    recall_blocks,
    seed_trips,
    spoken_turn,
    watched_store,
)
from tests.support.openai_server import Reply
from tests.support.recall_calls import travel_desk
from tests.support.settle import run_settling

HOTEL_ASK = "Which hotel are we staying at in Lisbon?"
CAR_ASK = "Which car did I rent at the airport?"


async def _two_turns(server, path):
    """Alice's call on a seeded archive: two spoken questions, each answered before the
    next; returns the recall step and the blocks the LLM received."""
    server.handler = lambda body: Reply("Sure.")
    before = len(server.chat_requests)
    store = watched_store(path)
    context, processor, summarizer = travel_desk(server, store, RECALL, call_id="now-alice")
    try:
        await seed_trips(store)
        # each pause ends once the turn has settled (run_test played them at full length)
        await run_settling(
            prefetch_pipeline(server, context, processor, RecallPrefetch(processor)),
            frames_to_send=[*spoken_turn(HOTEL_ASK), *spoken_turn(CAR_ASK)],
        )
    finally:
        await summarizer.aclose()
        await store.close()
    return processor.recall_step, recall_blocks(server.chat_requests[before:])


async def test_the_second_recalling_turn_takes_its_early_block(openai_server, tmp_path):
    step, blocks = await _two_turns(openai_server, str(tmp_path / "m.db"))
    assert len(blocks) == 2  # both turns recalled
    assert "Hotel Marquis" in blocks[0] and "red Fiat" in blocks[1]
    # each block was the one chosen and rendered while the caller spoke
    assert (step.early_blocks, step.early_choices) == (2, 0)

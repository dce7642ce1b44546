"""S17 attack round B: the process's count of recall turns on their way
(``_recall.semantic_rows.TURNS``), which holds the indexing thread back (S16-G-1).

A turn that never comes back down from the count would hold every index of the process at
its cap for good (recall by meaning silently stale, the index growing at a tenth of its
pace). Attacked with real pipelines (a real ``LLMContextAggregatorPair``,
``ContextSummarizer`` on a SQLite file, Pipecat's OpenAI service against the local server):
turns whose archive search raises, a call cancelled (``CancelFrame``: the caller hung up)
while its turn waits for a slow archive, and many turns in a row. After each, no turn is on
its way and the gate is free. Counted, never timed (a guard against a hang only). All held.
"""

from __future__ import annotations

import asyncio

import pytest
from pipecat.frames.frames import CancelFrame

from pipecat_summarizer._recall.turn_gate import TURNS
from pipecat_summarizer.params import RecallParams
from tests.support.early_search import seed_trips, watched_store
from tests.support.openai_server import Reply
from tests.support.pipeline_utils import build, main_llm, user_turn
from tests.support.recall_calls import travel_desk
from tests.support.settle import Gap, Until, run_settling

GUARD_S = 10.0  # a guard against a hang only


async def _gate_free() -> None:
    while TURNS._on_their_way or TURNS.busy:
        await asyncio.sleep(0.005)


async def _call(server, path: str, how: str, frames: list) -> tuple:
    server.handler = lambda body: Reply("Sure.")
    store = watched_store(path)
    # "slow": the turn is still waiting for its search at the cancel (its budget too)
    store.delay_s = 30.0 if how == "slow" else 0.0
    store.fail = how == "failing"
    recall = RecallParams(latency_budget_s=20.0 if how == "slow" else 0.3)
    context, processor, summarizer = travel_desk(server, store, recall, call_id="now")
    await seed_trips(store)
    assert TURNS._on_their_way == 0  # none before (another test's turn left on its way)
    try:
        await run_settling(
            build(context, processor, main_llm(server.base_url)),
            frames_to_send=frames(store),
            send_end_frame=how != "slow",
        )
        await asyncio.wait_for(_gate_free(), GUARD_S)
    finally:
        await summarizer.aclose()
        await store.close()
    return store, processor


async def test_attack_turns_whose_search_raises_leave_the_gate(openai_server, tmp_path):
    def frames(store) -> list:
        out: list = []
        for ask in ["Which hotel did I book?", "Which car did I rent?", "What room was it?"]:
            out += [user_turn(ask), Gap(sleep=0.3)]
        return out

    store, processor = await _call(openai_server, str(tmp_path / "m.db"), "failing", frames)
    assert len(store.ended) >= 3 and set(store.ended) == {"failed"}
    assert TURNS._on_their_way == 0


async def test_attack_a_call_cancelled_during_a_turn_leaves_the_gate(openai_server, tmp_path):
    def frames(store) -> list:
        return [
            user_turn("Which hotel did I book with you last time?"),
            Until(sleep=5.0, done=lambda: bool(store.searches)),  # the turn waits on it
            CancelFrame(),
        ]

    store, processor = await _call(openai_server, str(tmp_path / "m.db"), "slow", frames)
    assert store.searches and "done" not in store.ended
    assert TURNS._on_their_way == 0


@pytest.fixture(autouse=True)
def _no_turn_left():
    yield
    assert TURNS._on_their_way == 0

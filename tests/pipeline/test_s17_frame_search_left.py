"""A call on PostgreSQL whose turn's search the recall step stops waiting for (missed, then
the call's end: ``RecallStep.close``; the same for an extra search let go and dropped at the
next turn, an early search superseded) sends the server no cancel request: the search runs on
to its end on its connection, whose lease then goes back. A cancel request is a connection of
its own for which the server forks a process (~0.6 ms of the loop's CPU and ~2.6 ms of the
server's per cancel at 100k archived messages, on the CPUs the turn's own search and the loop
share), more than the few ms of search it saves.

A real pipeline (a real ``LLMContextAggregatorPair``, ``ContextSummarizer``, Pipecat's OpenAI
service against the local server) on the real PostgreSQL. The turn's search is held on the
server by a lock on ``removals`` (which a caller's search reads), so it is certainly under way
when the call ends. Counted: asyncpg's cancel requests, the store's leases; never time.
"""

from __future__ import annotations

import asyncio

import pytest
from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._recall.hooks import RecallObserver
from pipecat_summarizer.params import MemoryParams, RecallParams
from pipecat_summarizer.store import PostgresMemoryStore
from tests.recall.test_attacks_dates import archived, plain, utc
from tests.support.pipeline_utils import build, cfg, main_llm, turns
from tests.support.recall_calls import FAST
from tests.support.settle import run_settling

asyncpg = pytest.importorskip("asyncpg")

EARLIER = [
    "My sister Marta lives in Porto and we plan a visit.",
    "Lovely, Porto in spring.",
]
GUARD_S = 30.0  # a guard against a hang only: every wait below is on an event


class _Outcomes(RecallObserver):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_recall(self, outcome) -> None:
        self.seen.append(outcome.outcome)


def _call(server, store) -> tuple[LLMContext, ContextSummarizer, OpenAISummarizer]:
    """``travel_desk``'s call, with a short recall budget and a short flush at its end."""
    context = LLMContext(messages=[{"role": "system", "content": "You are a travel desk."}])
    summarizer = OpenAISummarizer(base_url=server.base_url, model="cheap")
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=40, keep=4),
        summarizer=summarizer,
        store=store,
        call_id="c2",
        user_id="alice",
        memory=MemoryParams(writer=FAST, flush_timeout_s=0.05),
        recall=RecallParams(latency_budget_s=0.05),
    )
    return context, processor, summarizer


async def _until(check) -> None:
    while not await check():
        await asyncio.sleep(0.005)


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_a_turns_search_left_at_the_calls_end_sends_no_cancel_request(
    openai_server, store_target, monkeypatch
):
    import asyncpg.connect_utils as connect_utils

    sent: list[int] = []
    original = connect_utils._cancel

    async def counted(*args, **kwargs):
        sent.append(1)
        return await original(*args, **kwargs)

    monkeypatch.setattr(connect_utils, "_cancel", counted)
    openai_server.handler = plain
    store = PostgresMemoryStore(store_target)
    holder = await asyncpg.connect(store_target)
    try:
        await store.write(archived(EARLIER, call_id="a1", at=utc(2026, 4, 1)))
        # the pool's connections opened and warmed first (a new connection's warm-up runs a
        # search, which the lock would hold: the turn would wait for a connection instead)
        warm = [
            store.search("Marta", user_id="alice", any_word=True) for _ in range(store.max_size)
        ]
        await asyncio.gather(*warm)
        locked = holder.transaction()
        await locked.start()
        try:
            await holder.execute("LOCK TABLE removals IN ACCESS EXCLUSIVE MODE")
            # a short budget: the turn goes without its held search at once; the call's
            # end waits little for its own writes (held by the lock too)
            context, processor, summarizer = _call(openai_server, store)
            outcomes = _Outcomes()
            assert processor.recall_step is not None
            processor.recall_step.add_observer(outcomes)
            try:
                await run_settling(
                    build(context, processor, main_llm(openai_server.base_url)),
                    frames_to_send=turns(["Where does Marta live again?"], gap=0.1),
                )
            finally:
                await summarizer.aclose()
            # the turn went without it; the call ended (the step let its search go)
            assert outcomes.seen == ["missed_budget"], outcomes.seen
            held = await holder.fetchval(
                "SELECT count(*) FROM pg_locks WHERE relation = 'removals'::regclass "
                "AND NOT granted"
            )
            # the search still runs on the server, on its lease (the call's last write waits
            # for the lock too); before, cancelled: one cancel request, none waiting
            assert not sent
            assert held >= 1
            assert store._leases.in_use >= 1
        finally:
            await locked.rollback()

        async def back() -> bool:
            return store._leases.in_use == 0

        await asyncio.wait_for(_until(back), GUARD_S)  # it ended: its lease went back
        assert not sent
    finally:
        await store.close()
        await holder.close()

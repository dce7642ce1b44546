"""An extra search the turn gave up on (the gathered words' second search) is let finish, not
cancelled at the frame's deadline: on PostgreSQL cancelling costs the frame asyncpg's cancel
request (a new connection, 1-6 ms of the loop's time past the deadline). It is cancelled
later (a latency budget on, the next turn's search, the call's end), so a stuck one never
lingers. Real pipelines on a SQLite file and the real PostgreSQL; the held search is held on
an event the main LLM's request sets, never on a timer."""

from __future__ import annotations

import asyncio

import pytest

from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import PostgresMemoryStore, SQLiteMemoryStore
from tests.recall.test_attacks_gather import ASK, _blocks, _seed
from tests.support.openai_server import Reply
from tests.support.recall_calls import recall_call


class _HeldSecond:
    """A real store whose search of the gathered words (not the question's) waits until the
    main LLM's request has gone out (``release``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.held: list[str] = []  # "start", then "end" or "cancelled"
        self.release = asyncio.Event()

    async def search(self, query, **kwargs):
        if "sister" in query:  # the question's own words: at once
            return await super().search(query, **kwargs)
        self.held.append("start")
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.held.append("cancelled")
            raise
        found = await super().search(query, **kwargs)
        self.held.append("end")
        return found


class HeldSQLite(_HeldSecond, SQLiteMemoryStore):
    pass


class HeldPostgres(_HeldSecond, PostgresMemoryStore):
    pass


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_a_second_search_given_up_on_is_let_finish(openai_server, store_target):
    store = HeldPostgres(store_target) if "://" in store_target else HeldSQLite(store_target)
    at_request: list[list[str]] = []

    def handler(body):
        if not body.get("tools") and "sister" in str(body["messages"][-1].get("content")):
            at_request.append(list(store.held))  # the turn's frame has gone on by now
            store.release.set()
        return Reply("Sure thing.")

    openai_server.handler = handler
    try:
        await _seed(store)
        await recall_call(
            openai_server,
            store,
            [ASK],
            call_id="q1",
            recall=RecallParams(latency_budget_s=1.0),  # let go for a second after
            system="Hi.",
        )
    finally:
        await store.close()
    (block,) = _blocks(openai_server)
    assert "lives in Porto" in block and "flying in on Friday" not in block  # not waited for
    # the frame went on without it, and did not cancel it: it ran to its end afterwards
    assert at_request == [["start"]]
    assert store.held == ["start", "end"]

"""Attacks on multi-session gathering (the second search on the names and things the first
hits say): it never brings another caller's rows (their words chosen to match), rows of a
caller forgotten during the call, or a corrected value as the current one, and a slow second
search never holds the turn. Real pipelines (a real ``LLMContextAggregatorPair``,
``ContextSummarizer``, Pipecat's OpenAI service against the local server) on a SQLite file
and the real PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest

from pipecat_summarizer._recall.render import is_recall_message
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import PostgresMemoryStore, SQLiteMemoryStore, open_store
from tests.recall.test_attacks_block import _call
from tests.recall.test_attacks_dates import archived, plain, utc
from tests.support.openai_server import Reply, is_summary_request
from tests.support.recall_calls import recall_call

ASK = "What are all the plans with my sister?"
SISTER = ["My sister Marta lives in Porto and we plan a visit.", "Lovely, Porto in spring."]
WEDDING = ["Marta is flying in on Friday for the wedding.", "Noted, Friday."]
# another caller's secret, in the very words the gathering searches for
BOB = [
    "Marta from Porto gave me her bank PIN 4471 at the wedding on Friday.",
    "I will keep PIN 4471 for Marta.",
]
BUDGET = RecallParams(latency_budget_s=5.0)  # a loaded machine: the budget never binds here


def _blocks(server) -> list[str]:
    return [
        str(m["content"])
        for body in server.chat_requests
        for m in body["messages"]
        if is_recall_message(m)
    ]


async def _seed(store) -> None:
    await store.write(archived(SISTER, call_id="a1", at=utc(2026, 4, 1), user_id="alice"))
    await store.write(archived(WEDDING, call_id="a2", at=utc(2026, 4, 20), user_id="alice"))
    await store.write(archived(BOB, call_id="b1", at=utc(2026, 4, 21), user_id="bob"))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_gathering_never_brings_another_callers_rows(openai_server, store_target):
    openai_server.handler = plain
    store = open_store(store_target)
    try:
        await _seed(store)
        await recall_call(openai_server, store, [ASK], call_id="q1", recall=BUDGET, system="Hi.")
        (alice,) = _blocks(openai_server)
        openai_server.requests.clear()
        await recall_call(
            openai_server, store, [ASK], call_id="q2", recall=BUDGET, system="Hi.", user_id="carol"
        )
        carol = _blocks(openai_server)
    finally:
        await store.close()
    # the gathering did run: the wedding line shares no word with the question
    assert "lives in Porto" in alice and "flying in on Friday" in alice
    assert "4471" not in alice
    assert carol == []  # a caller with no calls of her own gets nothing of anyone's


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_gathering_never_brings_a_caller_forgotten_during_the_call(
    openai_server, store_target
):
    store = open_store(store_target)
    forgets: list[asyncio.Task] = []

    done: list[bool] = []

    def handler(body):
        # the caller is forgotten (an admin tool, the same store) while the first answer
        # is being spoken
        if not is_summary_request(body):
            if not forgets:
                forgets.append(asyncio.ensure_future(store.forget("alice")))
            else:
                done.append(forgets[0].done())
        return plain(body)

    openai_server.handler = handler
    try:
        await _seed(store)
        # the second question comes 1.5 s after the first: the forget is over by then
        await _call(
            openai_server,
            store,
            [ASK, "And what about all of Marta's plans, Porto and the wedding?"],
            recall=BUDGET,
            user_id="alice",
            gap=1.5,
        )
        await asyncio.gather(*forgets)
        left = await store.search("Marta Porto wedding", user_id="alice", any_word=True)
    finally:
        await store.close()
    blocks = _blocks(openai_server)
    assert forgets and left == [] and done == [True]
    assert len(blocks) == 1 and "flying in on Friday" in blocks[0]  # before the forget
    last = openai_server.chat_requests[-1]["messages"]
    assert not any(is_recall_message(m) for m in last)  # after it: nothing of alice
    assert "4471" not in str(openai_server.chat_requests)


#: How long the slow second search takes: far past the test's budget (a turn that waited for
#: it would send its request only after it ended).
SLOW_S = 30.0
#: The test's latency budget: the first search (the question's own words) and the start of
#: the second fit in it on a loaded machine. At 0.5 s, under six CPU hogs on 2 cores, the
#: PostgreSQL runs failed in 12 of 20 (with S14-L-1's change) and 20 of 20 (before it): the
#: second search had not started by the request, or nothing was recalled in time.
SLOW_BUDGET = RecallParams(latency_budget_s=2.0)


class _SlowSecond:
    """A real store whose search of the gathered words (not the question's) takes
    :data:`SLOW_S`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.slow: list[str] = []  # "start", then "end" or "cancelled"

    async def search(self, query, **kwargs):
        if "sister" in query:  # the question's own words: at once
            return await super().search(query, **kwargs)
        self.slow.append("start")
        try:
            await asyncio.sleep(SLOW_S)
        except asyncio.CancelledError:
            self.slow.append("cancelled")
            raise
        self.slow.append("end")
        return await super().search(query, **kwargs)


class SlowSecondSQLite(_SlowSecond, SQLiteMemoryStore):
    pass


class SlowSecondPostgres(_SlowSecond, PostgresMemoryStore):
    pass


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_a_slow_second_search_never_holds_the_turn(openai_server, store_target):
    store = (
        SlowSecondPostgres(store_target)
        if "://" in store_target
        else SlowSecondSQLite(store_target)
    )
    seen: list[list[str]] = []

    def handler(body):
        if not body.get("tools") and "sister" in str(body["messages"][-1].get("content")):
            seen.append(list(store.slow))  # what the second search had done by the request
        return Reply("Sure thing.")

    openai_server.handler = handler
    try:
        await _seed(store)
        await recall_call(
            openai_server,
            store,
            [ASK],
            call_id="q1",
            recall=SLOW_BUDGET,
            system="Hi.",
        )
    finally:
        await store.close()
    # the request went out without waiting for the second search, with the first's hit
    assert len(seen) == 1 and seen[0][0] == "start" and "end" not in seen[0]
    (block,) = _blocks(openai_server)
    assert "lives in Porto" in block and "flying in on Friday" not in block
    assert store.slow == ["start", "cancelled"]  # dropped, never kept for a later turn


CORRECTED = [
    (["My sister Marta lives in Porto and we plan a visit.", "Lovely."], utc(2026, 2, 1)),
    (["Marta and I fly to Lisbon on 14 March.", "Noted, 14 March."], utc(2026, 2, 10)),
    (["Actually, make that 21 March, not 14 March.", "Done, 21 March."], utc(2026, 2, 20)),
]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize(
    "question", [ASK, "When do Marta and I fly to Lisbon?"], ids=["gathered", "asked"]
)
async def test_a_value_corrected_in_a_later_call_is_never_quoted_as_current(
    openai_server, store_target, question
):
    # said in one call, corrected in the next ("make that 21 March, not 14 March": no word
    # of the trip), asked in a third: by a question that gathers, and directly
    openai_server.handler = plain
    store = open_store(store_target)
    try:
        for k, (lines, at) in enumerate(CORRECTED):
            await store.write(archived(lines, call_id=f"c{k}", at=at))
        await recall_call(
            openai_server, store, [question], call_id="q", recall=BUDGET, system="Hi."
        )
    finally:
        await store.close()
    (block,) = _blocks(openai_server)
    assert "Lisbon on 14 March" in block  # the trip is recalled
    for line in block.splitlines():
        if "14 March" in line and "21 March" not in line:
            assert "superseded" in line, line  # the old date never stands alone

"""Attacks on ``RecallPrefetch`` (recall's search started on the caller's transcribed words):
interim words that differ from the final turn, two callers' pipelines on one store (and a
companion placed in the wrong caller's pipeline), a forget between the early search and the
turn, an early search with no turn after it (it ends, fails or is cut: no task left running,
nothing logged), and a companion beside a summarizer whose recall is off. Real pipelines (a
real ``LLMContextAggregatorPair`` fed transcriptions, ``ContextSummarizer``, Pipecat's OpenAI
service against the local server) on SQLite files and the real PostgreSQL."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest
from pipecat.tests.utils import run_test

from pipecat_summarizer import RecallPrefetch
from pipecat_summarizer.params import RecallParams
from tests.recall.test_attacks_dates import archived, utc
from tests.support.early_search import (
    RECALL,
    Forget,
    Forgetter,
    WatchedSQLite,
    desk,
    end_turn,
    prefetch_pipeline,
    recall_blocks,
    searches_running,
    speech,
    watched_store,
)
from tests.support.openai_server import Reply
from tests.support.settle import Gap, run_settling

HOTEL = ["We are staying at the Hotel Marquis in Lisbon, room 418.", "Noted, the Marquis."]
CAR = ["I rented a red Fiat from Avis at the airport.", "Noted, a red Fiat."]
BOB_HOTEL = ["My hotel is the Pensao Flor in Porto, room 12.", "Noted, Pensao Flor."]


async def _seed(store) -> None:
    await store.write(archived([*HOTEL, *CAR], call_id="a1", at=utc(2026, 5, 1), user_id="alice"))
    await store.write(archived(BOB_HOTEL, call_id="b1", at=utc(2026, 5, 2), user_id="bob"))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_interim_words_that_differ_from_the_final_turn_never_answer_it(
    openai_server, store_target
):
    # the STT's interim guess is about the hotel; the caller's final words are about the car
    openai_server.handler = lambda body: Reply("Sure.")
    store = watched_store(store_target)
    store.delay_s = 0.15
    try:
        await _seed(store)
        context, summarizer, processor = desk(openai_server, store, user_id="alice", recall=RECALL)
        companion = RecallPrefetch(processor)
        frames = [
            *speech("Which car did I rent at the airport?", interim="Which hotel did I"),
            *end_turn(),
        ]
        try:
            await run_settling(
                prefetch_pipeline(openai_server, context, processor, companion),
                frames_to_send=frames,
            )
        finally:
            await summarizer.aclose()
    finally:
        await store.close()
    (block,) = recall_blocks(openai_server.chat_requests)
    assert "red Fiat" in block and "Marquis" not in block
    assert openai_server.chat_requests[-1]["messages"][-1]["content"] == (
        "Which car did I rent at the airport?"
    )


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize("misplaced", [False, True], ids=["own", "swapped"])
async def test_two_callers_pipelines_on_one_store_never_swap_early_searches(
    openai_server, store_target, misplaced
):
    # alice and bob ask the very same words at the same moment; with "swapped", each
    # pipeline holds the other caller's companion (a copy-paste in the application)
    openai_server.handler = lambda body: Reply("Sure.")
    store = watched_store(store_target)
    ask = "Which hotel did I book with you last time?"
    try:
        await _seed(store)
        runs = {u: desk(openai_server, store, user_id=u, recall=RECALL) for u in ("alice", "bob")}
        companions = {u: RecallPrefetch(runs[u][2]) for u in runs}
        if misplaced:
            companions = {"alice": companions["bob"], "bob": companions["alice"]}
        try:
            await asyncio.gather(
                *(  # full pauses: both callers speak at the same moments
                    run_test(
                        prefetch_pipeline(openai_server, ctx, proc, companions[u]),
                        frames_to_send=[*speech(ask, user=u), *end_turn()],
                    )
                    for u, (ctx, _, proc) in runs.items()
                )
            )
        finally:
            for _, summarizer, _ in runs.values():
                await summarizer.aclose()
    finally:
        await store.close()
    # each request is told apart by its caller's system prompt
    for body in openai_server.chat_requests:
        user = "alice" if "alice" in body["messages"][0]["content"] else "bob"
        mine, theirs = ("Marquis", "Pensao Flor") if user == "alice" else ("Pensao Flor", "Marquis")
        (block,) = recall_blocks([body])
        assert mine in block and theirs not in block, (user, block)
    assert len(openai_server.chat_requests) == 2
    assert all(u in (None, "alice", "bob") for _, u in store.searches)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize("by", ["the call's store", "another process"])
async def test_a_forget_between_the_early_search_and_the_turn_is_honoured(
    openai_server, store_target, by
):
    # the early search has finished with alice's rows; she is forgotten (through the call's
    # store, or another store object: an admin tool, another worker, whose forget this
    # process never counted); then her turn ends
    openai_server.handler = lambda body: Reply("Sure.")
    store = watched_store(store_target)
    admin = store if by == "the call's store" else watched_store(store_target)
    try:
        await _seed(store)
        context, summarizer, processor = desk(openai_server, store, user_id="alice", recall=RECALL)
        companion = RecallPrefetch(processor)
        forgetter = Forgetter(admin)
        frames = [
            *speech("Which hotel did I book with you last time?"),
            Gap(sleep=2.0),  # the early search is over (settled: it ends once it is)
            Forget("alice"),
            # the forget is done (the Forgetter settled) before the turn ends: under load the
            # other process's forget (its connect) outlasted end_turn's 0.3 s and the turn's
            # end, a system frame, overtook it
            Gap(sleep=5.0),
            *end_turn(),
        ]
        try:
            await run_settling(
                prefetch_pipeline(openai_server, context, processor, companion, forgetter),
                frames_to_send=frames,
            )
        finally:
            await summarizer.aclose()
    finally:
        await store.close()
        if admin is not store:
            await admin.close()
    assert forgetter.forgotten and forgetter.forgotten[0] > 0
    assert store.ended[0] == "done"  # the early search did find alice's rows
    assert recall_blocks(openai_server.chat_requests) == []
    assert "Marquis" not in str(openai_server.chat_requests)


@pytest.mark.parametrize("how", ["slow", "failing", "done"])
async def test_an_early_search_with_no_turn_after_it_leaves_nothing_behind(
    openai_server, tmp_path, logs, caplog, how
):
    # the caller speaks, and the call ends before the turn does (they hung up)
    openai_server.handler = lambda body: Reply("Sure.")
    store = WatchedSQLite(tmp_path / "m.db")
    store.delay_s = {"slow": 5.0, "failing": 0.05, "done": 0.0}[how]
    store.fail = how == "failing"
    try:
        await _seed(store)
        context, summarizer, processor = desk(openai_server, store, user_id="alice", recall=RECALL)
        companion = RecallPrefetch(processor)
        frames = [*speech("Which hotel did I book?", interim="Which hotel"), Gap(0.2)]
        with caplog.at_level(logging.WARNING):
            try:
                await run_settling(
                    prefetch_pipeline(openai_server, context, processor, companion),
                    frames_to_send=frames,
                )
            finally:
                await summarizer.aclose()
            await asyncio.sleep(0.05)
            left = searches_running()
            gc.collect()  # an exception nobody read is reported when its task is collected
    finally:
        await store.close()
    assert store.searches  # an early search did start
    assert left == []
    assert len(store.ended) == len(store.searches)  # every one ended (done, failed, cut)
    # Pipecat's user aggregator pushes the words still being spoken after the EndFrame: a
    # turn after the call's end, which recall no longer serves (its search would outlive
    # the call)
    assert recall_blocks(openai_server.chat_requests) == []
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r["message"] for r in logs if r["level"].no >= 30]


@pytest.mark.parametrize(
    "recall", [None, RecallParams(enabled=False)], ids=["no-recall", "recall-off"]
)
async def test_a_companion_beside_a_summarizer_without_recall_never_searches(
    openai_server, tmp_path, recall
):
    openai_server.handler = lambda body: Reply("Sure.")
    store = WatchedSQLite(tmp_path / "m.db")
    try:
        await _seed(store)
        context, summarizer, processor = desk(openai_server, store, user_id="alice", recall=recall)
        companion = RecallPrefetch(processor)
        frames = [*speech("Which hotel did I book?", interim="Which hotel"), *end_turn()]
        try:
            await run_settling(
                prefetch_pipeline(openai_server, context, processor, companion),
                frames_to_send=frames,
            )
        finally:
            await summarizer.aclose()
    finally:
        await store.close()
    assert store.searches == []
    assert recall_blocks(openai_server.chat_requests) == []
    assert openai_server.chat_requests[-1]["messages"][-1]["content"] == "Which hotel did I book?"

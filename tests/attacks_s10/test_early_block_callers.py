"""Session-10 attacks on the early block across turns and callers: two turns back to back
(the second caller's words arrive while the first turn's recall and answer run, so the
early searches overlap, and the second turn interrupts the first's answer), and two callers'
calls at once on one store object, each with ``RecallPrefetch``. Each request's block must
be its own turn's (the one made without the companion), never another caller's."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from pipecat.frames.frames import (
    TranscriptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)

from pipecat_summarizer import RecallPrefetch
from pipecat_summarizer._recall.render import is_recall_message
from tests.attacks_s10.early_harness import CAR_ASK, check_requests, one_call
from tests.support.early_search import (
    RECALL,
    desk,
    prefetch_pipeline,
    seed_trips,
    spoken_turn,
    watched_store,
)
from tests.support.openai_server import Reply
from tests.support.settle import Gap, run_settling

HOTEL_ASK = "Which hotel room are we staying in?"
# what is recalled, not how fast: a search the machine's load makes late is another test's
ON_TIME = replace(RECALL, latency_budget_s=5.0)


def _last_user(body: dict) -> str:
    users = [m for m in body["messages"] if m.get("role") == "user"]
    return str(users[-1]["content"])


def _back_to_back() -> list:
    return [
        UserStartedSpeakingFrame(),
        TranscriptionFrame(CAR_ASK, "alice", "t0"),
        Gap(sleep=0.1),
        UserStoppedSpeakingFrame(),
        # no pause: the next words arrive as the first turn's recall and answer run
        UserStartedSpeakingFrame(),
        TranscriptionFrame(HOTEL_ASK, "alice", "t0"),
        Gap(sleep=0.1),
        UserStoppedSpeakingFrame(),
        Gap(sleep=0.3),
    ]


def _shape(body: dict) -> tuple:
    """The request without its recalled block: what the turn's recall worked on."""
    return tuple(
        (m.get("role"), str(m.get("content"))) for m in body["messages"] if not is_recall_message(m)
    )


async def test_two_turns_back_to_back_each_get_their_own_block(openai_server, tmp_path):
    frames = _back_to_back()
    runs = []
    for early in (True, False):
        outcome = await one_call(
            openai_server,
            str(tmp_path / f"{early}.db"),
            frames,
            early=early,
            seed=seed_trips,
            recall=ON_TIME,
        )
        runs.append([(_shape(r), b) for r, b in zip(outcome.requests, outcome.blocks, strict=True)])
    # every block is its own turn's, in both runs
    for run in runs:
        for shape, block in run:
            users = [c for r, c in shape if r == "user"]
            if block is not None and users[-1] == CAR_ASK:
                assert "red Fiat" in block
            if block is not None and users[-1] == HOTEL_ASK:
                assert "Marquis" in block and "Fiat" not in block
    # a request both runs sent once (the same context) carries the same block, early or not;
    # the runs' interleavings may differ (under load the first answer can land after the
    # second question, and a context that does not end in the caller's turn gets no block)
    early_run, plain_run = ({s: [b for t, b in run if t == s] for s, _ in run} for run in runs)
    shared = [s for s in early_run.keys() & plain_run.keys() if len(early_run[s]) == 1]
    for shape in shared:
        if len(plain_run[shape]) == 1:
            assert early_run[shape] == plain_run[shape]
    # a run's last request, when it ends in the last question, carries that question's block
    # (the first turn's may be overtaken by the second question: the turn moved on; under
    # load the first answer may land after the second question: no caller's turn to serve)
    for run in runs:
        shape, block = run[-1]
        if shape[-1] == ("user", HOTEL_ASK):
            assert block is not None and "Marquis" in block


async def _caller(server, store, user_id: str, ask: str) -> None:
    # isolation is the promise here, not the 10 ms budget: under CI's load a turn's search
    # once missed it and the turn went without a block (nothing crossed callers)
    context, summarizer, processor = desk(server, store, user_id=user_id, recall=ON_TIME)
    try:
        await run_settling(
            prefetch_pipeline(server, context, processor, RecallPrefetch(processor)),
            frames_to_send=spoken_turn(ask),
        )
    finally:
        await summarizer.aclose()


async def test_two_callers_at_once_on_one_store_never_see_each_other(openai_server, tmp_path):
    store = watched_store(str(tmp_path / "m.db"))
    openai_server.handler = lambda body: Reply("Sure.")
    try:
        await seed_trips(store)
        await asyncio.gather(
            _caller(openai_server, store, "alice", HOTEL_ASK),
            _caller(openai_server, store, "bob", HOTEL_ASK),
        )
    finally:
        await store.close()
    requests = [b for b in openai_server.chat_requests if b.get("stream")]
    blocks = check_requests(requests)
    by_caller = {
        str(r["messages"][0]["content"]).rsplit(" ", 1)[-1]: b
        for r, b in zip(requests, blocks, strict=True)
    }
    assert set(by_caller) == {"alice.", "bob."}
    alice, bob = str(by_caller["alice."]), str(by_caller["bob."])
    assert "Marquis" in alice and "Pensao" not in alice
    assert "Pensao" in bob and "Marquis" not in bob and "Fiat" not in bob


async def test_two_companions_on_one_summarizer_place_one_block(openai_server, tmp_path):
    # a careless set-up: two RecallPrefetch before the user aggregator, on one summarizer
    # (they share its early searches): one block, the turn's own
    store = watched_store(str(tmp_path / "m.db"))
    openai_server.handler = lambda body: Reply("Sure.")
    before = len(openai_server.chat_requests)
    try:
        await seed_trips(store)
        context, summarizer, processor = desk(openai_server, store, user_id="alice", recall=RECALL)
        first, second = RecallPrefetch(processor), RecallPrefetch(processor)
        assert first.archive is second.archive
        try:
            await run_settling(
                prefetch_pipeline(openai_server, context, processor, first, second),
                frames_to_send=spoken_turn(CAR_ASK),
            )
        finally:
            await summarizer.aclose()
    finally:
        await store.close()
    requests = [b for b in openai_server.chat_requests[before:] if b.get("stream")]
    (block,) = check_requests(requests)
    assert "red Fiat" in str(block)
    plain = await one_call(
        openai_server, str(tmp_path / "p.db"), spoken_turn(CAR_ASK), early=False, seed=seed_trips
    )
    assert plain.blocks == [block]

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
from pipecat.frames.frames import (
    DataFrame,
    Frame,
    InterimTranscriptionFrame,
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
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import SleepFrame, run_test
from pipecat.turns.user_turn_strategies import ExternalUserTurnStrategies

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer, RecallPrefetch
from pipecat_summarizer._recall.render import is_recall_message
from pipecat_summarizer.params import MemoryParams, RecallParams
from pipecat_summarizer.store import PostgresMemoryStore, SQLiteMemoryStore
from tests.recall.test_attacks_dates import archived, utc
from tests.support.openai_server import Reply
from tests.support.pipeline_utils import cfg, main_llm
from tests.support.recall_calls import FAST

HOTEL = ["We are staying at the Hotel Marquis in Lisbon, room 418.", "Noted, the Marquis."]
CAR = ["I rented a red Fiat from Avis at the airport.", "Noted, a red Fiat."]
BOB_HOTEL = ["My hotel is the Pensao Flor in Porto, room 12.", "Noted, Pensao Flor."]


class _Watched:
    """A real store that records each search (its words, and how it ended)."""

    delay_s = 0.0
    fail = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.searches: list[tuple[str, str | None]] = []  # (words, user)
        self.ended: list[str] = []  # "done", "failed" or "cancelled"

    async def search(self, query, **kwargs):
        self.searches.append((query, kwargs.get("user_id")))
        try:
            await asyncio.sleep(self.delay_s)
            if self.fail:
                raise RuntimeError("the archive is down")
            found = await super().search(query, **kwargs)
        except asyncio.CancelledError:
            self.ended.append("cancelled")
            raise
        except Exception:
            self.ended.append("failed")
            raise
        self.ended.append("done")
        return found


class WatchedSQLite(_Watched, SQLiteMemoryStore):
    pass


class WatchedPostgres(_Watched, PostgresMemoryStore):
    pass


def _store(target: str) -> _Watched:
    return WatchedPostgres(target) if "://" in target else WatchedSQLite(target)


async def _seed(store) -> None:
    await store.write(archived([*HOTEL, *CAR], call_id="a1", at=utc(2026, 5, 1), user_id="alice"))
    await store.write(archived(BOB_HOTEL, call_id="b1", at=utc(2026, 5, 2), user_id="bob"))


class _Forget(DataFrame):
    """Asks :class:`_Forgetter` to forget a caller, in the frame stream's order."""

    def __init__(self, user_id: str):
        super().__init__()
        self.user_id = user_id


class _Forgetter(FrameProcessor):
    """Runs ``store.forget`` when a :class:`_Forget` passes (an admin tool, mid-call)."""

    def __init__(self, store):
        super().__init__()
        self._store = store
        self.forgotten: list[int] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, _Forget):
            self.forgotten.append(await self._store.forget(frame.user_id))
            return
        await self.push_frame(frame, direction)


def _speech(*finals: str, interim: str | None = None, user: str = "alice") -> list:
    """An STT's frames for one turn, before the turn ends."""
    frames: list = [UserStartedSpeakingFrame()]
    if interim is not None:
        frames += [InterimTranscriptionFrame(interim, user, "t0"), SleepFrame(sleep=0.1)]
    for text in finals:
        frames += [TranscriptionFrame(text, user, "t0"), SleepFrame(sleep=0.1)]
    return frames


def _end_turn() -> list:
    return [SleepFrame(sleep=0.3), UserStoppedSpeakingFrame(), SleepFrame(sleep=0.6)]


def _processor(server, store, *, user_id, recall):
    system = f"You are a travel desk; the caller is {user_id}."
    context = LLMContext(messages=[{"role": "system", "content": system}])
    summarizer = OpenAISummarizer(base_url=server.base_url, model="cheap")
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=40, keep=4),
        summarizer=summarizer,
        store=store,
        call_id=f"now-{user_id}",
        user_id=user_id,
        memory=MemoryParams(writer=FAST),
        recall=recall,
    )
    return context, summarizer, processor


def _pipeline(server, context, processor, companion, *extra) -> Pipeline:
    pair = LLMContextAggregatorPair(
        context,
        user_params=LLMUserAggregatorParams(user_turn_strategies=ExternalUserTurnStrategies()),
    )
    return Pipeline(
        [companion, *extra, pair.user(), processor, main_llm(server.base_url), pair.assistant()]
    )


def _blocks(requests) -> list[str]:
    return [str(m["content"]) for b in requests for m in b["messages"] if is_recall_message(m)]


RECALL = RecallParams(latency_budget_s=0.3)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_interim_words_that_differ_from_the_final_turn_never_answer_it(
    openai_server, store_target
):
    # the STT's interim guess is about the hotel; the caller's final words are about the car
    openai_server.handler = lambda body: Reply("Sure.")
    store = _store(store_target)
    store.delay_s = 0.15
    try:
        await _seed(store)
        context, summarizer, processor = _processor(
            openai_server, store, user_id="alice", recall=RECALL
        )
        companion = RecallPrefetch(processor)
        frames = [
            *_speech("Which car did I rent at the airport?", interim="Which hotel did I"),
            *_end_turn(),
        ]
        try:
            await run_test(
                _pipeline(openai_server, context, processor, companion), frames_to_send=frames
            )
        finally:
            await summarizer.aclose()
    finally:
        await store.close()
    (block,) = _blocks(openai_server.chat_requests)
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
    store = _store(store_target)
    ask = "Which hotel did I book with you last time?"
    try:
        await _seed(store)
        runs = {
            u: _processor(openai_server, store, user_id=u, recall=RECALL) for u in ("alice", "bob")
        }
        companions = {u: RecallPrefetch(runs[u][2]) for u in runs}
        if misplaced:
            companions = {"alice": companions["bob"], "bob": companions["alice"]}
        try:
            await asyncio.gather(
                *(
                    run_test(
                        _pipeline(openai_server, ctx, proc, companions[u]),
                        frames_to_send=[*_speech(ask, user=u), *_end_turn()],
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
        (block,) = _blocks([body])
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
    store = _store(store_target)
    admin = store if by == "the call's store" else _store(store_target)
    try:
        await _seed(store)
        context, summarizer, processor = _processor(
            openai_server, store, user_id="alice", recall=RECALL
        )
        companion = RecallPrefetch(processor)
        forgetter = _Forgetter(admin)
        frames = [
            *_speech("Which hotel did I book with you last time?"),
            SleepFrame(sleep=0.3),  # the early search is over
            _Forget("alice"),
            *_end_turn(),
        ]
        try:
            await run_test(
                _pipeline(openai_server, context, processor, companion, forgetter),
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
    assert _blocks(openai_server.chat_requests) == []
    assert "Marquis" not in str(openai_server.chat_requests)


def _searches_running() -> list[str]:
    """The search tasks (the store's, recall's) still running on this loop."""
    me = asyncio.current_task()
    names = [
        getattr(t.get_coro(), "__qualname__", "")
        for t in asyncio.all_tasks()
        if t is not me and not t.done()
    ]
    return [n for n in names if "search" in n.lower()]


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
        context, summarizer, processor = _processor(
            openai_server, store, user_id="alice", recall=RECALL
        )
        companion = RecallPrefetch(processor)
        frames = [*_speech("Which hotel did I book?", interim="Which hotel"), SleepFrame(0.2)]
        with caplog.at_level(logging.WARNING):
            try:
                await run_test(
                    _pipeline(openai_server, context, processor, companion), frames_to_send=frames
                )
            finally:
                await summarizer.aclose()
            await asyncio.sleep(0.05)
            left = _searches_running()
            gc.collect()  # an exception nobody read is reported when its task is collected
    finally:
        await store.close()
    assert store.searches  # an early search did start
    assert left == []
    assert len(store.ended) == len(store.searches)  # every one ended (done, failed, cut)
    # Pipecat's user aggregator pushes the words still being spoken after the EndFrame: a
    # turn after the call's end, which recall no longer serves (its search would outlive
    # the call)
    assert _blocks(openai_server.chat_requests) == []
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
        context, summarizer, processor = _processor(
            openai_server, store, user_id="alice", recall=recall
        )
        companion = RecallPrefetch(processor)
        frames = [*_speech("Which hotel did I book?", interim="Which hotel"), *_end_turn()]
        try:
            await run_test(
                _pipeline(openai_server, context, processor, companion), frames_to_send=frames
            )
        finally:
            await summarizer.aclose()
    finally:
        await store.close()
    assert store.searches == []
    assert _blocks(openai_server.chat_requests) == []
    assert openai_server.chat_requests[-1]["messages"][-1]["content"] == "Which hotel did I book?"

"""Attacks on early work stopping once the turn went past it (``turn_passed``): a custom
source of early searches without the hook, and a turn that passes while the caller's next
words are already being worked on early. Real pipelines (``RecallPrefetch`` before a real
user aggregator fed transcriptions, ``ContextSummarizer``, Pipecat's OpenAI service against
the local server) on a SQLite file and the real PostgreSQL; held searches wait on events, and
the pauses that waited for the turn's answer or the early work end once it is there (``Until``:
at most their former fixed length)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pipecat.frames.frames import (
    TranscriptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.tests.utils import SleepFrame

from pipecat_summarizer._recall.prefetch import PrefetchingArchive, RecallPrefetch
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import PostgresMemoryStore, SQLiteMemoryStore
from tests.recall.test_attacks_gather import ASK, _blocks, _seed
from tests.support.early_search import prefetch_pipeline
from tests.support.openai_server import Reply
from tests.support.recall_calls import travel_desk
from tests.support.settle import Until, processor_idle, run_settling

#: The next turn's question: gathers ("all"), shares "wedding" with alice's second call.
NEXT = "What are all the plans for the wedding?"


def _answers(context) -> int:
    """The assistant's answers in ``context``."""
    return sum(m.get("role") == "assistant" for m in context.get_messages())


class _Gated:
    """A real store: searches of the first question's words wait for ``release_q``, those
    of the next question's words answer at once, any other (a follow-up: gathered words)
    waits for ``release_f``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.release_q = asyncio.Event()
        self.release_f = asyncio.Event()

    async def search(self, query, **kwargs):
        if "sister" in query:
            await self.release_q.wait()
        elif "wedding" not in query:
            await self.release_f.wait()
        return await super().search(query, **kwargs)


class GatedSQLite(_Gated, SQLiteMemoryStore):
    pass


class GatedPostgres(_Gated, PostgresMemoryStore):
    pass


class NoPassHook:
    """A source of early searches with ``take``, ``take_block`` and ``served_block`` (a
    ``PrefetchingArchive``'s) but no ``turn_passed``: an application's own."""

    def __init__(self, inner: PrefetchingArchive):
        self._inner = inner
        self.calls: list[str] = []

    def take(self, query: str, **kwargs: Any):
        self.calls.append("take")
        return self._inner.take(query, **kwargs)

    def take_block(self):
        self.calls.append("take_block")
        return self._inner.take_block()

    def served_block(self, block) -> None:
        self.calls.append("served_block")
        self._inner.served_block(block)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_a_source_without_turn_passed_still_serves(openai_server, store_target):
    # the early search of the question answers at once, its follow-ups are held past the
    # turn's end: the turn finds no block and would call turn_passed, which is not there
    openai_server.handler = lambda body: Reply("Sure thing.")
    store = GatedPostgres(store_target) if "://" in store_target else GatedSQLite(store_target)
    store.release_q.set()
    try:
        await _seed(store)
        context, processor, summarizer = travel_desk(
            openai_server, store, RecallParams(latency_budget_s=3.0)
        )
        companion = RecallPrefetch(processor)
        step = processor.recall_step
        assert step is not None and companion.archive is not None
        source = NoPassHook(companion.archive)
        step.use_early_searches(source)

        async def release_once_the_turn_searched() -> None:
            while step.turns < 1:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)
            store.release_f.set()

        releaser = asyncio.ensure_future(release_once_the_turn_searched())
        frames = [
            UserStartedSpeakingFrame(),
            TranscriptionFrame(ASK, "alice", "t0"),
            SleepFrame(sleep=0.3),
            UserStoppedSpeakingFrame(),
            # the turn's answer, its block sent (1.5 s at most, the former fixed pause)
            Until(sleep=1.5, done=lambda: _answers(context) >= 1 and processor_idle(processor)),
        ]
        try:
            await run_settling(
                prefetch_pipeline(openai_server, context, processor, companion),
                frames_to_send=frames,
            )
        finally:
            releaser.cancel()
            await summarizer.aclose()
    finally:
        store.release_f.set()
        await store.close()
    (block,) = _blocks(openai_server)
    assert "lives in Porto" in block and "flying in on Friday" in block
    assert "take_block" in source.calls and companion.archive.served == 1


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize("next_work", ["under way", "done"])
async def test_a_turn_passing_keeps_the_next_words_early_work(
    openai_server, store_target, monkeypatch, next_work
):
    # turn 1's early search is still running at its end (the turn takes it and waits);
    # the caller already speaks turn 2, whose early search answers and whose early work
    # waits for its follow-up (under way) or has made its block (done); turn 1's search
    # then answers, turn 1 finds no block of its own. S12-A-1 before the fix: turn 1
    # cancelled turn 2's early work (under way) or took its block and dropped it (done);
    # turn 1's own early work, started once its search answered, then replaced turn 2's
    openai_server.handler = lambda body: Reply("Sure thing.")
    store = GatedPostgres(store_target) if "://" in store_target else GatedSQLite(store_target)
    kept: list[Any] = []
    keep = PrefetchingArchive.keep_block
    monkeypatch.setattr(
        PrefetchingArchive,
        "keep_block",
        lambda self, block: (kept.append(block), keep(self, block)),
    )
    taken: list[str | None] = []  # the query of each block a turn took
    take = PrefetchingArchive.take_block

    def take_block(self):
        block = take(self)
        taken.append(None if block is None else block.searched[0])
        return block

    monkeypatch.setattr(PrefetchingArchive, "take_block", take_block)
    if next_work == "done":
        store.release_f.set()
    try:
        await _seed(store)
        context, processor, summarizer = travel_desk(
            openai_server, store, RecallParams(latency_budget_s=1.0)
        )
        companion = RecallPrefetch(processor)
        archive = companion.archive
        assert archive is not None

        async def script() -> None:
            while archive.follow_ups_started < 1 or (next_work == "done" and not kept):
                await asyncio.sleep(0.01)  # turn 2's early work waits (or is done)
            store.release_q.set()  # turn 1's search answers: turn 1 finds no block
            while not any(  # turn 1 is over: its answer is in the context
                m.get("role") == "assistant" for m in context.get_messages()
            ):
                await asyncio.sleep(0.01)
            store.release_f.set()  # turn 2's early work may now finish

        scripted = asyncio.ensure_future(script())

        def idle() -> bool:
            return processor_idle(processor)

        frames = [
            UserStartedSpeakingFrame(),
            TranscriptionFrame(ASK, "alice", "t0"),
            SleepFrame(sleep=0.3),
            UserStoppedSpeakingFrame(),
            SleepFrame(sleep=0.2),
            UserStartedSpeakingFrame(),
            TranscriptionFrame(NEXT, "alice", "t1"),
            # the script ran (turn 1 answered, turn 2's follow-ups released), an early block
            # was kept and nothing of the package runs on (early work of either turn's): 3 s
            # at most, the former fixed pause
            Until(sleep=3.0, done=lambda: scripted.done() and bool(kept) and idle()),
            UserStoppedSpeakingFrame(),
            # turn 2's answer (1 s at most, the former fixed pause)
            Until(sleep=1.0, done=lambda: _answers(context) >= 2 and idle()),
        ]
        try:
            await run_settling(
                prefetch_pipeline(openai_server, context, processor, companion),
                frames_to_send=frames,
            )
        finally:
            scripted.cancel()
            await summarizer.aclose()
    finally:
        store.release_q.set()
        store.release_f.set()
        await store.close()
    step = processor.recall_step
    assert step is not None
    assert store.release_f.is_set() and len(_blocks(openai_server)) == 2
    # turn 2's early work made its block, on turn 2's question, and turn 2 took it (its
    # use then depends on the context being the one it was made on)
    assert [b.searched[0] for b in kept] == [NEXT]
    assert taken == [None, NEXT]
    assert archive.served == 2 and archive.follow_ups_served >= 1

"""The conversation's clock runs on the event loop's clock (S13-F-1): an archived message is
dated by ``MemoryParams.conversation_started_at`` plus the time since the call started as
the running loop measures it. On the replay's simulated clock that is the modelled time, the
same from one run to the next; before, it was the wall time the replay took (milliseconds
for minutes of call), so a time question's "how long ago" label was wall-clock noise.

Through real pipelines (the replay's call driver: a real ``LLMContextAggregatorPair`` and
the replay LLM, ``ContextSummarizer`` with a real SQLite store)."""

from __future__ import annotations

import asyncio
import calendar
import time

from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import ContextSummarizer, MemoryParams, WriterParams
from pipecat_summarizer._session.clock import ConversationClock
from pipecat_summarizer.store import MemoryStore, open_store
from pipecat_summarizer_cli.replay import clock
from pipecat_summarizer_cli.replay.call_driver import CallDriver
from pipecat_summarizer_cli.replay.store_sink import HeldClockStore
from pipecat_summarizer_cli.replay.transcript import transcript_from_messages
from tests.support.pipeline_utils import cfg
from tests.support.replay_fakes import StandInSummarizer, conversation

MAY_4 = float(calendar.timegm((2026, 5, 4, 14, 5, 0)))
GAP_S = 180.0  # three modelled minutes between the caller's turns
TURNS = 8
FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)


async def _call(store: MemoryStore, started_at: float | None, gap_s: float) -> list[float]:
    """A call of ``TURNS`` turns ``gap_s`` apart (compacting at six messages, keeping two),
    then the archived messages' dates (oldest first)."""
    transcript = transcript_from_messages(conversation(TURNS))
    context = LLMContext(messages=list(transcript.preamble))
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=6, keep=2),
        summarizer=StandInSummarizer(),
        store=store,
        call_id="c1",
        user_id="alice",
        memory=MemoryParams(writer=FAST, conversation_started_at=started_at),
    )
    call = CallDriver(context, transcript.turns, [processor])
    await call.start()
    for i, turn in enumerate(transcript.turns):
        if i:
            await asyncio.sleep(gap_s)  # the caller's pause: modelled on a simulated clock
        await call.turn(turn.inputs, i + 1)
    await call.end()
    calls = await store.calls("alice")
    assert len(calls) == 1
    return [m.at for m in await store.messages(calls[0].call_id)]


def test_archived_messages_are_dated_by_the_modelled_time_on_a_simulated_clock(tmp_path):
    """Turns three modelled minutes apart on the replay's simulated clock: each archived
    message's date is the given start plus a whole number of those minutes, exactly (the
    call's processing takes no modelled time), spread over the call; before the fix they
    were the start plus the milliseconds of wall time the replay took."""

    async def main() -> list[float]:
        # the store's I/O holds the simulated clock (as the replay's --store does)
        store = HeldClockStore(open_store(str(tmp_path / "clock.db")))  # type: ignore[call-arg]
        try:
            return await _call(store, MAY_4, GAP_S)
        finally:
            await store.close()

    dates = clock.run(main())
    offsets = [at - MAY_4 for at in dates]
    assert len(offsets) >= 2 * TURNS  # every message, summarized ones and those left in view
    assert all(o >= 0 and o % GAP_S == 0 for o in offsets), offsets
    # compactions during the call, the rest at its end: the dates follow the modelled turns
    assert min(offsets) < max(offsets) == GAP_S * (TURNS - 1)
    assert offsets == sorted(offsets)


async def test_without_a_given_start_a_message_is_dated_by_the_wall_clock(tmp_path):
    """On a real loop with no ``conversation_started_at``: the wall clock at the start plus
    the loop's (monotonic) time since, so within the wall-clock bounds of the call."""
    store = open_store(str(tmp_path / "wall.db"))
    before = time.time()
    try:
        dates = await _call(store, None, 0.01)
    finally:
        after = time.time()
        await store.close()
    assert len(dates) >= 2 * TURNS
    assert all(before <= at <= after for at in dates), (before, dates, after)


def test_the_clock_counts_on_the_loop_it_started_on_and_without_one_on_monotonic_time():
    """Started on a simulated loop, it reads that loop's time even once the loop is done
    (the call's end, a synchronous caller): no jump to the wall clock. Started with no loop
    running, it counts on ``time.monotonic()``."""

    async def main() -> ConversationClock:
        conv = ConversationClock(MAY_4)
        conv.start(wall=123.0)  # the wall start is only the epoch when none was given
        await asyncio.sleep(90.0)
        assert conv.now() == MAY_4 + 90.0
        return conv

    conv = clock.run(main())
    assert conv.now() == MAY_4 + 90.0  # the loop is closed: its clock stands where it ended

    sync = ConversationClock(None)
    sync.start(wall=1000.0)
    first = sync.now()
    assert 1000.0 <= first <= sync.now() < 1000.0 + 3600.0

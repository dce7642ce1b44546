"""Attacks on the conversation's clock (95c7050, ``_session/clock.ConversationClock``): the
epoch (``conversation_started_at``, else the wall clock once at the start) plus the time
elapsed on the clock of the loop the call started on.

- the system clock stepped back an hour mid-call (``time.time`` patched): the elapsed part
  never goes back, and neither does ``now()``;
- ``conversation_started_at`` 30 years back and a long call (days on a simulated loop):
  dates stay in order, the epoch plus the modelled time exactly;
- the loop the call started on replaced (a simulated loop closed, the clock then read from a
  new real loop): ``now()`` stands still (never back; the dates after it freeze at the old
  loop's last instant: noted in the report, not asserted as a promise).
"""

from __future__ import annotations

import asyncio
import time

from pipecat_summarizer._session.clock import ConversationClock
from pipecat_summarizer_cli.replay.clock import SimulatedClockLoop


def test_attack_clock_the_wall_clock_stepped_back_mid_call(monkeypatch):
    # fails if the elapsed part were measured on time.time
    real = time.time

    async def call() -> list[float]:
        clock = ConversationClock()
        clock.start()
        seen = [clock.now()]
        monkeypatch.setattr(time, "time", lambda: real() - 3600.0)
        await asyncio.sleep(0.01)
        seen.append(clock.now())
        monkeypatch.setattr(time, "time", real)
        seen.append(clock.now())
        return seen

    seen = asyncio.run(call())
    assert seen == sorted(seen)
    assert seen[1] - seen[0] >= 0.01


def test_attack_clock_an_old_epoch_and_a_long_simulated_call():
    epoch = time.time() - 30 * 365 * 86400.0
    loop = SimulatedClockLoop(start=1_000.0)
    try:

        async def call() -> list[float]:
            clock = ConversationClock(epoch)
            clock.start()
            seen = []
            for _ in range(5):
                await asyncio.sleep(86400.0)  # a modelled day between messages
                seen.append(clock.now())
            return seen

        seen = loop.run_until_complete(call())
    finally:
        loop.close()
    assert seen == [epoch + 86400.0 * (k + 1) for k in range(5)]


def test_attack_clock_read_after_its_loop_was_replaced():
    loop = SimulatedClockLoop(start=0.0)
    clock = ConversationClock(1_000_000.0)
    try:

        async def first() -> float:
            clock.start()
            await asyncio.sleep(60.0)
            return clock.now()

        before = loop.run_until_complete(first())
    finally:
        loop.close()

    async def second() -> list[float]:
        seen = [clock.now()]
        await asyncio.sleep(0.02)
        seen.append(clock.now())
        return seen

    after = asyncio.run(second())
    print(f"\nbefore the new loop {before}, on it {after}")
    assert before == 1_000_060.0
    assert after[0] >= before and after == sorted(after)

"""What one strategy's run records: summarizer calls and their outcomes, events, the queue.

A :class:`Recorder` is fed from the outside only: by the metered backends
(:mod:`pipecat_summarizer_cli.replay.backends`), which see every call the strategy makes to its
summarizer, and by the public events of the processors (``on_context_compacted``,
``on_summary_failed``, ``on_messages_evicted`` of ``ContextSummarizer``; ``on_summary_applied``
of Pipecat's assistant aggregator). No private state of either is read.

Every summarizer request ends in exactly one outcome: the backend answered (the summary was
then applied, or discarded by the strategy), it failed, or it was still running when the call
ended (cancelled). ``discarded`` is therefore ``returned - applied``: a summary that came back
and was never spliced in (Pipecat's built-in drops a result overtaken by a newer request, or
one whose context no longer fits; ours drops one whose messages were replaced meanwhile).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Literal

Outcome = Literal["running", "returned", "failed", "cancelled"]


@dataclass
class SummaryCall:
    """One request to the summarizer.

    Parameters:
        turn: The user turn during which it was sent.
        input_tokens: Tokens sent (prompt and transcript).
        output_tokens: Tokens returned (0 unless it returned).
        outcome: How it ended.
    """

    turn: int
    input_tokens: int
    output_tokens: int = 0
    outcome: Outcome = "running"


@dataclass
class Recorder:
    """The counters of one strategy's run (see the module docstring).

    Parameters:
        turn: The user turn in progress (set by the runner).
        calls: Every request that reached the summarizer, in order.
        rejected: Calls refused by a simulated outage (never reached the backend).
        applied: Summaries spliced into the context.
        applied_turns: The turn of each applied summary.
        failures: Failed attempts as the strategy saw them (backend errors, outage
            rejections; for ours also results it could not apply).
        evictions: Ours: evictions under the ceiling.
        messages_evicted: Ours: messages those evictions moved.
        eviction_turns: Ours: the turn of each eviction.
        pending_per_turn: Ours: messages waiting in the eviction queue after each turn.
        pending_max: Ours: the largest queue seen.
        hot_path_ns: Ours: nanoseconds spent on each user-turn context frame.
        barge_ins: User turns that started while the bot was speaking.
    """

    turn: int = 0
    calls: list[SummaryCall] = field(default_factory=list)
    rejected: int = 0
    applied: int = 0
    applied_turns: list[int] = field(default_factory=list)
    failures: int = 0
    evictions: int = 0
    messages_evicted: int = 0
    eviction_turns: list[int] = field(default_factory=list)
    pending_per_turn: list[int] = field(default_factory=list)
    pending_max: int = 0
    hot_path_ns: list[int] = field(default_factory=list)
    barge_ins: int = 0
    _running: int = field(default=0, init=False, repr=False)
    _idle: asyncio.Event | None = field(default=None, init=False, repr=False)

    # -- summarizer calls ------------------------------------------------------------------

    def call_started(self, input_tokens: int) -> SummaryCall:
        """Record a request on its way to the backend."""
        call = SummaryCall(self.turn, input_tokens)
        self.calls.append(call)
        self._running += 1
        self._idle_event().clear()
        return call

    def call_ended(self, call: SummaryCall, outcome: Outcome, output_tokens: int = 0) -> None:
        """Record how a request ended."""
        call.outcome = outcome
        call.output_tokens = output_tokens
        self._running -= 1
        if self._running == 0:
            self._idle_event().set()

    @property
    def in_flight(self) -> int:
        """Requests still waiting for the backend."""
        return self._running

    async def wait_idle(self) -> None:
        """Return once no request is waiting for the backend."""
        if self._running:
            await self._idle_event().wait()

    def _idle_event(self) -> asyncio.Event:
        if self._idle is None:
            self._idle = asyncio.Event()
            if not self._running:
                self._idle.set()
        return self._idle

    # -- outcomes --------------------------------------------------------------------------

    def summary_applied(self) -> None:
        """A summary was spliced into the context."""
        self.applied += 1
        self.applied_turns.append(self.turn)

    def summary_failed(self) -> None:
        """An attempt failed."""
        self.failures += 1

    def count(self, outcome: Outcome) -> int:
        """Requests that ended with ``outcome``."""
        return sum(1 for c in self.calls if c.outcome == outcome)

    @property
    def discarded(self) -> int:
        """Summaries that came back and were not applied."""
        return max(0, self.count("returned") - self.applied)

    # -- ours' eviction queue --------------------------------------------------------------

    def evicted(self, messages: int, pending: int) -> None:
        """An eviction under the ceiling moved ``messages``; ``pending`` wait afterwards."""
        self.evictions += 1
        self.messages_evicted += messages
        self.eviction_turns.append(self.turn)
        self.pending_max = max(self.pending_max, pending)

    def turn_ended(self, pending: int) -> None:
        """The eviction queue's length after a turn."""
        self.pending_per_turn.append(pending)
        self.pending_max = max(self.pending_max, pending)

"""The replay runner: one real Pipecat pipeline per strategy, fed turn by turn on a clock.

Each strategy (:mod:`pipecat_summarizer_cli.replay.strategies`) runs on its own copy of the
transcript. Every run happens on a :class:`~pipecat_summarizer_cli.replay.clock.SimulatedClockLoop`
(a worker thread gets one when the caller's loop is a standard one), so time is simulated and
the outcome does not depend on the machine's speed.

Two modes:

* **instant** (``model=None``): each user turn is queued as
  ``LLMMessagesAppendFrame(inputs, run_llm=True)``; the replay LLM answers at once; then ten
  simulated minutes pass before the next turn, so any summary started has landed (the
  summarizer answers at once) and ours' retry backoff has expired. Both summarizers get the
  best case: a summary that lands before the user speaks again, and no interruptions.
* **real time** (a :class:`~pipecat_summarizer_cli.replay.timing.CallModel`): each user turn
  starts with an ``InterruptionFrame``, as Pipecat's user aggregator broadcasts one at every
  user turn start (``enable_interruptions``, the default); the user speaks, the end of the
  turn is detected, the context frame goes down, the replay LLM answers after the modelled
  response latency, the bot speaks its answer, and the next user turn starts after a pause
  or, on a barge-in, while the bot is still speaking. Summaries take the modelled latency.
  A slow summary overtaken by the next turn is what Pipecat's built-in discards.

A call ends once the bot has finished its last answer and no summary is in flight any more.

Ceiling and outage. ``ceiling=CeilingParams(max_request_tokens=N)`` makes ours evict the oldest
units into its pending queue whenever a request would exceed ``N``; the recorder keeps the
queue after every turn and on every ``on_messages_evicted``. An :class:`Outage` makes the
summarizer backend of both summarizing strategies fail for a span of turns (calls during it
never reach the backend: counted as failures, not as summarizer tokens). Ours keeps its
default retry backoff (5 s, doubling to 120 s) on the simulated clock.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pipecat.frames.frames import EndFrame, InterruptionFrame, LLMMessagesAppendFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.workers.runner import WorkerRunner

from pipecat_summarizer import CeilingParams, ContextSummarizerParams
from pipecat_summarizer_cli.replay import clock
from pipecat_summarizer_cli.replay.backends import (
    OUTAGE_ERROR,
    Backend,
    Outage,
    extractive_backend,
    openai_backend,
)
from pipecat_summarizer_cli.replay.recorder import Recorder
from pipecat_summarizer_cli.replay.replay_llm import RecordedRequest, ReplayLLM
from pipecat_summarizer_cli.replay.report import (
    STRATEGIES,
    RequestTokens,
    StrategyResult,
    TokenTable,
    request_text,
)
from pipecat_summarizer_cli.replay.strategies import STRATEGY_CLASSES, Setup, Strategy, Thresholds
from pipecat_summarizer_cli.replay.timing import CallModel, TurnTiming, next_turn_start, plan_call
from pipecat_summarizer_cli.replay.transcript import Transcript, context_messages

__all__ = [
    "OUTAGE_ERROR",
    "Backend",
    "CallModel",
    "Outage",
    "Thresholds",
    "extractive_backend",
    "openai_backend",
    "replay_options",
    "run_all",
    "run_strategy",
]

ProgressFn = Callable[[str, int], None]

INSTANT_GAP_S = 600.0
"""Simulated seconds between two turns in instant mode: longer than any summary can take
and than ours' largest retry backoff (120 s)."""


def replay_options(max_request_tokens: int | None = None, **kwargs: Any) -> ContextSummarizerParams:
    """``ContextSummarizerParams`` for a replay: the defaults, with the given ceiling.

    Args:
        max_request_tokens: Ours' hard ceiling (``None``: none).
        **kwargs: Any other ``ContextSummarizerParams`` field.
    """
    ceiling = CeilingParams(max_request_tokens) if max_request_tokens is not None else None
    return ContextSummarizerParams(ceiling=ceiling, **kwargs)


@dataclass
class _Turns:
    """Tells the driver when a turn is answered: the replay LLM has pushed the turn's last
    response and the assistant aggregator has finished every response pushed so far (one
    ``on_assistant_turn_stopped`` per ``LLMFullResponseEndFrame``, after the context write)."""

    current: int = 0
    answered_turn: int = 0
    answered_responses: int = 0
    stopped_responses: int = 0
    done: asyncio.Event | None = None

    def check(self) -> None:
        if (
            self.current
            and self.answered_turn == self.current
            and self.stopped_responses >= self.answered_responses
            and self.done is not None
        ):
            self.done.set()


def _request_tokens(
    recorded: Sequence[RecordedRequest], table: TokenTable, answers: dict[tuple[int, int], int]
) -> list[RequestTokens]:
    return [
        RequestTokens(
            turn=r.turn,
            messages=r.messages,
            message_tokens=tuple(table.message(m) for m in r.messages),
            system_tokens=table.system(r.system_instruction),
            answer_tokens=answers.get((r.turn, r.step), 0),
            system_instruction=r.system_instruction,
            step=r.step,
        )
        for r in recorded
    ]


def _answer_tokens(transcript: Transcript, table: TokenTable) -> dict[tuple[int, int], int]:
    answers = {}
    for turn in transcript.turns:
        for i, step in enumerate(turn.steps):
            tokens = table.text(step.text)
            for call in step.tool_calls:
                tokens += table.text(call.name + json.dumps(call.arguments))
            answers[(turn.index, i)] = tokens
    return answers


def _for_step(seconds: tuple[float, ...], step: int) -> float:
    """A turn's timing for request ``step`` (the last one's for any request beyond)."""
    return seconds[min(step, len(seconds) - 1)] if seconds else 0.0


class _Run:
    """One strategy's pipeline, driven turn by turn."""

    def __init__(
        self,
        transcript: Transcript,
        strategy: Strategy,
        *,
        model: CallModel | None,
        timings: list[TurnTiming] | None,
        progress: ProgressFn | None,
        turn_timeout: float,
    ):
        self.transcript = transcript
        self.strategy = strategy
        self.recorder = strategy.recorder
        self.model = model
        self.timings = timings
        self.progress = progress
        self.turn_timeout = turn_timeout
        self.turns = _Turns()
        self.call_seconds = 0.0

        context = LLMContext(messages=context_messages(transcript.preamble))
        user_agg, assistant_agg = LLMContextAggregatorPair(
            context, assistant_params=strategy.assistant_params()
        )
        strategy.watch(assistant_agg)
        self.replay = ReplayLLM(
            [t.steps for t in transcript.turns],
            on_turn_answered=self._answered,
            response_delay=self._response_delay if timings is not None else None,
            generation_time=self._generation_time if timings is not None else None,
        )

        @assistant_agg.event_handler("on_assistant_turn_stopped")
        async def _stopped(_agg, _message):
            self.turns.stopped_responses += 1
            self.turns.check()

        before = strategy.before_llm(context)
        processors = [user_agg, *before, self.replay, *strategy.after_llm(), assistant_agg]
        self.worker = PipelineWorker(
            Pipeline(processors),
            params=PipelineParams(),
            cancel_on_idle_timeout=False,
            idle_timeout_secs=None,
            enable_rtvi=False,
            enable_turn_tracking=False,
        )
        self.started = asyncio.Event()

        @self.worker.event_handler("on_pipeline_started")
        async def _on_started(_worker, _frame):
            self.started.set()

    def _answered(self, turn: int) -> None:
        self.turns.answered_turn = turn
        self.turns.answered_responses = self.replay.responses

    def _response_delay(self, turn: int, step: int) -> float:
        assert self.timings is not None
        return _for_step(self.timings[turn - 1].response_s, step)

    def _generation_time(self, turn: int, step: int) -> float:
        assert self.timings is not None
        return _for_step(self.timings[turn - 1].generation_s, step)

    async def _turn(self, index: int, timing: TurnTiming | None) -> None:
        turn = self.transcript.turns[index]
        if timing is not None and self.model is not None:
            # Pipecat's user aggregator broadcasts an interruption at every user turn start
            await self.worker.queue_frame(InterruptionFrame())
            await asyncio.sleep(timing.user_speech_s + self.model.end_of_turn_s)
        self.turns.done = asyncio.Event()
        self.turns.current = turn.index
        self.recorder.turn = turn.index
        self.replay.begin_turn(turn.index)
        await self.worker.queue_frame(
            LLMMessagesAppendFrame(messages=context_messages(turn.inputs), run_llm=True)
        )
        try:
            await asyncio.wait_for(self.turns.done.wait(), timeout=self.turn_timeout)
        except TimeoutError:
            raise RuntimeError(
                f"{self.strategy.name}: turn {turn.index} (line {turn.line}) was not answered "
                f"within {self.turn_timeout:.0f}s"
            ) from None

    async def drive(self) -> None:
        await asyncio.wait_for(self.started.wait(), timeout=10)
        origin = clock.now()
        next_start = 0.0
        turns = self.transcript.turns
        for i, turn in enumerate(turns):
            timing = self.timings[i] if self.timings is not None else None
            if timing is not None:
                await asyncio.sleep(max(0.0, origin + next_start - clock.now()))
            await self._turn(i, timing)
            if timing is not None:
                # the bot speaks from the final answer's first word, while it still streams
                streaming = timing.generation_s[-1] if timing.generation_s else 0.0
                answered = clock.now() - origin - streaming
                following = self.timings[i + 1] if i + 1 < len(turns) else None  # type: ignore[index]
                next_start, barge_in = next_turn_start(timing, answered, following)
                if following is not None and barge_in:
                    self.recorder.barge_ins += 1
            else:
                await asyncio.sleep(INSTANT_GAP_S)
            self.strategy.turn_ended()
            if self.progress is not None:
                self.progress(self.strategy.name, turn.index)
        if self.timings is not None and turns:
            await asyncio.sleep(max(0.0, origin + next_start - clock.now()))
        self.call_seconds = clock.now() - origin
        # the call is over: let the summaries in flight land before the pipeline ends
        await asyncio.wait_for(self.recorder.wait_idle(), timeout=self.turn_timeout)
        await asyncio.sleep(1.0)
        await self.worker.queue_frame(EndFrame())

    async def run(self) -> None:
        error: list[BaseException] = []

        async def guarded() -> None:
            try:
                await self.drive()
            except BaseException as e:
                error.append(e)
                await self.worker.cancel()

        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(self.worker)
        try:
            await asyncio.gather(runner.run(), guarded())
        finally:
            await self.strategy.finish()
        if error:
            raise error[0]

    def result(self, table: TokenTable) -> StrategyResult:
        rec = self.recorder
        requests = _request_tokens(
            self.replay.requests, table, _answer_tokens(self.transcript, table)
        )
        final_text = ""
        if self.replay.requests:
            last = self.replay.requests[-1]
            final_text = request_text(json.loads(m) for m in last.messages)
            if last.system_instruction:
                final_text = last.system_instruction + "\n" + final_text
        strategy = self.strategy
        extra: dict[str, Any] = {"summary_failures": rec.failures}
        if strategy.summarizes and strategy.setup.backend is not None:
            extra["summarizer"] = strategy.setup.backend.name
        if strategy.setup.outage is not None and strategy.summarizes:
            extra["outage_rejected_calls"] = rec.rejected
        if self.timings is not None:
            extra["barge_ins"] = rec.barge_ins
            extra["call_seconds"] = round(self.call_seconds, 1)
        extra.update(strategy.extra())
        return StrategyResult(
            strategy=strategy.name,
            requests=requests,
            summary_calls=[(c.input_tokens, c.output_tokens) for c in rec.calls],
            summaries_applied=rec.applied,
            summaries_discarded=rec.discarded,
            summaries_unfinished=rec.count("cancelled"),
            hot_path_ns=rec.hot_path_ns,
            final_text=final_text,
            turns=len(self.transcript.turns),
            pending_per_turn=rec.pending_per_turn,
            pending_max_messages=rec.pending_max,
            eviction_turns=rec.eviction_turns,
            applied_turns=rec.applied_turns,
            requested_turns=[c.turn for c in rec.calls],
            extra=extra,
        )


async def _on_simulated_clock(make: Callable[[], Any], simulated: bool = True) -> Any:
    """Await ``make()`` on a simulated clock: here if the running loop has one, else on a
    worker thread's own simulated loop (the caller's loop keeps serving meanwhile). With
    ``simulated=False``, on the running loop, in wall time."""
    if not simulated or isinstance(asyncio.get_running_loop(), clock.SimulatedClockLoop):
        return await make()
    return await asyncio.to_thread(clock.run, make())


async def run_strategy(
    transcript: Transcript,
    strategy: str,
    *,
    thresholds: Thresholds | None = None,
    backend: Backend | None = None,
    options: ContextSummarizerParams | None = None,
    table: TokenTable | None = None,
    progress: ProgressFn | None = None,
    turn_timeout: float = 60.0,
    outage: Outage | None = None,
    model: CallModel | None = None,
    simulated: bool = True,
    store: str | None = None,
) -> StrategyResult:
    """Replay ``transcript`` through a real pipeline with one strategy.

    Args:
        transcript: The conversation.
        strategy: ``full_buffer``, ``pipecat_builtin`` or ``pipecat_summarizer``.
        thresholds: The trigger thresholds.
        backend: The summarizer backend (required unless ``full_buffer``).
        options: ``ContextSummarizerParams`` for ours (default: :func:`replay_options`).
        table: Token table (shared across strategies to count each message once).
        progress: Called with ``(strategy, turn)`` after each turn.
        turn_timeout: Simulated seconds to wait for one turn before giving up.
        outage: Turns during which the summarizer backend fails (both summarizing
            strategies).
        model: Replay in simulated real time with this call model; ``None``: instant.
        simulated: Run on the simulated clock (the default); ``False`` runs in wall time on
            the running loop (every modelled second takes a second: to check the clock).
        store: Ours archives the call into this store (a SQLite path or a
            ``postgresql://`` DSN), as call ``<transcript name>-<strategy>``.

    Returns:
        What was measured.

    Raises:
        ValueError: On an unknown strategy or a missing backend.
        RuntimeError: If a turn is not answered in time.
    """
    if not simulated and model is None:
        raise ValueError("a wall-time replay needs a call model (instant mode has no time)")
    if strategy not in STRATEGY_CLASSES:
        raise ValueError(f"unknown strategy {strategy!r} (expected one of {', '.join(STRATEGIES)})")
    table = table or TokenTable()

    async def go() -> StrategyResult:
        setup = Setup(
            thresholds=thresholds or Thresholds(),
            backend=backend,
            options=options or replay_options(),
            table=table,
            latency=model.summary_latency() if model is not None else None,
            outage=outage,
            store=store,
            call_id=f"{transcript.name}-{strategy}",
        )
        run = _Run(
            transcript,
            STRATEGY_CLASSES[strategy](setup, Recorder()),
            model=model,
            timings=plan_call(transcript, model) if model is not None else None,
            progress=progress,
            turn_timeout=turn_timeout,
        )
        await run.run()
        return run.result(table)

    return await _on_simulated_clock(go, simulated)


async def run_all(
    transcript: Transcript,
    *,
    strategies: Sequence[str] = STRATEGIES,
    thresholds: Thresholds | None = None,
    backend: Backend | None = None,
    options: ContextSummarizerParams | None = None,
    progress: ProgressFn | None = None,
    turn_timeout: float = 60.0,
    outage: Outage | None = None,
    model: CallModel | None = None,
    simulated: bool = True,
    on_strategy_done: Callable[[str], None] | None = None,
    store: str | None = None,
) -> list[StrategyResult]:
    """Run each strategy on the same transcript, one after the other (same arguments as
    :func:`run_strategy`)."""
    table = TokenTable()

    async def go() -> list[StrategyResult]:
        results = []
        for strategy in strategies:
            results.append(
                await run_strategy(
                    transcript,
                    strategy,
                    thresholds=thresholds,
                    backend=backend,
                    options=options,
                    table=table,
                    progress=progress,
                    turn_timeout=turn_timeout,
                    outage=outage,
                    model=model,
                    simulated=simulated,
                    store=store,
                )
            )
            if on_strategy_done is not None:
                on_strategy_done(strategy)
        return results

    return await _on_simulated_clock(go, simulated)

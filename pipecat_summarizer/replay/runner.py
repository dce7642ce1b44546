"""The replay runner: one real Pipecat pipeline per strategy, fed turn by turn.

Each strategy runs ``Pipeline([user_agg, <ContextSummarizer>, ReplayLLM, assistant_agg])``
with a real ``LLMContextAggregatorPair`` on its own copy of the transcript:

* ``full_buffer``: no summarization.
* ``pipecat_builtin``: ``LLMAssistantAggregatorParams(enable_auto_context_summarization=True)``
  with the thresholds, and the summarizer backend as its dedicated ``summary_config.llm``.
* ``pipecat_summarizer``: ``ContextSummarizer`` between the user aggregator and the LLM,
  same thresholds, same backend.

Each user turn is queued as ``LLMMessagesAppendFrame(inputs, run_llm=True)``. The runner
waits until the replay LLM has answered the turn's last step and the assistant aggregator
has written it, then until any summary in flight has been applied (the ``ContextSummarizer``
task, or the built-in's dedicated-LLM task), and only then sends the next turn. This makes
a run deterministic and gives both summarizers the same, best case: a summary that lands
before the user speaks again. In a live call a slow summarizer lands later (ours keeps
working; the built-in discards a summary overtaken by a user turn).

Ceiling and outage. ``SummarizerOptions(max_request_tokens=N)`` makes ours evict the oldest
units into its pending queue whenever a request would exceed ``N``; the runner records the
queue after every turn and on every ``on_messages_evicted``. An :class:`Outage` makes the
summarizer backend of both summarizing strategies fail for a span of turns: any call made
while the current turn is in ``[start, start + turns)`` raises (``SummarizerError`` for ours;
the built-in's dedicated LLM's ``run_inference`` raises too). Rejected calls never reach the
backend, so they are counted as failures, not as summarizer tokens. Turns come much faster
than real time, so ours runs with :func:`replay_options` (a 10 ms retry backoff, capped at
10 ms, instead of 5 s doubling to 120 s) and the runner lets that backoff expire after a turn
with a failure: a failed summarizer is retried once per turn, at the next turn's context
frame. In a live call the first attempt after an outage can come up to two minutes later.

Timed hot path (``hot_path_ns``): for ``pipecat_summarizer``, its own work on every user-turn
``LLMContextFrame`` (``ContextSummarizer._on_context_frame``); for ``pipecat_builtin``, the
assistant aggregator's ``LLMContextSummarizer.process_frame`` on every
``LLMFullResponseStartFrame`` (its threshold check, token estimate included, and the request
when it trips); nothing for ``full_buffer``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pipecat.frames.frames import (
    EndFrame,
    LLMFullResponseStartFrame,
    LLMMessagesAppendFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMAssistantAggregatorParams,
    LLMContextAggregatorPair,
)
from pipecat.services.llm_service import LLMService
from pipecat.utils.context.llm_context_summarization import (
    LLMAutoContextSummarizationConfig,
    LLMContextSummaryConfig,
)
from pipecat.workers.runner import WorkerRunner

from pipecat_summarizer.events import MessagesEvictedEvent
from pipecat_summarizer.processor import ContextSummarizer, SummarizerOptions
from pipecat_summarizer.prompt import SummaryRequest
from pipecat_summarizer.replay.replay_llm import RecordedRequest, ReplayLLM
from pipecat_summarizer.replay.report import (
    STRATEGIES,
    RequestTokens,
    StrategyResult,
    TokenTable,
    request_text,
)
from pipecat_summarizer.replay.transcript import Transcript
from pipecat_summarizer.summarizers.base import Summarizer, SummarizerError

ProgressFn = Callable[[str, int], None]


@dataclass(frozen=True)
class Thresholds:
    """The trigger thresholds, shared by both summarizing strategies (Pipecat's defaults).

    Parameters:
        max_context_tokens: ``max_context_tokens`` (``None`` disables it).
        max_unsummarized_messages: ``max_unsummarized_messages`` (``None`` disables it).
        keep: ``min_messages_after_summary``.
        target_tokens: ``target_context_tokens``, the summary's output budget (``None``:
            Pipecat's default, 6,000, lowered by Pipecat to 80% of ``max_context_tokens``
            when larger).
    """

    max_context_tokens: int | None = 8000
    max_unsummarized_messages: int | None = 20
    keep: int = 4
    target_tokens: int | None = None

    def config(self, llm: LLMService | None = None) -> LLMAutoContextSummarizationConfig:
        """A fresh Pipecat config with these thresholds (and a dedicated LLM if given)."""
        summary = LLMContextSummaryConfig(min_messages_after_summary=self.keep, llm=llm)
        if self.target_tokens is not None:
            summary.target_context_tokens = self.target_tokens
        return LLMAutoContextSummarizationConfig(
            max_context_tokens=self.max_context_tokens,
            max_unsummarized_messages=self.max_unsummarized_messages,
            summary_config=summary,
        )


REPLAY_RETRY_BACKOFF_S = 0.01
"""Ours' retry backoff in a replay (seconds, also the cap): turns come faster than real
time, so the default 5 s (doubling to 120 s) would keep a recovered summarizer idle for the
rest of the replay."""


_MAX_BACKOFF_WAIT_S = 0.05  # the longest the runner waits for ours' backoff after a turn


def replay_options(max_request_tokens: int | None = None, **kwargs: Any) -> SummarizerOptions:
    """``SummarizerOptions`` for a replay: the defaults, except the retry backoff.

    Args:
        max_request_tokens: Ours' hard ceiling (``None``: none).
        **kwargs: Any other ``SummarizerOptions`` field.
    """
    kwargs.setdefault("retry_backoff_s", REPLAY_RETRY_BACKOFF_S)
    kwargs.setdefault("max_retry_backoff_s", REPLAY_RETRY_BACKOFF_S)
    return SummarizerOptions(max_request_tokens=max_request_tokens, **kwargs)


@dataclass(frozen=True)
class Outage:
    """A span of user turns during which the summarizer backend fails.

    Parameters:
        start: First turn of the outage (1-based).
        turns: Its length in turns.
    """

    start: int
    turns: int

    def __post_init__(self):
        """Validate the span."""
        if self.start < 1 or self.turns < 1:
            raise ValueError("an outage starts at turn 1 or later and lasts at least one turn")

    @property
    def end(self) -> int:
        """The first turn after the outage."""
        return self.start + self.turns

    def covers(self, turn: int) -> bool:
        """True when ``turn`` is inside the outage."""
        return self.start <= turn < self.end


OUTAGE_ERROR = "summarizer down (simulated outage)"


class _OutageSummarizer:
    """Fails every call made while ``is_down()``; otherwise calls the wrapped backend."""

    def __init__(self, inner: Summarizer, is_down: Callable[[], bool], rejected: list[int]):
        self.inner = inner
        self._is_down = is_down
        self._rejected = rejected

    async def summarize(self, request: SummaryRequest) -> Any:
        if self._is_down():
            self._rejected[0] += 1
            raise SummarizerError(OUTAGE_ERROR)
        return await self.inner.summarize(request)


def _outage_inference(
    llm: LLMService, is_down: Callable[[], bool], rejected: list[int], on_error: Callable[[], None]
) -> None:
    """Wrap ``llm.run_inference`` (the built-in's summary call) to fail while ``is_down()``."""
    original = llm.run_inference

    async def maybe_down(context: LLMContext, *args: Any, **kwargs: Any) -> str | None:
        if is_down():
            rejected[0] += 1
            on_error()
            raise SummarizerError(OUTAGE_ERROR)
        return await original(context, *args, **kwargs)

    llm.run_inference = maybe_down  # type: ignore[method-assign]


@dataclass
class Backend:
    """One summarizer backend, in the two shapes the strategies need.

    Parameters:
        name: For the report.
        make_summarizer: Builds the backend for ``ContextSummarizer``.
        make_llm: Builds the same backend as a Pipecat ``LLMService``, the built-in's
            dedicated summary LLM.
    """

    name: str
    make_summarizer: Callable[[], Summarizer]
    make_llm: Callable[[], LLMService]


def extractive_backend() -> Backend:
    """The offline extractive summarizer (no network, deterministic)."""
    from pipecat_summarizer.summarizers.extractive import (
        ExtractiveLLMService,
        ExtractiveSummarizer,
    )

    return Backend("extractive", ExtractiveSummarizer, ExtractiveLLMService)


def openai_backend(*, model: str, base_url: str | None, api_key: str | None) -> Backend:
    """An OpenAI-compatible endpoint: ``OpenAISummarizer`` and ``OpenAILLMService``."""
    from pipecat.services.openai.llm import OpenAILLMService

    from pipecat_summarizer.summarizers.openai import OpenAISummarizer

    def make_summarizer() -> Summarizer:
        return OpenAISummarizer(model=model, base_url=base_url, api_key=api_key)

    def make_llm() -> LLMService:
        return OpenAILLMService(
            api_key=api_key or "not-needed",
            base_url=base_url,
            settings=OpenAILLMService.Settings(model=model),
        )

    return Backend(f"openai:{model}", make_summarizer, make_llm)


class _CountingSummarizer:
    """Wraps a backend and counts what it is sent and returns."""

    def __init__(self, inner: Summarizer, table: TokenTable, calls: list[tuple[int, int]]):
        self.inner = inner
        self._table = table
        self._calls = calls

    async def summarize(self, request: SummaryRequest) -> Any:
        sent = self._table.system(request.system_prompt) + self._table.counter.count_message(
            {"role": "user", "content": request.user_message}
        )
        try:
            answer = await self.inner.summarize(request)
        except Exception:
            self._calls.append((sent, 0))
            raise
        # A backend returns the text, or an object carrying it (``SummaryResult``).
        text = answer if isinstance(answer, str) or answer is None else getattr(answer, "text", "")
        self._calls.append((sent, self._table.text(text)))
        return answer


def _count_inference(
    llm: LLMService,
    table: TokenTable,
    calls: list[tuple[int, int]],
    on_error: Callable[[], None] | None = None,
) -> None:
    """Wrap ``llm.run_inference`` (the built-in's summary call) to count its tokens."""
    original = llm.run_inference

    async def counted(context: LLMContext, *args: Any, **kwargs: Any) -> str | None:
        # run_inference(context, max_tokens=None, system_instruction=None, ...)
        system = kwargs.get("system_instruction", args[1] if len(args) > 1 else None)
        sent = sum(table.counter.count_message(m) for m in context.messages)
        sent += table.system(system if isinstance(system, str) else None)
        try:
            text = await original(context, *args, **kwargs)
        except Exception:
            calls.append((sent, 0))
            if on_error is not None:
                on_error()
            raise
        calls.append((sent, table.text(text)))
        return text

    llm.run_inference = counted  # type: ignore[method-assign]


def _time_frames(obj: Any, frame_type: type, sink: list[int], direction: Any = None) -> None:
    """Wrap ``obj.process_frame`` to record the nanoseconds spent on ``frame_type`` frames."""
    original = obj.process_frame

    async def timed(frame, *args):
        if isinstance(frame, frame_type) and (direction is None or (args and args[0] == direction)):
            t0 = time.perf_counter_ns()
            await original(frame, *args)
            sink.append(time.perf_counter_ns() - t0)
        else:
            await original(frame, *args)

    obj.process_frame = timed


def _time_context_work(ours: ContextSummarizer, sink: list[int]) -> None:
    """Record the nanoseconds ours spends deciding on each user-turn context frame.

    Like the built-in's measurement (its threshold check), this times the summarizer's own
    work, not Pipecat's frame plumbing around it, which every processor pays alike.
    """
    original = ours._on_context_frame

    async def timed():
        t0 = time.perf_counter_ns()
        await original()
        sink.append(time.perf_counter_ns() - t0)

    ours._on_context_frame = timed


def _request_tokens(
    recorded: Sequence[RecordedRequest], table: TokenTable, answers: dict[tuple[int, int], int]
) -> list[RequestTokens]:
    out = []
    for r in recorded:
        out.append(
            RequestTokens(
                turn=r.turn,
                messages=r.messages,
                message_tokens=tuple(table.message(m) for m in r.messages),
                system_tokens=table.system(r.system_instruction),
                answer_tokens=answers.get((r.turn, r.step), 0),
                system_instruction=r.system_instruction,
                step=r.step,
            )
        )
    return out


def _answer_tokens(transcript: Transcript, table: TokenTable) -> dict[tuple[int, int], int]:
    answers = {}
    for turn in transcript.turns:
        for i, step in enumerate(turn.steps):
            tokens = table.text(step.text)
            for call in step.tool_calls:
                tokens += table.text(call.name + json.dumps(call.arguments))
            answers[(turn.index, i)] = tokens
    return answers


async def run_strategy(
    transcript: Transcript,
    strategy: str,
    *,
    thresholds: Thresholds = Thresholds(),
    backend: Backend | None = None,
    options: SummarizerOptions | None = None,
    table: TokenTable | None = None,
    progress: ProgressFn | None = None,
    turn_timeout: float = 60.0,
    outage: Outage | None = None,
) -> StrategyResult:
    """Replay ``transcript`` through a real pipeline with one strategy.

    Args:
        transcript: The conversation.
        strategy: ``full_buffer``, ``pipecat_builtin`` or ``pipecat_summarizer``.
        thresholds: The trigger thresholds.
        backend: The summarizer backend (required unless ``full_buffer``).
        options: ``SummarizerOptions`` for ours (default: :func:`replay_options`).
        table: Token table (shared across strategies to count each message once).
        progress: Called with ``(strategy, turn)`` after each turn.
        turn_timeout: Seconds to wait for one turn before giving up.
        outage: Turns during which the summarizer backend fails (both summarizing
            strategies).

    Returns:
        What was measured.

    Raises:
        RuntimeError: If a turn is not answered in time.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r} (expected one of {', '.join(STRATEGIES)})")
    if strategy != "full_buffer" and backend is None:
        raise ValueError(f"strategy {strategy} needs a summarizer backend")
    table = table or TokenTable()
    summary_calls: list[tuple[int, int]] = []
    hot_ns: list[int] = []
    counts = {"applied": 0, "failed": 0, "evictions": 0, "evicted": 0}
    rejected = [0]  # calls refused by the simulated outage
    pending_per_turn: list[int] = []
    eviction_turns: list[int] = []
    pending_max = [0]
    options = options or replay_options()
    current = {"turn": 0}

    def is_down() -> bool:
        return outage is not None and outage.covers(current["turn"])

    context = LLMContext(messages=copy.deepcopy(transcript.preamble))
    assistant_params = LLMAssistantAggregatorParams()
    if strategy == "pipecat_builtin":
        llm = backend.make_llm()

        def _builtin_failed() -> None:
            counts["failed"] += 1

        _count_inference(llm, table, summary_calls, _builtin_failed)
        if outage is not None:
            _outage_inference(llm, is_down, rejected, _builtin_failed)
        assistant_params = LLMAssistantAggregatorParams(
            enable_auto_context_summarization=True,
            auto_context_summarization_config=thresholds.config(llm=llm),
        )
    user_agg, assistant_agg = LLMContextAggregatorPair(context, assistant_params=assistant_params)

    # A turn is done when the replay LLM has pushed the turn's last response and the
    # assistant aggregator has finished every response pushed so far (one
    # on_assistant_turn_stopped per LLMFullResponseEndFrame, after the context write).
    answered = {"turn": 0, "responses": 0}
    stopped = {"responses": 0}
    turn_done = asyncio.Event()

    def on_answered(turn: int) -> None:
        answered["turn"] = turn
        answered["responses"] = replay.responses

    replay = ReplayLLM([t.steps for t in transcript.turns], on_turn_answered=on_answered)

    @assistant_agg.event_handler("on_assistant_turn_stopped")
    async def _on_stopped(_agg, _message):
        stopped["responses"] += 1
        if (
            current["turn"]
            and answered["turn"] == current["turn"]
            and stopped["responses"] >= answered["responses"]
        ):
            turn_done.set()

    ours: ContextSummarizer | None = None
    builtin = None
    processors: list[Any] = [user_agg]
    if strategy == "pipecat_summarizer":
        summarizer: Summarizer = _CountingSummarizer(
            backend.make_summarizer(), table, summary_calls
        )
        if outage is not None:
            summarizer = _OutageSummarizer(summarizer, is_down, rejected)
        ours = ContextSummarizer(
            context=context,
            config=thresholds.config(),
            summarizer=summarizer,
            options=options,
        )

        @ours.event_handler("on_messages_evicted")
        async def _ours_evicted(_proc, event: MessagesEvictedEvent):
            counts["evictions"] += 1
            counts["evicted"] += event.messages_evicted
            eviction_turns.append(current["turn"])
            pending_max[0] = max(pending_max[0], event.pending_messages)

        @ours.event_handler("on_summary_applied")
        async def _ours_applied(_proc, _event):
            counts["applied"] += 1

        @ours.event_handler("on_summary_failed")
        async def _ours_failed(_proc, _event):
            counts["failed"] += 1

        _time_context_work(ours, hot_ns)
        processors.append(ours)
    elif strategy == "pipecat_builtin":
        builtin = assistant_agg._summarizer  # the aggregator's LLMContextSummarizer

        @assistant_agg.event_handler("on_summary_applied")
        async def _builtin_applied(_agg, _summarizer, _event):
            counts["applied"] += 1

        _time_frames(builtin, LLMFullResponseStartFrame, hot_ns)
    processors += [replay, assistant_agg]

    worker = PipelineWorker(
        Pipeline(processors),
        params=PipelineParams(),
        cancel_on_idle_timeout=False,
        idle_timeout_secs=None,
        enable_rtvi=False,
        enable_turn_tracking=False,
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _on_started(_worker, _frame):
        started.set()

    def summary_in_flight() -> bool:
        if ours is not None and ours.summary_in_flight:
            return True
        return bool(builtin is not None and getattr(builtin, "_summarization_in_progress", False))

    error: list[BaseException] = []

    async def drive() -> None:
        try:
            await asyncio.wait_for(started.wait(), timeout=10)
            for turn in transcript.turns:
                failed_before = counts["failed"]
                turn_done.clear()
                current["turn"] = turn.index
                replay.begin_turn(turn.index)
                inputs = copy.deepcopy(turn.inputs)
                await worker.queue_frame(LLMMessagesAppendFrame(messages=inputs, run_llm=True))
                try:
                    await asyncio.wait_for(turn_done.wait(), timeout=turn_timeout)
                except TimeoutError:
                    raise RuntimeError(
                        f"{strategy}: turn {turn.index} (line {turn.line}) was not answered "
                        f"within {turn_timeout:.0f}s"
                    ) from None
                deadline = time.monotonic() + turn_timeout
                while summary_in_flight():
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"{strategy}: summary after turn {turn.index} never landed"
                        )
                    await asyncio.sleep(0.0005)
                # let the event handler tasks of an applied summary run
                await asyncio.sleep(0)
                if ours is not None:
                    if is_down() or counts["failed"] > failed_before:
                        # let ours' retry backoff expire, as a real turn would (capped)
                        await asyncio.sleep(min(options.max_retry_backoff_s, _MAX_BACKOFF_WAIT_S))
                    pending = len(ours.pending_messages)
                    pending_per_turn.append(pending)
                    pending_max[0] = max(pending_max[0], pending)
                if progress is not None:
                    progress(strategy, turn.index)
            await worker.queue_frame(EndFrame())
        except BaseException as e:
            error.append(e)
            await worker.cancel()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await asyncio.gather(runner.run(), drive())
    if error:
        raise error[0]

    requests = _request_tokens(replay.requests, table, _answer_tokens(transcript, table))
    final_text = ""
    if replay.requests:
        last = replay.requests[-1]
        final_text = request_text(json.loads(m) for m in last.messages)
        if last.system_instruction:
            final_text = last.system_instruction + "\n" + final_text
    extra: dict[str, Any] = {"summary_failures": counts["failed"]}
    if strategy != "full_buffer" and backend is not None:
        extra["summarizer"] = backend.name
    if outage is not None and strategy != "full_buffer":
        extra["outage_rejected_calls"] = rejected[0]
    if ours is not None and options.max_request_tokens is not None:
        extra["evictions"] = counts["evictions"]
        extra["messages_evicted"] = counts["evicted"]
    return StrategyResult(
        strategy=strategy,
        requests=requests,
        summary_calls=summary_calls,
        summaries_applied=counts["applied"],
        hot_path_ns=hot_ns,
        final_text=final_text,
        turns=len(transcript.turns),
        pending_per_turn=pending_per_turn,
        pending_max_messages=pending_max[0],
        eviction_turns=eviction_turns,
        extra=extra,
    )


async def run_all(
    transcript: Transcript,
    *,
    strategies: Sequence[str] = STRATEGIES,
    thresholds: Thresholds = Thresholds(),
    backend: Backend | None = None,
    options: SummarizerOptions | None = None,
    progress: ProgressFn | None = None,
    turn_timeout: float = 60.0,
    outage: Outage | None = None,
    on_strategy_done: Callable[[str], None] | None = None,
) -> list[StrategyResult]:
    """Run each strategy on the same transcript, one after the other."""
    table = TokenTable()
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
            )
        )
        if on_strategy_done is not None:
            on_strategy_done(strategy)
    return results

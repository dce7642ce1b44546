"""Pauses between turns that end as soon as the pipeline has settled.

A test's pause after a user turn (``SleepFrame(sleep=0.3)``) exists so that the turn's answer,
and the summary it started, are done before the next turn. Most of the time they are done
after a few tens of milliseconds and the rest of the pause is idle. :class:`Gap` is such a
pause that :func:`run_settling` ends early once nothing that the full pause would still
have let happen is left: the turn's answer has ended, no request is being answered, no
summary is in flight, the summarizer's backoff has run out, and no frame has moved for a
moment. When any of these does not hold (a slow summary on purpose, a backoff still
running, a turn without an answer), the pause lasts its full length, as before; so a test
sees the same state at each turn, only sooner. With a store: the caller's memory loaded,
nothing queued or being written; with recall: no task of the package alive (its searches).
A pipeline with a part of the test's own (it may have timers) keeps full pauses unless the
part says it has ``settled``. ``run_test`` treats a :class:`Gap` as the ``SleepFrame`` it
is (full length). Polling costs a little CPU (every ``POLL_S``), far less than the waits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipecat.frames.frames import (
    EndFrame,
    Frame,
    LLMFullResponseEndFrame,
    TranscriptionFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.llm_service import LLMService
from pipecat.tests.utils import QueuedFrameProcessor, SleepFrame
from pipecat.workers.runner import WorkerRunner

import pipecat_summarizer
from pipecat_summarizer import ContextSummarizer
from tests.support.openai_server import FakeOpenAIServer

#: No frame moved for this long: what was in motion has stopped.
QUIET_S = 0.03
POLL_S = 0.02


@dataclass
class Gap(SleepFrame):
    """A pause after a user turn, ended early by :func:`run_settling` once settled.

    Parameters:
        answers: How many responses of the main LLM must have ended before it may end
            early (``None``: the number of turns with ``run_llm`` sent so far).
    """

    answers: int | None = None


@dataclass
class Until(SleepFrame):
    """A pause that :func:`run_settling` ends as soon as ``done()`` holds (checked every
    ``POLL_S``), at most ``sleep`` seconds: a test's fixed pause that waited for something it
    can name (a search started, a block kept, a turn answered). When it never holds the
    pause lasts its full length, as before, and the test's checks fail as they did.
    ``run_test`` treats it as the ``SleepFrame`` it is (full length).

    Parameters:
        done: What the pause waits for.
    """

    done: Callable[[], bool] = lambda: False


class _Motion(BaseObserver):
    """When a frame last moved, and how many responses of an LLM service have ended."""

    def __init__(self) -> None:
        super().__init__()
        self.last = time.monotonic()
        self._ends: set[int] = set()

    @property
    def ends(self) -> int:
        return len(self._ends)

    async def on_push_frame(self, data: FramePushed) -> None:
        self.last = time.monotonic()
        # an LLM's own responses: a test that plays one by hand sends no request
        if isinstance(data.frame, LLMFullResponseEndFrame) and isinstance(data.source, LLMService):
            self._ends.add(data.frame.id)


def processor_idle(processor: Any) -> bool:
    """The ``ContextSummarizer`` has nothing under way that time alone would move on: no
    summary in flight, its backoff over; with a store, the caller's memory load done, no
    record queued or being written, no write outage; with recall, no task of this package
    alive (its searches, early searches, follow-ups and sweeps run as tasks of their own)."""
    session = processor._session
    if processor.summary_in_flight:
        return False
    if session.schedule.trigger.failures.retry_at > asyncio.get_running_loop().time():
        return False
    if processor.recall_step is not None and _package_tasks():
        return False
    recorder = session.recorder
    if recorder is None:
        return True
    load, writer = recorder._load, recorder.writer
    inflight = writer._inflight
    return (
        (load is None or load.done())
        and len(writer) == 0
        and (inflight is None or inflight.done())
        and not writer.outage
    )


_PACKAGE = str(Path(pipecat_summarizer.__file__).parent)
#: The store writer's loop lives as long as the call (its queue is checked on its own).
_LONG_LIVED = frozenset({"StoreWriter._loop"})


def _package_tasks() -> list[str]:
    """The tasks alive whose coroutine is this package's (but the writer's loop)."""
    busy = []
    for task in asyncio.all_tasks():
        coro = task.get_coro()
        code = getattr(coro, "cr_code", None)
        name = getattr(coro, "__qualname__", "")
        if code is not None and code.co_filename.startswith(_PACKAGE) and name not in _LONG_LIVED:
            busy.append(name)
    return busy


#: Parts whose only timers are those :func:`pipeline_idle` watches.
_KNOWN = (
    "pipecat.pipeline.",
    "pipecat.processors.aggregators.",
    "pipecat.services.openai.",
    "pipecat.tests.",
    "pipecat_summarizer.",
)


def _parts(processor: FrameProcessor) -> list[FrameProcessor]:
    inner = getattr(processor, "processors", None)
    if not isinstance(inner, list) or processor in inner:
        return [processor]
    return [processor, *(p for part in inner for p in _parts(part))]


def frames_still(parts: Sequence[FrameProcessor]) -> bool:
    """No frame is queued at, or being processed by, any of ``parts``. A quiet moment alone
    did not prove it under load: the LLM had pushed its answer's end, but the assistant
    aggregator had not yet written the answer when the next user turn landed before it."""
    for part in parts:
        try:  # Pipecat's own queues: a rename must fail here, not end pauses too soon
            inputs = part._FrameProcessor__input_queue  # type: ignore[attr-defined]
            process = part._FrameProcessor__process_queue  # type: ignore[attr-defined]
            current = part._FrameProcessor__process_current_frame  # type: ignore[attr-defined]
        except AttributeError as e:
            raise AssertionError(f"settle: Pipecat's FrameProcessor changed ({e})") from e
        if not inputs.empty() or (process is not None and not process.empty()):
            return False
        if current is not None:
            return False
    return True


def pipeline_idle(processor: FrameProcessor) -> Callable[[], bool] | None:
    """The idleness of a pipeline built from known parts (Pipecat's pipelines, aggregators
    and OpenAI services, this package's processors): every fake OpenAI server started
    answers nothing, no LLM runs a tool call, each ``ContextSummarizer`` is
    :func:`processor_idle`; a test's own part that says whether it has ``settled`` (a
    property) counts too. ``None`` when the pipeline holds another part (it may have timers
    of its own): its pauses stay full."""
    parts = _parts(processor)
    for part in parts:
        module = type(part).__module__
        if not module.startswith(_KNOWN) and not hasattr(part, "settled"):
            return None
    own = [p for p in parts if hasattr(p, "settled")]
    summarizers = [p for p in parts if isinstance(p, ContextSummarizer)]
    llms = [p for p in parts if isinstance(p, LLMService)]

    def idle() -> bool:
        return (
            all(server.in_flight == 0 for server in FakeOpenAIServer.live)
            and not any(llm._function_call_tasks for llm in llms)
            and all(processor_idle(s) for s in summarizers)
            and all(p.settled for p in own)
        )

    return idle


def _asks_llm(frame: Frame, spoken: bool) -> bool:
    # a context frame that runs the LLM, or the end of a turn the STT heard words in
    if isinstance(frame, UserStoppedSpeakingFrame):
        return spoken
    return bool(getattr(frame, "run_llm", False))


async def run_settling(
    processor: FrameProcessor,
    *,
    frames_to_send: Sequence[Frame],
    idle: Callable[[], bool] | None = None,
    observers: list[BaseObserver] | None = None,
    send_end_frame: bool = True,
    pipeline_params: PipelineParams | None = None,
    **worker_kwargs: Any,
) -> tuple[list[Frame], list[Frame]]:
    """Like Pipecat's ``run_test`` (source -> ``processor`` -> sink, an ``EndFrame`` after the
    frames), with each :class:`Gap` ended once settled.

    Args:
        processor: The pipeline (or processor) under test.
        frames_to_send: Frames sent downstream; ``SleepFrame`` pauses, ``Gap`` settles,
            ``Until`` waits for its condition.
        idle: True when the test's parts (servers, the processor) have nothing under way;
            checked with the answers and the frames' motion. ``None``:
            :func:`pipeline_idle` (full pauses if it cannot tell).
        observers: More observers for the worker.
        send_end_frame: Send an ``EndFrame`` after the frames (``False``: the frames end
            the pipeline themselves, e.g. with a ``CancelFrame``).
        pipeline_params: The worker's ``PipelineParams`` (metrics...).
        **worker_kwargs: More ``PipelineWorker`` arguments (``enable_tracing``...).

    Returns:
        The frames the sink received downstream (without the ``EndFrame``) and upstream.
    """
    idle = idle or pipeline_idle(processor) or (lambda: False)
    motion = _Motion()
    up: asyncio.Queue = asyncio.Queue()
    down: asyncio.Queue = asyncio.Queue()
    source = QueuedFrameProcessor(queue=up, queue_direction=FrameDirection.UPSTREAM)
    sink = QueuedFrameProcessor(queue=down, queue_direction=FrameDirection.DOWNSTREAM)
    parts = [source, *_parts(processor), sink]
    worker = PipelineWorker(
        Pipeline([source, processor, sink]),
        cancel_on_idle_timeout=False,
        observers=[motion, *(observers or [])],
        params=pipeline_params or PipelineParams(),
        **worker_kwargs,
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(_w, _f):
        started.set()

    async def settle(gap: Gap, asked: int) -> None:
        deadline = time.monotonic() + gap.sleep
        want = asked if gap.answers is None else gap.answers
        while (now := time.monotonic()) < deadline:
            quiet = now - motion.last >= QUIET_S
            if motion.ends >= want and quiet and frames_still(parts) and idle():
                return
            await asyncio.sleep(min(POLL_S, deadline - now))

    async def until(pause: Until) -> None:
        deadline = time.monotonic() + pause.sleep
        while not pause.done() and (now := time.monotonic()) < deadline:
            await asyncio.sleep(min(POLL_S, deadline - now))

    async def push() -> None:
        await asyncio.wait_for(started.wait(), timeout=30.0)
        asked, spoken = 0, False
        for frame in frames_to_send:
            if isinstance(frame, Gap):
                await settle(frame, asked)
            elif isinstance(frame, Until):
                await until(frame)
            elif isinstance(frame, SleepFrame):
                await asyncio.sleep(frame.sleep)
            else:
                asked += _asks_llm(frame, spoken)
                if isinstance(frame, (TranscriptionFrame, UserStoppedSpeakingFrame)):
                    spoken = isinstance(frame, TranscriptionFrame)
                await worker.queue_frame(frame)
                motion.last = time.monotonic()  # queued: its first push is still to come
        if send_end_frame:
            await worker.queue_frame(EndFrame())

    await asyncio.gather(_run(worker), push())
    received_down = []
    while not down.empty():
        frame = down.get_nowait()
        if not isinstance(frame, EndFrame) or not send_end_frame:
            received_down.append(frame)
    received_up = []
    while not up.empty():
        received_up.append(up.get_nowait())
    return received_down, received_up


async def _run(worker: PipelineWorker) -> None:
    runner = WorkerRunner()
    await runner.add_workers(worker)
    await runner.run()

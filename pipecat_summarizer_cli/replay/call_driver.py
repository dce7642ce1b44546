"""One call of the question-time measurement through a real Pipecat pipeline (a real
``LLMContextAggregatorPair``, the replay LLM recording what it is sent), driven turn by turn:
:class:`CallDriver`, used by :mod:`~pipecat_summarizer_cli.replay.question_calls`."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Sequence

from pipecat.frames.frames import EndFrame, LLMMessagesAppendFrame, LLMSummarizeContextFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMAssistantAggregatorParams,
    LLMContextAggregatorPair,
)
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.utils.context.llm_context_summarization import LLMContextSummaryConfig
from pipecat.workers.runner import WorkerRunner

from pipecat_summarizer import is_recall_message
from pipecat_summarizer_cli.replay.recorder import Recorder
from pipecat_summarizer_cli.replay.replay_llm import ReplayLLM
from pipecat_summarizer_cli.replay.transcript import Step, Turn, context_messages


class CallDriver:
    """One call's pipeline (user aggregator, ``before`` processors, replay LLM, assistant
    aggregator), driven turn by turn on the running loop."""

    def __init__(
        self,
        context: LLMContext,
        turns: Sequence[Turn],
        before: Sequence[FrameProcessor] = (),
        *,
        assistant_params: LLMAssistantAggregatorParams | None = None,
        recorder: Recorder | None = None,
    ):
        self.context = context
        self.recorder = recorder
        # one extra slot, reused by every question (answered with nothing)
        self.llm = ReplayLLM([*(t.steps for t in turns), [Step()]])
        self._steps = [max(1, len(t.steps)) for t in turns] + [1]
        self.question_turn = len(turns) + 1
        user_agg, assistant_agg = LLMContextAggregatorPair(
            context, assistant_params=assistant_params or LLMAssistantAggregatorParams()
        )
        self._stopped = 0
        self._changed = asyncio.Event()

        @assistant_agg.event_handler("on_assistant_turn_stopped")
        async def _stopped(_agg, _message):
            self._stopped += 1
            self._changed.set()

        self.worker = PipelineWorker(
            Pipeline([user_agg, *before, self.llm, assistant_agg]),
            params=PipelineParams(),
            cancel_on_idle_timeout=False,
            idle_timeout_secs=None,
            enable_rtvi=False,
            enable_turn_tracking=False,
        )
        self._started = asyncio.Event()

        @self.worker.event_handler("on_pipeline_started")
        async def _on_started(_worker, _frame):
            self._started.set()

        self._runner_task: asyncio.Task | None = None

    async def start(self) -> None:
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(self.worker)
        self._runner_task = asyncio.ensure_future(runner.run())
        await asyncio.wait_for(self._started.wait(), 30)

    async def turn(self, inputs: list[dict], turn: int, timeout: float = 60.0) -> None:
        """Send one user turn and wait until its answer is in the context."""
        self.llm.begin_turn(turn)
        target = self.llm.responses
        expected_steps = self._steps[turn - 1]
        await self.worker.queue_frame(
            LLMMessagesAppendFrame(messages=context_messages(inputs), run_llm=True)
        )
        deadline = time.monotonic() + timeout
        while not (
            self.llm.responses >= target + expected_steps and self._stopped >= self.llm.responses
        ):
            self._changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"turn {turn} was not answered within {timeout:.0f}s")
            try:
                await asyncio.wait_for(self._changed.wait(), min(left, 0.05))
            except TimeoutError:
                pass
        if self.recorder is not None:  # let a summary started by the turn land
            await asyncio.wait_for(self.recorder.wait_idle(), timeout)
            await asyncio.sleep(0)

    async def ask(self, question: str) -> tuple[str, ...]:
        """Ask one question; the serialized messages of the request it produced."""
        before = len(self.llm.requests)
        await self.turn([{"role": "user", "content": question}], self.question_turn)
        return self.llm.requests[before].messages

    async def compact(self, timeout: float = 60.0) -> None:
        """A manual compaction of the whole conversation (what an application can do at
        hang-up), so every message is archived and the call's last summary covers it all."""
        await self.worker.queue_frame(
            LLMSummarizeContextFrame(config=LLMContextSummaryConfig(min_messages_after_summary=0))
        )
        await asyncio.sleep(0.05)
        if self.recorder is not None:
            await asyncio.wait_for(self.recorder.wait_idle(), timeout)
            await asyncio.sleep(0.05)

    async def end(self) -> None:
        await self.worker.queue_frame(EndFrame())
        if self._runner_task is not None:
            await asyncio.wait_for(self._runner_task, 60)


def snapshot(context: LLMContext) -> list:
    return [copy.deepcopy(m) for m in context.messages if not is_recall_message(m)]

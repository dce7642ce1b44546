"""One call of the question-time measurement through a real Pipecat pipeline (a real
``LLMContextAggregatorPair``, the replay LLM recording what it is sent), driven turn by turn:
:class:`CallDriver`, used by :mod:`~pipecat_summarizer_cli.replay.question_calls`."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pipecat.frames.frames import (
    EndFrame,
    InterimTranscriptionFrame,
    LLMMessagesAppendFrame,
    LLMSummarizeContextFrame,
    TranscriptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMAssistantAggregatorParams,
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.turns.user_turn_strategies import ExternalUserTurnStrategies
from pipecat.utils.context.llm_context_summarization import LLMContextSummaryConfig
from pipecat.workers.runner import WorkerRunner

from pipecat_summarizer import is_recall_message
from pipecat_summarizer_cli.replay.recorder import Recorder
from pipecat_summarizer_cli.replay.replay_llm import ReplayLLM
from pipecat_summarizer_cli.replay.transcript import Step, Turn, context_messages

#: The user id on the replayed transcriptions.
CALLER = "caller"


@dataclass(frozen=True)
class Speech:
    """How a question reaches the pipeline when it is spoken (:meth:`CallDriver.ask`), as a
    speech-to-text service delivers it, with Pipecat's default turn detection in mind (VAD
    ``stop_secs`` 0.2 s, then the smart-turn model's verdict and a finalized transcription
    end the turn at once).

    The seconds a caller takes to say the words are not replayed: the turn starts, an interim
    transcription of all but the last word arrives, ``word_s`` later an interim of every word
    (formatted as the final one will be), ``lead_s`` later the final transcription and, with
    it, the end of the turn (an STT's final result comes ~0.2-0.4 s after the words, VAD's
    silence window and the finalize round trip; its interim with the last word about when
    the words end).

    Parameters:
        word_s: From the interim of all but the last word to the interim of every word.
        lead_s: From the interim of every word to the final transcription and the turn's end.
    """

    word_s: float = 0.1
    lead_s: float = 0.2


class CallDriver:
    """One call's pipeline (``head`` processors, user aggregator, ``before`` processors,
    replay LLM, assistant aggregator), driven turn by turn on the running loop.

    With ``speech``, a question (:meth:`ask`) is spoken: transcriptions and the caller's
    turn frames (see :class:`Speech`), the user aggregator's turns ended by them (Pipecat's
    external turn strategies); otherwise it is appended to the context as a message."""

    def __init__(
        self,
        context: LLMContext,
        turns: Sequence[Turn],
        before: Sequence[FrameProcessor] = (),
        *,
        assistant_params: LLMAssistantAggregatorParams | None = None,
        recorder: Recorder | None = None,
        head: Sequence[FrameProcessor] = (),
        speech: Speech | None = None,
    ):
        self.context = context
        self.recorder = recorder
        self.speech = speech
        self.head = list(head)
        # one extra slot, reused by every question (answered with nothing)
        self.llm = ReplayLLM([*(t.steps for t in turns), [Step()]])
        self._steps = [max(1, len(t.steps)) for t in turns] + [1]
        self.question_turn = len(turns) + 1
        user_params = (
            LLMUserAggregatorParams(user_turn_strategies=ExternalUserTurnStrategies())
            if speech is not None
            else None
        )
        user_agg, assistant_agg = LLMContextAggregatorPair(
            context,
            user_params=user_params,
            assistant_params=assistant_params or LLMAssistantAggregatorParams(),
        )
        self._user_agg = user_agg
        self._stopped = 0
        self._changed = asyncio.Event()

        @assistant_agg.event_handler("on_assistant_turn_stopped")
        async def _stopped(_agg, _message):
            self._stopped += 1
            self._changed.set()

        self.worker = PipelineWorker(
            Pipeline([*head, user_agg, *before, self.llm, assistant_agg]),
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

    async def turn(
        self, inputs: list[dict], turn: int, timeout: float = 60.0, *, said: str | None = None
    ) -> None:
        """Send one user turn (``said``: spoken, see :class:`Speech`) and wait until its
        answer is in the context."""
        self.llm.begin_turn(turn)
        target = self.llm.responses
        expected_steps = self._steps[turn - 1]
        if said is not None and self.speech is not None:
            await self._say(said, self.speech)
        else:
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

    async def _say(self, text: str, speech: Speech) -> None:
        queue = self.worker.queue_frame
        words = text.split()
        await queue(UserStartedSpeakingFrame())
        if len(words) > 1:
            await queue(InterimTranscriptionFrame(" ".join(words[:-1]), CALLER, _stamp()))
            await asyncio.sleep(speech.word_s)
        await queue(InterimTranscriptionFrame(text, CALLER, _stamp()))
        await asyncio.sleep(speech.lead_s)
        await queue(TranscriptionFrame(text, CALLER, _stamp(), finalized=True))
        # the turn ends once the aggregator holds the final words (as Pipecat's default stop
        # strategy ends it on a finalized transcription). Queued at once, the stop frame (a
        # system frame) overtook the transcription and the turn ended 0.5 s later (the
        # external strategy's wait for late transcriptions): a lead no real turn has
        waited = time.monotonic() + 5.0
        while not self._user_agg.aggregation_string() and time.monotonic() < waited:
            await asyncio.sleep(0.001)
        await queue(UserStoppedSpeakingFrame())

    async def ask(self, question: str) -> tuple[str, ...]:
        """Ask one question (spoken with ``speech``); the serialized messages of the
        request it produced."""
        before = len(self.llm.requests)
        await self.turn([{"role": "user", "content": question}], self.question_turn, said=question)
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


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())


def snapshot(context: LLMContext) -> list:
    return [copy.deepcopy(m) for m in context.messages if not is_recall_message(m)]

"""A Pipecat LLM service that replays a recorded conversation and records every request.

``ReplayLLM`` sits where the main LLM sits. For each ``LLMContextFrame`` it records exactly
what it was sent (each message serialized to JSON, plus the service's system instruction),
then answers with the next recorded :class:`~pipecat_summarizer_cli.replay.transcript.Step` of
the current turn: ``LLMFullResponseStartFrame``, the assistant text as an ``LLMTextFrame``,
the step's tool calls through Pipecat's own function-calling path (``run_function_calls``
with a catch-all handler that returns the recorded result), then
``LLMFullResponseEndFrame``. The assistant aggregator writes the calls and results into the
context and runs the LLM again, exactly as with a real model, so a turn with one round of
tool calls costs two requests. With a ``response_delay``, each answer starts after that many
seconds (the modelled time to the bot's first word; simulated in a real-time replay).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from loguru import logger
from pipecat.frames.frames import (
    Frame,
    FunctionCallFromLLM,
    LLMContextFrame,
    LLMContextSummaryRequestFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext, LLMSpecificMessage
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.llm_service import FunctionCallParams, LLMService

from pipecat_summarizer.summarizers import offline_llm_settings
from pipecat_summarizer_cli.replay.transcript import Step


def message_json(message: Any) -> str:
    """Serialize one context message as sent (key order kept, so equal means byte-equal)."""
    if isinstance(message, LLMSpecificMessage):
        message = {"llm": message.llm, "message": message.message}
    return json.dumps(message, ensure_ascii=False, default=str)


@dataclass(frozen=True)
class RecordedRequest:
    """What the main LLM was sent once.

    Parameters:
        turn: The 1-based user turn the request belongs to.
        step: The 0-based request within the turn.
        messages: Each context message, serialized to JSON.
        system_instruction: The service's system instruction, if any.
    """

    turn: int
    step: int
    messages: tuple[str, ...]
    system_instruction: str | None = None


class ReplayLLM(LLMService):
    """Answers each request with the transcript's recorded step and records the request.

    Args:
        turns: For each user turn (in order), its steps.
        system_instruction: A system instruction to report with each request (the
            transcript's system prompt normally lives in the context instead).
        on_turn_answered: Called with the turn number once the turn's last step has been
            pushed (its ``LLMFullResponseEndFrame`` included).
        response_delay: Called with ``(turn, step)``: seconds to wait before answering.
        generation_time: Called with ``(turn, step)``: seconds from the response's start
            to its text and end (the answer streaming; Pipecat's assistant aggregator adds
            it to the context at the end).
        **kwargs: Passed to ``LLMService``.
    """

    def __init__(
        self,
        turns: Sequence[Sequence[Step]],
        *,
        system_instruction: str | None = None,
        on_turn_answered: Callable[[int], None] | None = None,
        response_delay: Callable[[int, int], float] | None = None,
        generation_time: Callable[[int, int], float] | None = None,
        **kwargs,
    ):
        """Initialize the service."""
        kwargs.setdefault("settings", offline_llm_settings("replay", system_instruction))
        super().__init__(**kwargs)
        self._turns = [list(steps) for steps in turns]
        self._system_instruction = system_instruction
        self._on_turn_answered = on_turn_answered
        self._response_delay = response_delay
        self._generation_time = generation_time
        self._turn = 0  # 1-based turn being answered; 0 before the first user turn
        self._step = 0
        self._results: dict[str, Any] = {}
        self._interned: dict[str, str] = {}
        self.requests: list[RecordedRequest] = []
        self.responses = 0  # complete responses pushed (LLMFullResponseEndFrame sent)
        self.register_function(None, self._replay_tool_result)

    def begin_turn(self, turn: int) -> None:
        """Tell the service that the next request opens user turn ``turn`` (1-based)."""
        if not 1 <= turn <= len(self._turns):
            raise IndexError(f"turn {turn} is not in the transcript (1..{len(self._turns)})")
        self._turn = turn
        self._step = 0

    @property
    def current_turn(self) -> int:
        """The turn being answered."""
        return self._turn

    def _record(self, context: LLMContext) -> None:
        serialized = []
        for msg in context.messages:
            text = message_json(msg)
            serialized.append(self._interned.setdefault(text, text))
        self.requests.append(
            RecordedRequest(self._turn, self._step, tuple(serialized), self._system_instruction)
        )

    def _next_step(self) -> tuple[Step, bool]:
        if self._turn == 0:
            logger.warning(f"{self}: request before the first turn; answering with nothing")
            return Step(), False
        steps = self._turns[self._turn - 1]
        if self._step >= len(steps):
            logger.warning(f"{self}: turn {self._turn} has no recorded answer left; empty answer")
            return Step(), False
        step = steps[self._step]
        self._step += 1
        return step, self._step == len(steps)

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        """Answer context frames; pass everything else on.

        Args:
            frame: The frame.
            direction: Its direction.
        """
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            if frame.speculation:
                return  # a provisional copy: never answered by the replay
            await self._answer(frame.context)
        elif isinstance(frame, LLMContextSummaryRequestFrame):
            # The built-in summarizer is always given its own LLM by the harness.
            await self.push_frame(frame, direction)
        else:
            await self.push_frame(frame, direction)

    async def _handle_summary_request(self, frame: LLMContextSummaryRequestFrame):
        # Not a summarizer: the frame is passed on by process_frame instead.
        return

    async def _answer(self, context: LLMContext) -> None:
        self._record(context)
        if self._response_delay is not None and self._turn:
            delay = self._response_delay(self._turn, self._step)
            if delay > 0:
                await asyncio.sleep(delay)
        index = self._step
        step, last = self._next_step()
        await self.push_frame(LLMFullResponseStartFrame())
        if self._generation_time is not None and self._turn:
            streaming = self._generation_time(self._turn, index)
            if streaming > 0:
                await asyncio.sleep(streaming)
        if step.text:
            await self.push_frame(LLMTextFrame(step.text))
        if step.tool_calls:
            self._results.update(step.results)
            await self.run_function_calls(
                [
                    FunctionCallFromLLM(
                        function_name=call.name,
                        tool_call_id=call.id,
                        arguments=call.arguments,
                        context=context,
                    )
                    for call in step.tool_calls
                ]
            )
        await self.push_frame(LLMFullResponseEndFrame())
        self.responses += 1
        if last and self._on_turn_answered is not None:
            self._on_turn_answered(self._turn)

    async def _replay_tool_result(self, params: FunctionCallParams) -> None:
        await params.result_callback(self._results.pop(params.tool_call_id, ""))

"""Summarizer backends for the replay, and the meter every strategy's calls go through.

A :class:`Backend` builds the same summarizer in the two shapes the strategies need: a
``Summarizer`` for ``ContextSummarizer`` and a Pipecat ``LLMService`` for the built-in's
dedicated ``summary_config.llm``. The strategies never get it bare: :class:`Meter` wraps it
(:class:`MeteredSummarizer`, :class:`MeteredLLM`), counts what each call sends and returns
into the strategy's :class:`~pipecat_summarizer_cli.replay.recorder.Recorder`, refuses calls
during a simulated :class:`Outage`, and, in a replay in simulated real time, delivers the
answer after the modelled summarizer latency. ``MeteredLLM`` is an ``LLMService`` that
delegates ``run_inference`` (the call Pipecat's built-in makes through
``LLMService._generate_summary``), so nothing of the wrapped service is patched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.services.llm_service import LLMService

from pipecat_summarizer import SummaryRequest
from pipecat_summarizer.summarizers import Summarizer, SummarizerError, offline_llm_settings
from pipecat_summarizer_cli.replay.clock import real_time
from pipecat_summarizer_cli.replay.recorder import Recorder
from pipecat_summarizer_cli.replay.report import TokenTable

OUTAGE_ERROR = "summarizer down (simulated outage)"


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
    from pipecat_summarizer.summarizers import ExtractiveLLMService, ExtractiveSummarizer

    return Backend("extractive", ExtractiveSummarizer, ExtractiveLLMService)


def openai_backend(*, model: str, base_url: str | None, api_key: str | None) -> Backend:
    """An OpenAI-compatible endpoint: ``OpenAISummarizer`` and ``OpenAILLMService``."""
    from pipecat.services.openai.llm import OpenAILLMService

    from pipecat_summarizer.summarizers import OpenAISummarizer

    def make_summarizer() -> Summarizer:
        return OpenAISummarizer(model=model, base_url=base_url, api_key=api_key)

    def make_llm() -> LLMService[Any]:
        return OpenAILLMService(
            api_key=api_key or "not-needed",
            base_url=base_url,
            settings=OpenAILLMService.Settings(model=model),
        )

    return Backend(f"openai:{model}", make_summarizer, make_llm)


def _answer_text(answer: Any) -> str | None:
    """A backend's answer as text (a string, or an object carrying ``text``)."""
    if isinstance(answer, str) or answer is None:
        return answer
    return getattr(answer, "text", "")


class Meter:
    """Counts, delays and (during an outage) refuses one strategy's summarizer calls.

    Args:
        recorder: Where calls and their outcomes go.
        table: Token counts.
        latency: The modelled latency of a call from its output tokens (``None``: answer
            at once).
        outage: Turns during which every call is refused.
        count_failures: Also count failed calls as failed attempts (for a strategy that
            has no failure event of its own: Pipecat's built-in).
    """

    def __init__(
        self,
        recorder: Recorder,
        table: TokenTable,
        *,
        latency: Callable[[int], float] | None = None,
        outage: Outage | None = None,
        count_failures: bool = False,
    ):
        """Initialize the meter."""
        self.recorder = recorder
        self.table = table
        self._latency = latency
        self._outage = outage
        self._count_failures = count_failures

    async def call(self, input_tokens: int, run: Callable[[], Awaitable[Any]]) -> Any:
        """Make one call: refuse it during an outage, else run it, count it, delay it.

        Args:
            input_tokens: Tokens the call sends.
            run: Makes the real call.

        Returns:
            The backend's answer.

        Raises:
            SummarizerError: During an outage.
            Exception: Whatever the backend raised.
        """
        rec = self.recorder
        if self._outage is not None and self._outage.covers(rec.turn):
            rec.rejected += 1
            if self._count_failures:
                rec.summary_failed()
            raise SummarizerError(OUTAGE_ERROR)
        call = rec.call_started(input_tokens)
        try:
            with real_time():  # the backend's own time is not simulated
                answer = await run()
            output_tokens = self.table.text(_answer_text(answer))
            if self._latency is not None:
                await asyncio.sleep(self._latency(output_tokens))
        except asyncio.CancelledError:
            rec.call_ended(call, "cancelled")
            raise
        except Exception:
            rec.call_ended(call, "failed")
            if self._count_failures:
                rec.summary_failed()
            raise
        rec.call_ended(call, "returned", output_tokens)
        return answer


class MeteredSummarizer:
    """A ``Summarizer`` whose calls go through a :class:`Meter`.

    Args:
        inner: The backend.
        meter: The meter.
    """

    def __init__(self, inner: Summarizer, meter: Meter):
        """Initialize the wrapper."""
        self.inner = inner
        self._meter = meter

    async def summarize(self, request: SummaryRequest) -> Any:
        """Summarize through the meter."""
        table = self._meter.table
        sent = table.system(request.system_prompt) + table.counter.count_message(
            {"role": "user", "content": request.user_message}
        )
        return await self._meter.call(sent, lambda: self.inner.summarize(request))


class MeteredLLM(LLMService):
    """A Pipecat ``LLMService`` whose ``run_inference`` goes through a :class:`Meter` to
    another service: the dedicated summary LLM handed to Pipecat's built-in.

    Args:
        inner: The service that answers.
        meter: The meter.
        **kwargs: Passed to ``LLMService``.
    """

    def __init__(self, inner: LLMService, meter: Meter, **kwargs: Any):
        """Initialize the service."""
        kwargs.setdefault("settings", offline_llm_settings("metered"))
        super().__init__(**kwargs)
        self.inner = inner
        self._meter = meter

    async def run_inference(
        self,
        context: LLMContext,
        max_tokens: int | None = None,
        system_instruction: str | None = None,
        response_schema: dict[str, Any] | None = None,
    ) -> str | None:
        """Run the wrapped service's inference through the meter."""
        table = self._meter.table
        sent = sum(table.counter.count_message(m) for m in context.messages)
        sent += table.system(system_instruction)
        return await self._meter.call(
            sent,
            lambda: self.inner.run_inference(
                context,
                max_tokens=max_tokens,
                system_instruction=system_instruction,
                response_schema=response_schema,
            ),
        )

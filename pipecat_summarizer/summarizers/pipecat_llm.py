"""A summarizer on any Pipecat ``LLMService``, called outside the pipeline.

Pipecat's ``run_inference`` returns the text only: the OpenAI family drops
``finish_reason`` and Anthropic and Gemini only log a WARNING when the output hit the
token limit, then return the cut-off text. A cut-off memory record would roll forward with
its last sections missing, so :class:`PipecatLLMSummarizer` observes the provider response
itself: it wraps the service client's completion method with a pass-through that hands
the response to the summary call that made it (a context variable, so the main LLM's own
requests on the same client are untouched), and reads the provider's truncation signal.
For a service whose client it does not know, it falls back to length: an answer that fills
the budget is taken as cut off.
"""

from __future__ import annotations

import contextvars
import functools
from typing import Any

from loguru import logger
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.services.llm_service import LLMService

from pipecat_summarizer._compaction.prompt import SummaryRequest
from pipecat_summarizer._text.tokens import estimate_text_tokens
from pipecat_summarizer.summarizers.base import (
    SummarizerError,
    SummaryResult,
    SummaryUsage,
    require_text,
    usage_of,
)

# The provider responses seen by the current summary call (None outside one).
_responses: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "pipecat_summarizer_responses", default=None
)

# Where Pipecat's services keep the one-shot completion method, on ``llm._client``.
_CLIENT_METHODS = (
    ("chat", "completions", "create"),  # OpenAI chat and its many compatible services
    ("responses", "create"),  # OpenAI Responses
    ("beta", "messages", "create"),  # Anthropic
    ("aio", "models", "generate_content"),  # Google Gemini
)

# Share of the budget at which an answer from an unobservable service counts as cut off.
_FULL_BUDGET = 0.9


def truncation_reason(response: Any) -> str | None:
    """The provider's "output hit the token limit" signal in ``response``, if any.

    Args:
        response: A completion from the OpenAI chat or Responses API, Anthropic's messages
            API or Gemini's ``generate_content``.

    Returns:
        The reason (for example ``"length"``), or ``None`` if the answer is complete or
        the response shape is unknown.
    """
    choices = getattr(response, "choices", None)
    if choices:
        reason = getattr(choices[0], "finish_reason", None)
        return "length" if reason == "length" else None
    stop = getattr(response, "stop_reason", None)  # Anthropic
    if stop in ("max_tokens", "model_context_window_exceeded"):
        return str(stop)
    if getattr(response, "status", None) == "incomplete":  # OpenAI Responses
        details = getattr(response, "incomplete_details", None)
        return str(getattr(details, "reason", None) or "incomplete")
    candidates = getattr(response, "candidates", None)  # Gemini
    if candidates:
        reason = getattr(candidates[0], "finish_reason", None)
        name = getattr(reason, "name", reason)
        if name == "MAX_TOKENS":
            return "MAX_TOKENS"
    return None


def _summed(usages: list[SummaryUsage]) -> SummaryUsage | None:
    """The usage of every response one summary call made (usually one), added up."""
    if not usages:
        return None
    cached = [u.cached_tokens for u in usages if u.cached_tokens is not None]
    return SummaryUsage(
        sum(u.prompt_tokens for u in usages),
        sum(u.completion_tokens for u in usages),
        sum(cached) if cached else None,
    )


def _observe(llm: Any) -> bool:
    """Wrap the service client's completion method once; True if one was found."""
    client = getattr(llm, "_client", None)
    if client is None:
        return False
    found = False
    for path in _CLIENT_METHODS:
        parent = client
        try:
            for name in path[:-1]:
                parent = getattr(parent, name)
            method = getattr(parent, path[-1])
        except Exception:  # not this provider's client (or a lazy attribute that failed)
            continue
        if not callable(method):
            continue
        found = True
        if getattr(method, "_summarizer_observed", False):
            continue

        @functools.wraps(method)
        async def observed(*args, _method=method, **kwargs):
            response = await _method(*args, **kwargs)
            seen = _responses.get()
            if seen is not None:
                seen.append(response)
            return response

        observed._summarizer_observed = True  # type: ignore[attr-defined]
        try:
            setattr(parent, path[-1], observed)
        except Exception:
            found = False
    return found


def check_inference(llm: Any, name: str = "summarizer") -> None:
    """Refuse a service that cannot answer out of the pipeline.

    ``LLMService.run_inference`` raises ``NotImplementedError`` in the base class; a service
    that keeps it (a realtime speech-to-speech service, a custom one) would fail every
    summary later with a bare error, far from the cause.

    Args:
        llm: The service.
        name: How to name it in the message.

    Raises:
        TypeError: If ``llm`` does not implement ``run_inference``.
    """
    if getattr(type(llm), "run_inference", None) in (None, LLMService.run_inference):
        raise TypeError(
            f"{name}: {type(llm).__name__} does not implement run_inference (out-of-pipeline "
            "inference), so it cannot write summaries; use a service that does (OpenAI, "
            "Anthropic, Google...) or OpenAISummarizer"
        )


class PipecatLLMSummarizer:
    """Summarizes with a Pipecat ``LLMService`` through its ``run_inference``.

    This is what ``LLMContextSummaryConfig.llm`` maps to. The service does not need to
    be in the pipeline; it stays the application's (this wrapper holds no connection of
    its own and :meth:`aclose` does not close the service).

    A summary cut off at the token budget is rejected (see the module docstring for how
    it is detected).

    Args:
        llm: The service.

    Raises:
        TypeError: If ``llm`` does not implement ``run_inference`` (the class is named).
    """

    def __init__(self, llm: LLMService):
        """Initialize the summarizer."""
        check_inference(llm, "summarizer")
        self.llm = llm
        self._observable: bool | None = None

    def _check_observable(self) -> bool:
        from pipecat_summarizer.summarizers.extractive import ExtractiveLLMService

        if isinstance(self.llm, ExtractiveLLMService):
            return True  # trims its record to the budget itself; never cut off
        observable = _observe(self.llm)
        if self._observable is None and not observable:
            logger.warning(
                f"{self.llm}: truncation is not observable on this service; a summary that "
                f"fills {int(_FULL_BUDGET * 100)}% of its budget is taken as cut off"
            )
        self._observable = observable
        return observable

    async def summarize(self, request: SummaryRequest) -> str | SummaryResult:
        """Run one out-of-band inference.

        Args:
            request: The summary request.

        Returns:
            The summary text, or a ``SummaryResult`` with the provider's usage when the
            service's client is one whose responses are observed (OpenAI, Anthropic) and
            the response reports it.

        Raises:
            SummarizerError: If the answer is empty or was cut off at the budget.
        """
        observable = self._check_observable()
        context = LLMContext(messages=[{"role": "user", "content": request.user_message}])
        seen: list = []
        token = _responses.set(seen)
        try:
            text = await self.llm.run_inference(
                context, max_tokens=request.max_tokens, system_instruction=request.system_prompt
            )
        finally:
            _responses.reset(token)
        for response in seen:
            reason = truncation_reason(response)
            if reason is not None:
                raise SummarizerError(
                    f"summary cut off at max_tokens={request.max_tokens} ({reason})"
                )
        text = require_text(text)  # cleaned once, by as_result, on its way to the context
        if not observable and request.max_tokens:
            if estimate_text_tokens(text.strip()) >= _FULL_BUDGET * request.max_tokens:
                raise SummarizerError(
                    f"summary fills its budget of max_tokens={request.max_tokens}; taken as cut off"
                )
        usage = _summed([u for u in map(usage_of, seen) if u is not None])
        return text if usage is None else SummaryResult(text, None, usage)

    async def aclose(self) -> None:
        """Nothing to close: the service belongs to the application."""

"""The one small protocol every summarizer backend implements."""

from __future__ import annotations

import errno
import inspect
import re
import socket
import ssl
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

from loguru import logger
from pipecat.frames.frames import MetricsFrame
from pipecat.metrics.metrics import LLMTokenUsage, LLMUsageMetricsData

from pipecat_summarizer._compaction.prompt import SummaryRequest
from pipecat_summarizer.errors import PipecatSummarizerError
from pipecat_summarizer.events import ContextCompactedEvent


class SummarizerError(PipecatSummarizerError, RuntimeError):
    """A summarizer backend failed to produce a usable summary."""


@dataclass(frozen=True)
class SummaryUsage:
    """The secondary LLM's token usage for one summary, as its provider reported it.

    Parameters:
        prompt_tokens: Input tokens, gross of the prompt cache (cached ones included).
        completion_tokens: Output tokens.
        cached_tokens: Of the input, tokens read from the provider's prompt cache
            (``None``: not reported).
    """

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None = None

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.prompt_tokens + self.completion_tokens


def _tokens(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def usage_of(response: object) -> SummaryUsage | None:
    """The usage a provider's completion reports, if any.

    Reads the OpenAI chat shape (``usage.prompt_tokens``, ``completion_tokens``,
    ``prompt_tokens_details.cached_tokens``) and Anthropic's (``usage.input_tokens``, net of
    the cache, ``output_tokens``, ``cache_read_input_tokens``,
    ``cache_creation_input_tokens``), as objects or dicts.

    Args:
        response: A completion object or its JSON.

    Returns:
        The usage, or ``None`` when the response carries none (or an unknown shape).
    """

    def get(obj: object, name: str) -> object:
        return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)

    usage = get(response, "usage")
    if usage is None:
        return None
    prompt, completion = (
        _tokens(get(usage, "prompt_tokens")),
        _tokens(get(usage, "completion_tokens")),
    )
    if prompt is not None and completion is not None:
        details = get(usage, "prompt_tokens_details")
        cached = _tokens(get(details, "cached_tokens")) if details is not None else None
        return SummaryUsage(prompt, completion, cached)
    net, output = _tokens(get(usage, "input_tokens")), _tokens(get(usage, "output_tokens"))
    if net is None or output is None:
        return None
    read = _tokens(get(usage, "cache_read_input_tokens"))
    written = _tokens(get(usage, "cache_creation_input_tokens")) or 0
    return SummaryUsage(net + (read or 0) + written, output, read)


def summarizer_model(summarizer: object) -> str | None:
    """The model a summarizer runs on: its ``model`` (``OpenAISummarizer``), or its Pipecat
    service's settings' model (``PipecatLLMSummarizer``); ``None`` if unknown."""
    model = getattr(summarizer, "model", None)
    if model is None:
        settings = getattr(getattr(summarizer, "llm", None), "settings", None)
        model = getattr(settings, "model", None)
    return model if isinstance(model, str) else None


@dataclass(frozen=True)
class SummaryResult:
    """A summary with its sections already structured (for backends with JSON output).

    Parameters:
        text: The summary text placed in the context.
        sections: Items per section (``FACTS``, ``CONSTRAINTS``, ``DECISIONS``,
            ``OPEN QUESTIONS``); ``None`` to have the text parsed instead.
        usage: The secondary LLM's token usage for this summary, when its provider reported
            it (the processor reports it as Pipecat usage metrics and in the event).
    """

    text: str
    sections: dict[str, list[str]] | None = None
    usage: SummaryUsage | None = None

    def usage_frame(self, processor: str, job: object) -> MetricsFrame | None:
        """The usage as Pipecat reports a service's (``MetricsFrame`` with
        ``LLMUsageMetricsData``), or ``None`` without usage.

        Args:
            processor: The reporting processor's name (ours).
            job: The summary job (its ``summarizer`` names the model) or the summarizer.
        """
        usage = self.usage
        if usage is None:
            return None
        tokens = LLMTokenUsage(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            total_tokens=usage.total_tokens,
            cache_read_input_tokens=usage.cached_tokens,
        )
        model = summarizer_model(getattr(job, "summarizer", job))
        data = LLMUsageMetricsData(processor=processor, model=model, value=tokens)
        return MetricsFrame(data=[data])

    def with_usage(self, event: ContextCompactedEvent) -> ContextCompactedEvent:
        """``event`` carrying this summary's reported usage (unchanged without usage)."""
        usage = self.usage
        if usage is None:
            return event
        return replace(
            event,
            summary_prompt_tokens=usage.prompt_tokens,
            summary_completion_tokens=usage.completion_tokens,
            summary_cached_tokens=usage.cached_tokens,
        )


@runtime_checkable
class Summarizer(Protocol):
    """Turns a :class:`~pipecat_summarizer._compaction.prompt.SummaryRequest` into summary text.

    Implementations raise on failure; the processor treats an empty or whitespace-only
    answer as a failure too. Timeouts are enforced by the caller. ``summarize`` must be a
    coroutine function. A backend holding connections may also offer ``async aclose()``:
    the processor calls it only on summarizers it built itself; one the application
    passed in is the application's to close. It may also offer ``attach()`` and
    ``async detach()``: each processor calls them once, at its start and at its end (see
    :func:`attach_summarizer`), so the backend can close what it opened when no call
    uses it.
    """

    async def summarize(self, request: SummaryRequest) -> str | SummaryResult:
        """Return the summary for ``request``: its text, or a :class:`SummaryResult`."""
        ...


def attach_summarizer(summarizer: object) -> None:
    """Tell ``summarizer`` a processor starts using it: ``summarizer.attach()`` if it has one.

    Called once per processor, at its start; paired with :func:`detach_summarizer`.
    """
    attach = getattr(summarizer, "attach", None)
    if callable(attach):
        attach()


async def detach_summarizer(summarizer: object) -> None:
    """Tell ``summarizer`` a processor has ended: ``await summarizer.detach()`` if it has one.

    Called once per processor, at its end (End, Cancel or cleanup). A failure is logged
    (its class only) and never raised: closing must not break the end of a call.
    """
    detach = getattr(summarizer, "detach", None)
    if not callable(detach):
        return
    try:
        result = detach()
        if inspect.isawaitable(result):
            await result
    except Exception as e:
        logger.warning(f"{type(summarizer).__name__}: detach failed ({type(e).__name__})")


_FENCE = re.compile(r"\A```[A-Za-z0-9_+-]*[ \t]*\n(?P<body>.*?)\n?```\Z", re.DOTALL)


def unfence(text: str) -> str:
    """``text`` stripped, and without a markdown code fence around the whole of it.

    Models often wrap an answer (a JSON record above all) in a ```` ```json ```` fence;
    a fence inside the text is left alone.
    """
    text = text.strip()
    match = _FENCE.match(text)
    return match.group("body").strip() if match else text


def require_text(text: str | None) -> str:
    """A backend's answer as it came, once it is known not to be empty.

    Backends call this (and no cleaning of their own): the text is cleaned once, by
    :func:`as_result`, on its way to the context.

    Raises:
        SummarizerError: If the answer is missing or only whitespace.
    """
    if text is None or not str(text).strip():
        raise SummarizerError("summarizer returned an empty summary")
    return str(text)


def clean_summary(text: str | None) -> str:
    """Clean a backend's answer: stripped, without a fence around it; reject an empty one.

    The one cleaning step of the summary text (called by :func:`as_result`).

    Args:
        text: The raw answer.

    Returns:
        The cleaned text.

    Raises:
        SummarizerError: If the answer is missing, only whitespace or an empty fence.
    """
    cleaned = unfence(require_text(text))
    if not cleaned:
        raise SummarizerError("summarizer returned an empty summary")
    return cleaned


def as_result(value: str | SummaryResult | None) -> SummaryResult:
    """Normalize a backend's answer to a :class:`SummaryResult` with clean, non-empty text.

    Every backend's answer reaches the context through here: this is where the summary
    text is cleaned (:func:`clean_summary`), once.

    Raises:
        SummarizerError: If the answer is empty.
    """
    if isinstance(value, SummaryResult):
        return SummaryResult(clean_summary(value.text), value.sections, value.usage)
    return SummaryResult(clean_summary(value))


def is_async_summarizer(summarizer: object) -> bool:
    """Whether ``summarizer.summarize`` is a coroutine function (or an async callable)."""
    method = getattr(summarizer, "summarize", None)
    if method is None or not callable(method):
        return False
    if inspect.iscoroutinefunction(method):
        return True
    # an object with an async __call__ (a mock, a wrapper) is fine too
    return inspect.iscoroutinefunction(type(method).__call__)


_IDENTIFIER = re.compile(r"^[A-Za-z0-9_.\-]{1,60}$")


def _host_of(error: BaseException) -> str | None:
    request = getattr(error, "request", None)
    url = getattr(request, "url", None)
    host = getattr(url, "host", None)
    if not host:
        return None
    port = getattr(url, "port", None)
    return f"{host}:{port}" if port else str(host)


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen and len(seen) < 20:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _connection_cause(chain: list[BaseException]) -> str:
    for e in chain:
        if isinstance(e, ConnectionRefusedError) or getattr(e, "errno", None) == errno.ECONNREFUSED:
            return "connection refused"
        if isinstance(e, ConnectionResetError):
            return "connection reset"
        if isinstance(e, socket.gaierror):
            return "name resolution failed"
        if isinstance(e, TimeoutError) or "Timeout" in type(e).__name__:
            return "connection timed out"
        if isinstance(e, ssl.SSLError):
            return "TLS error"
    text = " ".join(str(e) for e in chain).lower()
    # httpx/anyio keep the OS error only as text on some platforms
    if "refused" in text or "errno 111" in text or "connect call failed" in text:
        return "connection refused"
    if "name or service not known" in text or "nodename nor servname" in text:
        return "name resolution failed"
    return f"connection failed ({type(chain[-1]).__name__})"


def describe_error(error: BaseException) -> str:
    """A log-safe description of a summarizer failure: its kind, host and cause.

    Backend error bodies and arbitrary exception messages can echo the request (the
    conversation), so only structured, identifier-like parts are kept: the exception type,
    the HTTP status, the error's ``type``/``code``, the host, and the cause of a connection
    failure ("connection refused to 127.0.0.1:9"). Messages of :class:`SummarizerError`
    are written by this package without content, and are kept.

    Args:
        error: The exception.

    Returns:
        One line, without conversation text.
    """
    name = type(error).__name__
    if isinstance(error, SummarizerError):
        return f"{name}: {error}"
    if isinstance(error, TimeoutError):
        return name
    host = _host_of(error)
    where = f" to {host}" if host else ""
    status = getattr(error, "status_code", None)
    if isinstance(status, int):
        parts = [f"HTTP {status}"]
        for attr in ("type", "code"):
            value = getattr(error, attr, None)
            if isinstance(value, str) and _IDENTIFIER.match(value):
                parts.append(f"{attr}={value}")
        where = f" from {host}" if host else ""
        return f"{name}: {' '.join(parts)}{where}"
    chain = _chain(error)
    if "Connection" in name or any(isinstance(e, OSError) for e in chain):
        return f"{name}: {_connection_cause(chain)}{where}"
    return f"{name}{where}"

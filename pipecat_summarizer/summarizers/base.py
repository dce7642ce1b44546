"""The one small protocol every summarizer backend implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pipecat_summarizer.prompt import SummaryRequest


class SummarizerError(RuntimeError):
    """A summarizer backend failed to produce a usable summary."""


@dataclass(frozen=True)
class SummaryResult:
    """A summary with its sections already structured (for backends with JSON output).

    Parameters:
        text: The summary text placed in the context.
        sections: Items per section (``FACTS``, ``CONSTRAINTS``, ``DECISIONS``,
            ``OPEN QUESTIONS``); ``None`` to have the text parsed instead.
    """

    text: str
    sections: dict[str, list[str]] | None = None


@runtime_checkable
class Summarizer(Protocol):
    """Turns a :class:`~pipecat_summarizer.prompt.SummaryRequest` into summary text.

    Implementations raise on failure; the processor treats an empty or whitespace-only
    answer as a failure too. Timeouts are enforced by the caller.
    """

    async def summarize(self, request: SummaryRequest) -> str | SummaryResult:
        """Return the summary for ``request``: its text, or a :class:`SummaryResult`."""
        ...


def clean_summary(text: str | None) -> str:
    """Strip a backend's answer and reject an empty one.

    Args:
        text: The raw answer.

    Returns:
        The stripped text.

    Raises:
        SummarizerError: If the answer is missing or only whitespace.
    """
    if text is None or not str(text).strip():
        raise SummarizerError("summarizer returned an empty summary")
    return str(text).strip()


def as_result(value: str | SummaryResult | None) -> SummaryResult:
    """Normalize a backend's answer to a :class:`SummaryResult` with non-empty text.

    Raises:
        SummarizerError: If the answer is empty.
    """
    if isinstance(value, SummaryResult):
        return SummaryResult(clean_summary(value.text), value.sections)
    return SummaryResult(clean_summary(value))

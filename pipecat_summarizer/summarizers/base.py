"""The one small protocol every summarizer backend implements."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pipecat_summarizer.prompt import SummaryRequest


class SummarizerError(RuntimeError):
    """A summarizer backend failed to produce a usable summary."""


@runtime_checkable
class Summarizer(Protocol):
    """Turns a :class:`~pipecat_summarizer.prompt.SummaryRequest` into summary text.

    Implementations raise on failure; the processor treats an empty or whitespace-only
    answer as a failure too. Timeouts are enforced by the caller.
    """

    async def summarize(self, request: SummaryRequest) -> str:
        """Return the summary text for ``request``."""
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

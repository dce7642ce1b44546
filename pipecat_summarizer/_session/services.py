"""The processor's asynchronous services: its secondary LLM from start to end
(:class:`SummarizerLease`) and recall's turn (:func:`recall_turn`), which awaits the archive
and hands the placed block to the context's owner."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loguru import logger
from pipecat.services.llm_service import LLMService
from pipecat.utils.context.llm_context_summarization import LLMAutoContextSummarizationConfig

from pipecat_summarizer.summarizers.base import (
    Summarizer,
    attach_summarizer,
    detach_summarizer,
    is_async_summarizer,
)
from pipecat_summarizer.summarizers.pipecat_llm import PipecatLLMSummarizer

if TYPE_CHECKING:
    from pipecat_summarizer._session.owner import ContextSession


def as_summarizer(summarizer: Any) -> Summarizer:
    """A :class:`Summarizer` from a summarizer or any Pipecat ``LLMService``."""
    if isinstance(summarizer, LLMService):
        return PipecatLLMSummarizer(summarizer)
    if not is_async_summarizer(summarizer):
        # a sync summarize() would block the event loop, or return a non-awaitable that
        # fails only at the first summary, far from the cause
        raise TypeError(
            "summarizer must have an async summarize(request) method (a coroutine "
            f"function) or be an LLMService; got {type(summarizer).__name__}"
        )
    return summarizer


class SummarizerLease:
    """The processor's secondary LLM, used from its start to its end.

    Clients built here (a Pipecat ``LLMService`` wrapped) are closed at the end; a
    summarizer the application passed in is the application's (it may be shared: it
    closes what it opened itself when the last processor using it ends).

    Args:
        summarizer: What the application passed (``None``: ``config.summary_config.llm``).
        config: Pipecat's auto-summarization config.
        name: How log lines name the processor.

    Raises:
        ValueError: If no summarizer is configured.
        TypeError: If it has no async ``summarize`` and is not an ``LLMService``.
    """

    def __init__(self, summarizer: Any, config: LLMAutoContextSummarizationConfig, name: str):
        """Resolve the summarizer."""
        if summarizer is None:
            summarizer = config.summary_config.llm
        if summarizer is None:
            raise ValueError(
                "ContextSummarizer needs a summarizer: pass summarizer=OpenAISummarizer(...) "
                "(or any LLMService), or set LLMContextSummaryConfig(llm=...)"
            )
        self.summarizer = as_summarizer(summarizer)
        self._owned: list[Any] = [] if self.summarizer is summarizer else [self.summarizer]
        self._attached = False
        self._released = False
        self._name = name

    def attach(self) -> None:
        """The call starts (once; never after the end)."""
        if self._attached or self._released:
            return
        self._attached = True
        try:
            attach_summarizer(self.summarizer)
        except Exception as e:  # the call goes on; its summaries may fail later
            logger.warning(f"{self._name}: attaching the summarizer failed ({type(e).__name__})")

    async def release(self) -> None:
        """The call is over (the first of End, Cancel and cleanup): detach, close ours."""
        self._released = True
        if self._attached:
            self._attached = False
            await detach_summarizer(self.summarizer)
        owned, self._owned = self._owned, []
        for client in owned:
            close = getattr(client, "aclose", None)
            if close is None:
                continue
            try:
                await close()
            except Exception as e:  # closing must never break End/Cancel
                logger.warning(f"{self._name}: closing the summarizer failed ({type(e).__name__})")


async def recall_turn(session: ContextSession, started: float) -> None:
    """Place this turn's recalled message, if the archive answers within the budget
    (counted from ``started``, when the frame reached the processor). Never raises: recall
    never costs the turn."""
    recall = session.recall
    if recall is None or not recall.params.enabled or session.schedule.ended:
        # after the call's end no search has a turn to serve (Pipecat's user aggregator
        # pushes a turn still being spoken after the EndFrame): it would outlive the call
        return
    try:
        placed = await recall.prepare(
            lambda: session.messages,
            session.record.texts_in_view,
            room=session.recall_room,
            started=started,
        )
        session.place_recalled(placed)
    except Exception as e:
        recall.message = None
        logger.error(f"{session}: recall failed ({type(e).__name__}); the turn goes without")

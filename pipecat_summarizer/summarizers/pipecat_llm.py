"""A summarizer on any Pipecat ``LLMService``, called outside the pipeline."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer.prompt import SummaryRequest
from pipecat_summarizer.summarizers.base import clean_summary

if TYPE_CHECKING:
    from pipecat.services.llm_service import LLMService


class PipecatLLMSummarizer:
    """Summarizes with a Pipecat ``LLMService`` through its ``run_inference``.

    This is what ``LLMContextSummaryConfig.llm`` maps to. The service does not need to
    be in the pipeline.

    Args:
        llm: The service.
    """

    def __init__(self, llm: LLMService):
        """Initialize the summarizer."""
        self.llm = llm

    async def summarize(self, request: SummaryRequest) -> str:
        """Run one out-of-band inference.

        Args:
            request: The summary request.

        Returns:
            The summary text.
        """
        context = LLMContext(messages=[{"role": "user", "content": request.user_message}])
        text = await self.llm.run_inference(
            context, max_tokens=request.max_tokens, system_instruction=request.system_prompt
        )
        return clean_summary(text)

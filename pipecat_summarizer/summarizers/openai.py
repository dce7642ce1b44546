"""A summarizer on any OpenAI-compatible chat completions endpoint."""

from __future__ import annotations

import os

from openai import AsyncOpenAI

from pipecat_summarizer.prompt import SummaryRequest
from pipecat_summarizer.summarizers.base import SummarizerError, clean_summary


class OpenAISummarizer:
    """Summarizes on an OpenAI-compatible server (OpenAI, Groq, Together, Ollama, vLLM...).

    Args:
        model: The model name, for example ``"gpt-4o-mini"``.
        base_url: The API base URL; ``None`` for OpenAI's.
        api_key: The API key; defaults to ``OPENAI_API_KEY`` (a placeholder is used for
            local servers that need none).
        client: An existing ``AsyncOpenAI`` client to use instead of building one.
        temperature: Sampling temperature; low keeps summaries faithful.
        max_retries: Retries inside the OpenAI client (the processor adds its own backoff).
    """

    def __init__(
        self,
        *,
        model: str = "gpt-4o-mini",
        base_url: str | None = None,
        api_key: str | None = None,
        client: AsyncOpenAI | None = None,
        temperature: float = 0.2,
        max_retries: int = 0,
    ):
        """Initialize the summarizer."""
        self.model = model
        self.temperature = temperature
        self._client = client or AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "not-needed",
            max_retries=max_retries,
        )

    async def summarize(self, request: SummaryRequest) -> str:
        """Request a summary from the chat completions endpoint.

        Args:
            request: The summary request.

        Returns:
            The summary text.

        Raises:
            SummarizerError: If the answer has no text.
            openai.OpenAIError: On HTTP and connection errors.
        """
        response = await self._client.chat.completions.create(
            model=self.model,
            messages=[
                {"role": "system", "content": request.system_prompt},
                {"role": "user", "content": request.user_message},
            ],
            max_tokens=request.max_tokens,
            temperature=self.temperature,
        )
        if not response.choices:
            raise SummarizerError("summarizer response has no choices")
        return clean_summary(response.choices[0].message.content)

    async def aclose(self) -> None:
        """Close the underlying HTTP client."""
        await self._client.close()

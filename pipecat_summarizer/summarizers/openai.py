"""A summarizer on any OpenAI-compatible chat completions endpoint."""

from __future__ import annotations

import json
import os

from openai import AsyncOpenAI

from pipecat_summarizer.prompt import SECTIONS, SummaryRequest
from pipecat_summarizer.sections import render_sections
from pipecat_summarizer.summarizers.base import SummarizerError, SummaryResult, clean_summary

_JSON_KEYS = {name: name.lower().replace(" ", "_") for name in SECTIONS}

RECORD_SCHEMA = {
    "type": "object",
    "properties": {
        key: {"type": "array", "items": {"type": "string"}} for key in _JSON_KEYS.values()
    },
    "required": list(_JSON_KEYS.values()),
    "additionalProperties": False,
}


def parse_json_record(text: str) -> dict[str, list[str]] | None:
    """Sections from a JSON memory record, or ``None`` if ``text`` is not one."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    sections = {}
    for name, key in _JSON_KEYS.items():
        items = data.get(key, [])
        if not isinstance(items, list):
            return None
        sections[name] = [str(i).strip() for i in items if str(i).strip()]
    return sections


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
        max_tokens_param: The request field that carries the output budget: ``"max_tokens"``,
            or ``"max_completion_tokens"`` for OpenAI's reasoning models.
        structured: Ask for the record as JSON under a strict schema (``response_format``),
            for servers that support it; the sections then need no parsing. An answer that
            is not valid JSON is still used as text.
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
        max_tokens_param: str = "max_tokens",
        structured: bool = False,
    ):
        """Initialize the summarizer."""
        if max_tokens_param not in ("max_tokens", "max_completion_tokens"):
            raise ValueError("max_tokens_param must be 'max_tokens' or 'max_completion_tokens'")
        self.max_tokens_param = max_tokens_param
        self.model = model
        self.temperature = temperature
        self.structured = structured
        self._client = client or AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "not-needed",
            max_retries=max_retries,
        )

    async def summarize(self, request: SummaryRequest) -> str | SummaryResult:
        """Request a summary from the chat completions endpoint.

        Args:
            request: The summary request.

        Returns:
            The summary text, or a ``SummaryResult`` with its sections when ``structured``.

        Raises:
            SummarizerError: If the answer has no text or was cut off at the budget.
            openai.OpenAIError: On HTTP and connection errors.
        """
        system = request.system_prompt
        extra = {}
        if self.structured:
            system += (
                "\n\nAnswer with JSON only: an object whose keys facts, constraints, decisions "
                "and open_questions each hold a list of short strings."
            )
            extra["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "memory_record", "strict": True, "schema": RECORD_SCHEMA},
            }
        response = await self._client.chat.completions.create(
            model=self.model,
            messages=[
                {"role": "system", "content": system},
                {"role": "user", "content": request.user_message},
            ],
            temperature=self.temperature,
            **{self.max_tokens_param: request.max_tokens},
            **extra,
        )
        if not response.choices:
            raise SummarizerError("summarizer response has no choices")
        choice = response.choices[0]
        if choice.finish_reason == "length":
            # A cut-off record would roll forward with its last sections missing.
            raise SummarizerError(f"summary cut off at max_tokens={request.max_tokens}")
        text = clean_summary(choice.message.content)
        if self.structured:
            sections = parse_json_record(text)
            if sections is not None:
                return SummaryResult(clean_summary(render_sections(sections)), sections)
        return text

    async def aclose(self) -> None:
        """Close the underlying HTTP client."""
        await self._client.close()

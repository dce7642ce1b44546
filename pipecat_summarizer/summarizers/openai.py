"""A summarizer on any OpenAI-compatible chat completions endpoint."""

from __future__ import annotations

import asyncio
import json
import os
from urllib.parse import urlsplit

from loguru import logger
from openai import AsyncOpenAI

from pipecat_summarizer._compaction.prompt import SECTIONS, SummaryRequest
from pipecat_summarizer._record.sections import render_sections
from pipecat_summarizer._validation import check_number
from pipecat_summarizer.summarizers.base import (
    SummarizerError,
    SummaryResult,
    require_text,
    unfence,
    usage_of,
)

# A key from the environment is sent only to these hosts (or when base_url is not given).
OPENAI_HOSTS = ("api.openai.com",)

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
    """Sections from a JSON memory record, or ``None`` if ``text`` is not one.

    A markdown fence around the JSON is allowed (models add one despite the schema).
    """
    try:
        data = json.loads(unfence(text))
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


def is_openai_url(base_url: str | None) -> bool:
    """Whether ``base_url`` is OpenAI's own API (``None`` means the client's default)."""
    if base_url is None:
        return True
    host = (urlsplit(str(base_url)).hostname or "").lower()
    return host in OPENAI_HOSTS


class OpenAISummarizer:
    """Summarizes on an OpenAI-compatible server (OpenAI, Groq, Together, Ollama, vLLM...).

    One instance can serve every call of a process: it holds one connection pool, and
    ``max_concurrency`` caps the summary requests in flight across all calls (the others
    wait their turn).

    The pool it built is closed when no call needs it: each processor using it counts as
    one user from its start to its end (:meth:`attach` / :meth:`detach`, called by the
    processor); when the last one ends, the pool closes, and the next request opens a new
    one. So an instance built inline for one call leaves no socket behind, and one shared
    by every call stays open while any call runs. :meth:`aclose` (or leaving
    ``async with OpenAISummarizer(...) as summarizer:``) closes it for good. A ``client``
    passed in stays the application's: neither closes it.

    Args:
        model: The model name, for example ``"gpt-4o-mini"``.
        base_url: The API base URL; ``None`` for OpenAI's.
        api_key: The API key. When not given, ``OPENAI_API_KEY`` is used only for OpenAI's
            own API (``base_url`` ``None`` or ``api.openai.com``); another host gets a
            placeholder, so the OpenAI key never leaks to a third-party or local server.
        client: An existing ``AsyncOpenAI`` client to use instead of building one. It stays
            the caller's: :meth:`aclose` does not close it.
        temperature: Sampling temperature; low keeps summaries faithful.
        max_retries: Retries inside the OpenAI client (the processor adds its own backoff).
        max_tokens_param: The request field that carries the output budget: ``"max_tokens"``,
            or ``"max_completion_tokens"`` for OpenAI's reasoning models.
        structured: Ask for the record as JSON under a strict schema (``response_format``),
            for servers that support it; the sections then need no parsing. An answer that
            is not valid JSON is still used as text.
        max_concurrency: At most this many summary requests in flight at once through this
            instance (``None`` for no cap). Share one instance across calls to cap a server.
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
        max_concurrency: int | None = None,
    ):
        """Initialize the summarizer."""
        if max_tokens_param not in ("max_tokens", "max_completion_tokens"):
            raise ValueError("max_tokens_param must be 'max_tokens' or 'max_completion_tokens'")
        if not isinstance(model, str) or not model.strip():
            raise ValueError("model must be a non-empty model name, for example 'gpt-4o-mini'")
        if not isinstance(structured, bool):
            raise TypeError(f"structured must be True or False, got {type(structured).__name__}")
        check_number("temperature", temperature)
        check_number("max_retries", max_retries, integer=True)
        check_number("max_concurrency", max_concurrency, integer=True, optional=True)
        if max_retries < 0:
            raise ValueError("max_retries must not be negative")
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1 (or None)")
        self.max_tokens_param = max_tokens_param
        self.model = model
        self.temperature = temperature
        self.structured = structured
        self.max_concurrency = max_concurrency
        self._semaphore = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        self._in_flight = 0
        self._owns_client = client is None
        if api_key is None and is_openai_url(base_url):
            api_key = os.environ.get("OPENAI_API_KEY")
        elif api_key is None and os.environ.get("OPENAI_API_KEY"):
            logger.debug("OpenAISummarizer: OPENAI_API_KEY not sent to a non-OpenAI base_url")
        self._base_url, self._api_key = base_url, api_key or "not-needed"
        self._max_retries = max_retries
        # None between the last user's end and the next request (reopened lazily)
        self._client: AsyncOpenAI | None = client or self._build()
        self._users = 0  # processors attached now
        self._close_when_idle = False  # the last user left while a request was in flight
        self._closed = False  # aclose(): for good

    @property
    def in_flight(self) -> int:
        """Summary requests sent and not yet answered."""
        return self._in_flight

    async def summarize(self, request: SummaryRequest) -> str | SummaryResult:
        """Request a summary from the chat completions endpoint.

        Args:
            request: The summary request.

        Returns:
            The summary text, or a ``SummaryResult`` with its sections when ``structured``
            and with the response's ``usage`` when it reports one.

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
        params = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": request.user_message},
            ],
            "temperature": self.temperature,
            self.max_tokens_param: request.max_tokens,
            **extra,
        }
        if self._semaphore is None:
            response = await self._create(params)
        else:
            async with self._semaphore:
                response = await self._create(params)
        if not response.choices:
            raise SummarizerError("summarizer response has no choices")
        choice = response.choices[0]
        if choice.finish_reason == "length":
            # A cut-off record would roll forward with its last sections missing.
            raise SummarizerError(f"summary cut off at max_tokens={request.max_tokens}")
        # not cleaned here: as_result cleans every backend's answer, once
        text = require_text(choice.message.content)
        usage = usage_of(response)
        if self.structured:
            sections = parse_json_record(text)
            if sections is not None:
                return SummaryResult(render_sections(sections), sections, usage)
        return text if usage is None else SummaryResult(text, None, usage)

    @property
    def users(self) -> int:
        """Processors attached now (see :meth:`attach`)."""
        return self._users

    def attach(self) -> None:
        """Count one more user (a processor, from its start); see :meth:`detach`."""
        self._users += 1
        self._close_when_idle = False

    async def detach(self) -> None:
        """Count one user less; the last one out closes the pool this summarizer built.

        A request still in flight (sent outside any processor) finishes first; the next
        request opens a new pool. A ``client`` passed in is never closed.
        """
        self._users = max(0, self._users - 1)
        if self._users == 0 and self._owns_client:
            if self._in_flight:
                self._close_when_idle = True
            else:
                await self._release()

    async def _release(self) -> None:
        # swap first: a request starting while the old pool closes builds a new one
        client, self._client = self._client, None
        self._close_when_idle = False
        if client is not None:
            await client.close()

    def _current(self) -> AsyncOpenAI:
        if self._closed:
            raise SummarizerError("OpenAISummarizer is closed (aclose was called)")
        if self._client is None:
            self._client = self._build()
        return self._client

    def _build(self) -> AsyncOpenAI:
        return AsyncOpenAI(
            base_url=self._base_url, api_key=self._api_key, max_retries=self._max_retries
        )

    async def _create(self, params: dict):
        client = self._current()
        self._in_flight += 1
        try:
            return await client.chat.completions.create(**params)
        finally:
            self._in_flight -= 1
            if self._close_when_idle and not self._in_flight and not self._users:
                await self._release()

    async def aclose(self) -> None:
        """Close the connection pool this summarizer built, for good (not a ``client``
        passed in, which stays usable, and so does this summarizer with it).

        Safe to call more than once.
        """
        if self._owns_client:
            self._closed = True
            self._close_when_idle = False
            if self._client is not None:
                await self._client.close()

    async def __aenter__(self) -> OpenAISummarizer:
        """Use as ``async with OpenAISummarizer(...) as summarizer:``."""
        return self

    async def __aexit__(self, *exc_info) -> None:
        """Close on leaving the block."""
        await self.aclose()

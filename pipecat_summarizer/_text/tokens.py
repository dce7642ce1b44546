"""Token counting: the one token estimate, and exact tokenizers.

:func:`estimate_text_tokens` is the estimate of a string everywhere (the memory record's
budgets, recall's block, the extractive summarizer, the default counter's text).

The estimate agrees with Pipecat's ``LLMContextSummarizationUtil`` (characters / 4 plus a
per-message overhead) on plain ASCII chat, but also counts ``input_text`` parts, dict-valued
tool arguments and the text of service-specific messages, counts CJK characters as about
one token each instead of a quarter, and counts audio and file parts by their size (see
:func:`media_tokens`) instead of not at all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from pipecat.processors.aggregators.llm_context import LLMSpecificMessage

from pipecat_summarizer._text.messages import TEXT_PART_TYPES, content_texts, json_text

# Pipecat's constants, kept equal so thresholds mean the same thing in both.
CHARS_PER_TOKEN = 4
TOKEN_OVERHEAD_PER_MESSAGE = 10
IMAGE_TOKEN_ESTIMATE = 500

# Audio: Pipecat's audio messages are WAV at the input rate (16 kHz, 16-bit mono = 32,000
# bytes a second). Providers bill audio by duration: OpenAI about 10 tokens a second, Gemini
# 32; the higher is used, so a ceiling errs on the safe side.
AUDIO_BYTES_PER_SECOND = 32_000
AUDIO_TOKENS_PER_SECOND = 32
# Files (PDFs, documents) inline as base64: providers extract text and page images; about 8
# bytes of file a token sits between plain text (~4) and image-heavy PDFs.
FILE_BYTES_PER_TOKEN = 8
# A part whose size cannot be known (a file or audio by id or URL) counts like an image.
UNKNOWN_MEDIA_TOKEN_ESTIMATE = IMAGE_TOKEN_ESTIMATE

_IMAGE_PART_TYPES = ("image_url", "image", "input_image")
_AUDIO_PART_TYPES = ("input_audio", "audio")
_FILE_PART_TYPES = ("file", "file_base64", "file_url", "input_file")


# CJK ideographs, kana, hangul and full-width forms: real tokenizers spend about one token
# per character on them, not a quarter.
_WIDE = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]"
)


def wide_chars(text: str) -> int:
    """How many characters of ``text`` count as a token each (CJK, kana, hangul)."""
    return 0 if text.isascii() else len(_WIDE.findall(text))


def tokens_for(chars: int, wide: int) -> int:
    """The estimate of a text of ``chars`` characters, ``wide`` of them wide (see
    :func:`estimate_text_tokens`; for a size kept up to date without the text)."""
    return wide + (chars - wide) // CHARS_PER_TOKEN


def estimate_text_tokens(text: str) -> int:
    """Estimate the tokens of a string: ASCII-like text at 4 characters a token (rounded
    down, as Pipecat's estimate), CJK at 1.

    Args:
        text: The text to estimate.

    Returns:
        The estimated token count.
    """
    if not text:
        return 0
    return tokens_for(len(text), wide_chars(text))


def message_texts(message: Any) -> list[str]:
    """Return every piece of text a message carries (content parts, tool names and arguments).

    Args:
        message: A context message (a dict or an ``LLMSpecificMessage``).

    Returns:
        The texts, in order; images are not included.
    """
    if isinstance(message, LLMSpecificMessage):
        return [json_text(message.message)]
    if not isinstance(message, dict):
        return [str(message)]
    texts = content_texts(message.get("content"), typed=True)
    for call in message.get("tool_calls") or []:
        if isinstance(call, dict):
            func = call.get("function") or {}
            if isinstance(func, dict):
                texts.append(str(func.get("name", "")) + json_text(func.get("arguments", "")))
    return texts


def _base64_bytes(data: Any) -> int | None:
    """Decoded size of base64 ``data`` (a data URL's payload too), or None if not given."""
    if not isinstance(data, str):
        return None
    if data.startswith("data:"):
        comma = data.find(",")
        if comma < 0:
            return None
        return (len(data) - comma - 1) * 3 // 4
    if data.startswith(("http://", "https://", "gs://", "s3://")):
        return None
    return len(data) * 3 // 4


def audio_tokens(size_bytes: int) -> int:
    """Tokens of ``size_bytes`` of audio: its duration at ``AUDIO_BYTES_PER_SECOND``, billed
    at ``AUDIO_TOKENS_PER_SECOND`` (at least one token)."""
    return max(1, size_bytes * AUDIO_TOKENS_PER_SECOND // AUDIO_BYTES_PER_SECOND)


def file_tokens(size_bytes: int) -> int:
    """Tokens of an inline file of ``size_bytes`` (at least one token)."""
    return max(1, size_bytes // FILE_BYTES_PER_TOKEN)


def _part_tokens(part: Any) -> int:
    kind = part.get("type")
    if kind in TEXT_PART_TYPES:
        return 0  # counted as text
    if kind in _IMAGE_PART_TYPES:
        return IMAGE_TOKEN_ESTIMATE
    if kind in _AUDIO_PART_TYPES:
        inner = part.get(kind)
        size = _base64_bytes(inner.get("data") if isinstance(inner, dict) else inner)
        return UNKNOWN_MEDIA_TOKEN_ESTIMATE if size is None else audio_tokens(size)
    if kind in _FILE_PART_TYPES:
        inner = part.get("file")
        inner = inner if isinstance(inner, dict) else part
        size = _base64_bytes(inner.get("file_data") or inner.get("data"))
        return UNKNOWN_MEDIA_TOKEN_ESTIMATE if size is None else file_tokens(size)
    # An unknown part type: its serialized size, like text.
    return estimate_text_tokens(json_text(part))


def media_tokens(message: Any) -> int:
    """Tokens of a message's non-text content parts.

    Images count ``IMAGE_TOKEN_ESTIMATE`` each, as in Pipecat. Audio counts by duration
    (decoded base64 size at ``AUDIO_BYTES_PER_SECOND``, ``AUDIO_TOKENS_PER_SECOND``), inline
    files by size (``FILE_BYTES_PER_TOKEN``), audio or files given by reference
    ``UNKNOWN_MEDIA_TOKEN_ESTIMATE``, and unknown part types by their serialized size.

    Args:
        message: A context message.

    Returns:
        The tokens of its non-text parts (0 for plain text messages).
    """
    if not isinstance(message, dict):
        return 0
    content = message.get("content")
    if not isinstance(content, list):
        return 0
    return sum(_part_tokens(p) for p in content if isinstance(p, dict))


class TokenCounter(Protocol):
    """Counts the tokens of one context message."""

    def count_message(self, message: Any) -> int:
        """Return the token count of ``message``."""
        ...


class EstimateTokenCounter:
    """The default counter: Pipecat's estimate, extended (see the module docstring)."""

    def count_message(self, message: Any) -> int:
        """Estimate the tokens of one message.

        Args:
            message: A context message.

        Returns:
            The estimated token count, overhead included.
        """
        if message.__class__ is dict:
            content = message.get("content")
            # the common message, plain text: what the general path below gives, in one step
            if (
                content.__class__ is str
                and not message.get("tool_calls")
                and "tool_call_id" not in message
            ):
                if content.isascii():
                    return TOKEN_OVERHEAD_PER_MESSAGE + len(content) // CHARS_PER_TOKEN
                return TOKEN_OVERHEAD_PER_MESSAGE + estimate_text_tokens(content)
        total = TOKEN_OVERHEAD_PER_MESSAGE
        for text in message_texts(message):
            total += estimate_text_tokens(text)
        total += media_tokens(message)
        if isinstance(message, dict) and "tool_call_id" in message:
            total += TOKEN_OVERHEAD_PER_MESSAGE
        return total


class TokenizerCounter:
    """Exact counting with a tokenizer, for example a tiktoken ``Encoding``.

    Args:
        tokenizer: Any object with ``encode(str) -> list``, or a callable ``str -> int``.
        overhead_per_message: Tokens added per message for the role and framing.
    """

    def __init__(self, tokenizer: Any, *, overhead_per_message: int = 4):
        """Initialize the counter."""
        if hasattr(tokenizer, "encode"):
            self._count: Callable[[str], int] = lambda s: len(tokenizer.encode(s))
        elif callable(tokenizer):
            self._count = tokenizer
        else:
            raise ValueError("tokenizer must have an encode() method or be a callable str -> int")
        self._overhead = overhead_per_message

    def count_message(self, message: Any) -> int:
        """Count the tokens of one message exactly.

        Args:
            message: A context message.

        Returns:
            The token count, overhead included.
        """
        total = self._overhead + media_tokens(message)
        for text in message_texts(message):
            if text:
                total += self._count(text)
        return total


def as_token_counter(counter: Any) -> TokenCounter:
    """Accept a token counter, or wrap a raw tokenizer, or reject it with a clear error.

    Args:
        counter: An object with ``count_message(message) -> int`` (used as is), or a
            tokenizer with ``encode(str)`` such as a tiktoken ``Encoding`` (wrapped in
            :class:`TokenizerCounter`).

    Returns:
        A :class:`TokenCounter`.

    Raises:
        TypeError: For anything else, a bare callable included (it is ambiguous whether it
            counts a string or a message: wrap it as ``TokenizerCounter(fn)``).
    """
    if isinstance(counter, (str, bytes)):  # str has an encode() too
        raise TypeError(
            "token_counter must be a TokenCounter or a tokenizer object, got a "
            f"{type(counter).__name__}; for a tiktoken encoding name, pass "
            "TokenizerCounter(tiktoken.get_encoding(name))"
        )
    if callable(getattr(counter, "count_message", None)):
        return counter
    if callable(getattr(counter, "encode", None)):
        return TokenizerCounter(counter)
    hint = "; for a function str -> int, pass TokenizerCounter(fn)" if callable(counter) else ""
    raise TypeError(
        "token_counter must have count_message(message) -> int (a TokenCounter) or be a "
        f"tokenizer with encode(str), got {type(counter).__name__}{hint}"
    )


def count_text(counter: TokenCounter, text: str) -> int:
    """Count the tokens of a bare string with ``counter`` (without per-message overhead).

    Args:
        counter: The token counter.
        text: The text.

    Returns:
        The token count.
    """
    with_text = counter.count_message({"role": "user", "content": text})
    empty = counter.count_message({"role": "user", "content": ""})
    return max(0, with_text - empty)


def content_size(message: Any) -> int:
    # Cheap fingerprint: Pipecat rewrites tool results in place (IN_PROGRESS -> result).
    if isinstance(message, dict):
        content = message.get("content")
        return len(content) if isinstance(content, (str, list)) else 0
    return 0


class CachedCounter:
    """Memoizes a counter per message object, so each message is counted once.

    Entries are keyed by object identity and hold the message, so an id is never reused
    while cached; a changed content length (a tool result written in place) recounts.
    """

    def __init__(self, counter: TokenCounter, max_entries: int = 50_000):
        """Initialize the cache around ``counter``."""
        self.counter = counter
        self._estimate = counter.__class__ is EstimateTokenCounter
        self._cache: dict[int, tuple[Any, int, int]] = {}
        self._max = max_entries

    def count_message(self, message: Any) -> int:
        """Return the (cached) token count of ``message``."""
        key = id(message)
        size = 0  # content_size(message), inlined: this runs for every new message
        content = None
        if isinstance(message, dict):
            content = message.get("content")
            if isinstance(content, (str, list)):
                size = len(content)
        hit = self._cache.get(key)
        if hit is not None and hit[0] is message and hit[1] == size:
            return hit[2]
        if (
            self._estimate
            and content.__class__ is str
            and content.isascii()
            and not message.get("tool_calls")
            and "tool_call_id" not in message
        ):  # the estimate's plain-text fast path, inlined: one call less per new message
            tokens = TOKEN_OVERHEAD_PER_MESSAGE + size // CHARS_PER_TOKEN
        else:
            tokens = self.counter.count_message(message)
        if len(self._cache) >= self._max:
            self._cache.clear()
        self._cache[key] = (message, size, tokens)
        return tokens

    def forget_except(self, live: Sequence[Any]) -> None:
        """Drop cache entries for messages no longer in ``live``."""
        keep = {id(m) for m in live}
        self._cache = {k: v for k, v in self._cache.items() if k in keep}

"""Token counting: a Pipecat-compatible estimate, exact tokenizers, and an incremental meter.

The estimate agrees with Pipecat's ``LLMContextSummarizationUtil`` (characters / 4 plus a
per-message overhead) on plain ASCII chat, but also counts ``input_text`` parts, dict-valued
tool arguments and the text of service-specific messages, and counts CJK characters as about
one token each instead of a quarter.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pipecat.processors.aggregators.llm_context import LLMSpecificMessage

# Pipecat's constants, kept equal so thresholds mean the same thing in both.
CHARS_PER_TOKEN = 4
TOKEN_OVERHEAD_PER_MESSAGE = 10
IMAGE_TOKEN_ESTIMATE = 500

_TEXT_PART_TYPES = ("text", "input_text", "output_text")
_IMAGE_PART_TYPES = ("image_url", "image", "input_image")


# CJK ideographs, kana, hangul and full-width forms: real tokenizers spend about one token
# per character on them, not a quarter.
_WIDE = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]"
)


def _is_wide(ch: str) -> bool:
    return _WIDE.match(ch) is not None


def estimate_text_tokens(text: str) -> int:
    """Estimate the tokens of a string: ASCII-like text at 4 characters a token, CJK at 1.

    Args:
        text: The text to estimate.

    Returns:
        The estimated token count.
    """
    if not text:
        return 0
    if text.isascii():
        return len(text) // CHARS_PER_TOKEN
    wide = len(_WIDE.findall(text))
    return wide + (len(text) - wide) // CHARS_PER_TOKEN


def _json_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def message_texts(message: Any) -> list[str]:
    """Return every piece of text a message carries (content parts, tool names and arguments).

    Args:
        message: A context message (a dict or an ``LLMSpecificMessage``).

    Returns:
        The texts, in order; images are not included.
    """
    if isinstance(message, LLMSpecificMessage):
        return [_json_text(message.message)]
    if not isinstance(message, dict):
        return [str(message)]
    texts: list[str] = []
    content = message.get("content")
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") in _TEXT_PART_TYPES:
                texts.append(str(part.get("text", "")))
    for call in message.get("tool_calls") or []:
        if isinstance(call, dict):
            func = call.get("function") or {}
            if isinstance(func, dict):
                texts.append(str(func.get("name", "")) + _json_text(func.get("arguments", "")))
    return texts


def _image_count(message: Any) -> int:
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return 0
    return sum(
        1 for p in message["content"] if isinstance(p, dict) and p.get("type") in _IMAGE_PART_TYPES
    )


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
        total = TOKEN_OVERHEAD_PER_MESSAGE
        for text in message_texts(message):
            total += estimate_text_tokens(text)
        total += IMAGE_TOKEN_ESTIMATE * _image_count(message)
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
        total = self._overhead + IMAGE_TOKEN_ESTIMATE * _image_count(message)
        for text in message_texts(message):
            if text:
                total += self._count(text)
        return total


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


def _content_size(message: Any) -> int:
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
        self._cache: dict[int, tuple[Any, int, int]] = {}
        self._max = max_entries

    def count_message(self, message: Any) -> int:
        """Return the (cached) token count of ``message``."""
        key = id(message)
        size = _content_size(message)
        hit = self._cache.get(key)
        if hit is not None and hit[0] is message and hit[1] == size:
            return hit[2]
        tokens = self.counter.count_message(message)
        if len(self._cache) >= self._max:
            self._cache.clear()
        self._cache[key] = (message, size, tokens)
        return tokens

    def forget_except(self, live: Sequence[Any]) -> None:
        """Drop cache entries for messages no longer in ``live``."""
        keep = {id(m) for m in live}
        self._cache = {k: v for k, v in self._cache.items() if k in keep}


@dataclass(frozen=True)
class Measurement:
    """What the trigger needs to know about a context, computed incrementally.

    Parameters:
        total_tokens: Tokens of every message in the context.
        reducible_tokens: Tokens summarization can act on (everything but protected
            system/developer messages).
        messages_since_summary: Conversation messages after the last summary (or after the
            system prompt when there is none), protected messages excluded.
        message_count: Messages in the context.
    """

    total_tokens: int
    reducible_tokens: int
    messages_since_summary: int
    message_count: int


class ContextMeter:
    """Incrementally measures a context so the per-frame cost does not grow with its length.

    The common case is append-only growth: the meter checks that the messages it saw are
    still where it saw them (identity of the first and the last seen message) and counts
    only the new ones. Anything else (a splice, ``set_messages``) triggers a full, cached
    recount.

    Args:
        counter: The per-message token counter.
        is_protected: Predicate ``(index, message, messages) -> bool`` for messages that
            summarization never touches.
    """

    def __init__(self, counter: TokenCounter, is_protected: Callable[[int, Any, list], bool]):
        """Initialize the meter."""
        self._counter = counter if isinstance(counter, CachedCounter) else CachedCounter(counter)
        self._is_protected = is_protected
        self._seen_len = 0
        self._first: Any = None
        self._last: Any = None
        self._last_size = 0
        self._total = 0
        self._reducible = 0
        self._since = 0
        self._summary: Any = None

    @property
    def counter(self) -> CachedCounter:
        """The cached counter used by this meter."""
        return self._counter

    def invalidate(self) -> None:
        """Force a full recount on the next measurement."""
        self._seen_len = 0
        self._first = self._last = None

    def measure(self, messages: list, summary_message: Any = None) -> Measurement:
        """Measure ``messages``; ``summary_message`` is the current summary, by identity.

        Args:
            messages: The context's message list.
            summary_message: The summary message this package last spliced in, if any.

        Returns:
            The measurement.
        """
        n = len(messages)
        start = 0
        if (
            self._seen_len
            and n >= self._seen_len
            and summary_message is self._summary
            and messages[0] is self._first
            and messages[self._seen_len - 1] is self._last
            and _content_size(self._last) == self._last_size
        ):
            start = self._seen_len
        else:
            self._total = self._reducible = self._since = 0
            self._summary = summary_message
        for i in range(start, n):
            msg = messages[i]
            tokens = self._counter.count_message(msg)
            self._total += tokens
            if self._is_protected(i, msg, messages):
                continue
            self._reducible += tokens
            if msg is summary_message:
                self._since = 0
            else:
                self._since += 1
        self._seen_len = n
        if n:
            self._first, self._last = messages[0], messages[-1]
            self._last_size = _content_size(self._last)
        return Measurement(self._total, self._reducible, self._since, n)

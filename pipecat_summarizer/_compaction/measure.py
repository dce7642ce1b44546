"""The incremental meter: what the trigger and the ceiling know about a context, and the
rewrites of it someone else made."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from pipecat_summarizer._compaction.calibration import TokenCalibration
from pipecat_summarizer._text.tokens import (
    CachedCounter,
    TokenCounter,
    content_size,
    media_tokens,
    message_texts,
)


class Measurement(NamedTuple):
    """What the trigger needs to know about a context, computed incrementally.

    Immutable; a named tuple rather than a frozen dataclass because one is built on every
    context frame (a frozen dataclass sets each field through ``object.__setattr__``).

    Parameters:
        total_tokens: Tokens of every message in the context.
        reducible_tokens: Tokens summarization can act on (everything but protected
            system/developer messages).
        messages_since_summary: Conversation messages after the last summary (or after the
            system prompt when there is none), protected messages excluded.
        message_count: Messages in the context.
        scale: The provider's tokens per estimated token, from the main LLM's reported usage
            (``_compaction.calibration``); 1.0 until a report calibrated it. The token
            counts above stay estimates: the thresholds and the cadence scale them.
    """

    total_tokens: int
    reducible_tokens: int
    messages_since_summary: int
    message_count: int
    scale: float = 1.0


def is_placeholder(message: Any) -> bool:
    """True for a tool result Pipecat may still overwrite in place: the synchronous
    ``IN_PROGRESS`` placeholder, or an async tool's "running" started message."""
    if not isinstance(message, dict) or message.get("role") != "tool":
        return False
    content = message.get("content")
    return isinstance(content, str) and (
        content == "IN_PROGRESS" or content.startswith('{"type": "async_tool"')
    )


def content_fingerprint(messages: Sequence[Any]) -> str:
    """A digest of what ``messages`` say (roles, texts, media sizes), in order.

    Two contexts with the same fingerprint carry the same content, whichever objects hold
    it; used to remember "nothing could be evicted from this context".

    Args:
        messages: The context messages.

    Returns:
        A short hex digest.
    """
    h = hashlib.blake2b(digest_size=12)
    for m in messages:
        role = m.get("role") if isinstance(m, dict) else type(m).__name__
        h.update(f"\x1e{role}\x1f{media_tokens(m)}".encode())
        for text in message_texts(m):
            h.update(b"\x1f" + text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def _content_key(message: Any) -> tuple:
    role = message.get("role") if isinstance(message, dict) else type(message).__name__
    return (role, media_tokens(message), *message_texts(message))


@dataclass(frozen=True)
class Rewrite:
    """What a rewrite of the context by someone else (the application, Pipecat) removed.

    Parameters:
        removed: The conversation messages the processor last saw that are gone (oldest
            first). A copy of a message with the same role and text that took its place is
            not a removal.
        replaced: The oldest of them is gone: the application cut the conversation's start
            (a replacement, a Flows reset, a truncating update), so nothing older than what
            it kept (the pending queue) may come back.
    """

    removed: tuple[Any, ...]
    replaced: bool


def removed_by_rewrite(seen: Sequence[Any], messages: Sequence[Any]) -> Rewrite | None:
    """Which of the conversation messages ``seen`` (in order) ``messages`` no longer holds.

    Decided by what was kept, by identity: a truncating update that keeps the system prompt
    and the latest turn removed everything between them, and it cut the conversation's start
    (``replaced``), even though the latest messages survived. A message replaced by a copy
    (same role, texts and media) counts as kept.

    Args:
        seen: The conversation messages (not the head, nor the processor's own) as last seen.
        messages: The context's messages now.

    Returns:
        The removal, or ``None`` when every seen message is still there.
    """
    if not seen:
        return None
    now = {id(m) for m in messages}
    gone = [m for m in seen if id(m) not in now]
    if not gone:
        return None
    seen_ids = {id(m) for m in seen}
    # copies: messages that are new by identity but say what a gone one said
    copies: dict[tuple, int] = {}
    for m in messages:
        if id(m) not in seen_ids:
            key = _content_key(m)
            copies[key] = copies.get(key, 0) + 1
    removed = []
    for m in gone:
        key = _content_key(m)
        if copies.get(key, 0) > 0:
            copies[key] -= 1
        else:
            removed.append(m)
    if not removed:
        return None
    return Rewrite(tuple(removed), replaced=removed[0] is seen[0])


class ContextMeter:
    """Incrementally measures a context so the per-frame cost does not grow with its length.

    The common case is append-only growth: the meter checks that the messages it saw are
    still where it saw them (identity of the first and the last seen message, the size of
    the last one, and the content of every tool placeholder Pipecat may overwrite in place)
    and counts only the new ones. Anything else (a splice, ``set_messages``, a tool result
    written over its placeholder) triggers a full, cached recount.

    A rewrite the meter was not told about (:meth:`invalidate`) that removed conversation
    messages it saw (``LLMMessagesUpdateFrame``, a Flows reset, a truncating transform) is
    reported once by :meth:`take_rewrite` (see :func:`removed_by_rewrite`).

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
        self._watch: list[tuple[Any, Any]] = []  # (placeholder message, its content)
        self._seen: list[Any] = []  # the conversation messages seen, in order
        self._expected = False  # invalidate() was called: the next rewrite is ours
        self._removed: list[Any] = []  # removed by others' rewrites, not yet taken
        self._replaced = False
        # the provider's reported usage scales what the trigger compares (set by the ceiling's
        # calibrate(); None: the estimate alone, as without usage metrics)
        self.calibration: TokenCalibration | None = None

    @property
    def counter(self) -> CachedCounter:
        """The cached counter used by this meter."""
        return self._counter

    def invalidate(self) -> None:
        """Force a full recount on the next measurement (the caller rewrote the context)."""
        self._seen_len = 0
        self._first = self._last = None
        self._expected = True

    @property
    def rewritten(self) -> bool:
        """A rewrite by someone else removed messages (not taken yet: :meth:`take_rewrite`)."""
        return bool(self._removed)

    def take_rewrite(self) -> Rewrite | None:
        """Once, what rewrites by someone else removed since the last call (``None``: none)."""
        if not self._removed:
            return None
        rewrite = Rewrite(tuple(self._removed), self._replaced)
        self._removed, self._replaced = [], False
        return rewrite

    def measure(self, messages: list, summary_message: Any = None) -> Measurement:
        """Measure ``messages``; ``summary_message`` is the current summary, by identity.

        Args:
            messages: The context's message list.
            summary_message: The summary message this package last spliced in, if any.

        Returns:
            The measurement.
        """
        n = len(messages)
        start = self._seen_len
        last, watch = self._last, self._watch
        # the messages seen are still where they were (the common, append-only case); tool
        # results Pipecat writes over their placeholders in place, anywhere in the list, and
        # anything else (a splice, set_messages) mean a full recount
        if not (
            start
            and n >= start
            and summary_message is self._summary
            and messages[0] is self._first
            and messages[start - 1] is last
            and content_size(last) == self._last_size
            and (not watch or all(m.get("content") is c for m, c in watch))
        ):
            start = 0
            if not self._expected:
                rewrite = removed_by_rewrite(self._seen, messages)
                if rewrite is not None:  # kept until taken: a later recount must not lose it
                    self._replaced = self._replaced or rewrite.replaced
                    self._removed.extend(rewrite.removed)
            self._total = self._reducible = self._since = 0
            self._summary = summary_message
            self._watch = []
            self._seen = []
        self._expected = False
        seen = self._seen
        # locals: in a running pipeline this loop runs cold, every lookup counts
        count, is_protected, watch = self._counter.count_message, self._is_protected, self._watch
        total, reducible, since = self._total, self._reducible, self._since
        for i in range(start, n):
            msg = messages[i]
            tokens = count(msg)
            total += tokens
            if isinstance(msg, dict) and msg.get("role") == "tool" and is_placeholder(msg):
                watch.append((msg, msg.get("content")))
            if is_protected(i, msg, messages):
                continue
            reducible += tokens
            if msg is summary_message:
                since = 0
            else:
                # conversation messages only: the summary is the processor's own
                seen.append(msg)
                since += 1
        self._total, self._reducible, self._since = total, reducible, since
        if watch and start < n:
            # results written over their placeholders no longer need watching
            self._watch = [w for w in watch if is_placeholder(w[0])]
        self._seen_len = n
        if n:
            self._first, last = messages[0], messages[-1]
            self._last = last
            self._last_size = content_size(last)
        calibration = self.calibration
        scale = 1.0 if calibration is None else calibration.scale
        return Measurement(self._total, self._reducible, self._since, n, scale)

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


class Edit(NamedTuple):
    """One message put in, replaced or taken out at a known place by our own rewrite, so
    the meter counts that message alone (:meth:`ContextMeter.invalidate`; built by
    :func:`single_edit`).

    Parameters:
        at: Where: the inserted (or replacing) message's index in the new list, the
            removed message's in the old one.
        removed: The message taken out, by identity (``None``: an insertion).
        inserted: The message put in, by identity (``None``: a removal).
        left: The message just before ``at``, in both lists.
        right: The message just after the edit, in both lists.
    """

    at: int
    removed: Any
    inserted: Any
    left: Any
    right: Any


def _rindex(messages: Sequence[Any], message: Any) -> int | None:
    # by identity, from the end: the recalled block sits there
    for i in range(len(messages) - 1, -1, -1):
        if messages[i] is message:
            return i
    return None


def single_edit(
    before: Sequence[Any], after: Sequence[Any], *, removed: Any = None, inserted: Any = None
) -> Edit | None:
    """The edit that turns ``before`` into ``after`` by taking ``removed`` out and/or
    putting ``inserted`` in at one place (both by identity), or ``None`` when ``after`` is
    not that, or the place is either end of the list (then the meter recounts).

    Cheap near the end of the list (the messages are looked up from there): the lists are
    checked around the place only, as the meter checks an append.

    Args:
        before: The messages before the rewrite.
        after: The messages after it.
        removed: The message taken out, if any.
        inserted: The message put in its place (or anywhere, for an insertion), if any.

    Returns:
        The edit, or ``None``.
    """
    if removed is None and inserted is None:
        return None
    delta = (inserted is not None) - (removed is not None)
    if len(after) != len(before) + delta:
        return None
    i = _rindex(before, removed) if inserted is None else _rindex(after, inserted)
    if i is None or i == 0:
        return None
    # where the message after the edit sits, in each list
    right_before, right_after = i + (removed is not None), i + (inserted is not None)
    if right_before >= len(before) or right_after >= len(after):
        return None
    left, right = before[i - 1], before[right_before]
    if after[i - 1] is not left or after[right_after] is not right:
        return None
    if removed is not None and before[i] is not removed:
        return None
    if inserted is not None and removed is None and before[i] is not right:
        return None
    return Edit(i, removed, inserted, left, right)


class ContextMeter:
    """Incrementally measures a context so the per-frame cost does not grow with its length.

    The common case is append-only growth: the meter checks that the messages it saw are
    still where it saw them (identity of the first and the last seen message, the size of
    the last one, and the content of every tool placeholder Pipecat may overwrite in place)
    and counts only the new ones. A rewrite of ours that put in, replaced or took out one
    message (the recalled block each turn) is counted by that message alone when the meter
    is told it (``invalidate(edit)``, :func:`single_edit`) and the context checks out
    around its place. Anything else (a splice, ``set_messages``, a tool result written over
    its placeholder, an edit that does not check out) triggers a full, cached recount
    (:attr:`recounts`).

    Whether a message is protected may depend on the messages before it only until an
    unprotected one precedes it (as :func:`~pipecat_summarizer._compaction.plan.make_protection`'s
    head rule does): an edit after the first unprotected message changes no other
    message's protection.

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
        self._edit: Edit | None = None  # the one-message rewrite invalidate() was told of
        self._first_open: int | None = None  # index of the first unprotected message
        self._summary_at = -1  # index of the summary message (-1: not in the context)
        #: Full recounts so far (the first measurement included): a rewrite the meter could
        #: not follow message by message.
        self.recounts = 0
        self._removed: list[Any] = []  # removed by others' rewrites, not yet taken
        self._replaced = False
        # the provider's reported usage scales what the trigger compares (set by the ceiling's
        # calibrate(); None: the estimate alone, as without usage metrics)
        self.calibration: TokenCalibration | None = None

    @property
    def counter(self) -> CachedCounter:
        """The cached counter used by this meter."""
        return self._counter

    def invalidate(self, edit: Edit | None = None) -> None:
        """The caller rewrote the context: the next measurement recounts it in full, or,
        given the rewrite's one-message ``edit`` (:func:`single_edit`), counts that message
        alone if the context checks out around its place."""
        self._expected = True
        self._edit = edit
        if edit is None:
            self._seen_len = 0
            self._first = self._last = None

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
        edit, self._edit = self._edit, None
        if edit is not None:
            # our own one-message rewrite: that message alone, if the context checks out
            start = n if self._apply(edit, messages, summary_message) else 0
        # the messages seen are still where they were (the common, append-only case); tool
        # results Pipecat writes over their placeholders in place, anywhere in the list, and
        # anything else (a splice, set_messages) mean a full recount
        elif not (
            start
            and n >= start
            and summary_message is self._summary
            and messages[0] is self._first
            and messages[start - 1] is last
            and content_size(last) == self._last_size
            and (not watch or all(m.get("content") is c for m, c in watch))
        ):
            start = 0
        if not start:
            self.recounts += 1
            if not self._expected:
                rewrite = removed_by_rewrite(self._seen, messages)
                if rewrite is not None:  # kept until taken: a later recount must not lose it
                    self._replaced = self._replaced or rewrite.replaced
                    self._removed.extend(rewrite.removed)
            self._total = self._reducible = self._since = 0
            self._summary = summary_message
            self._watch = []
            self._seen = []
            self._first_open, self._summary_at = None, -1
        self._expected = False
        seen = self._seen
        # locals: in a running pipeline this loop runs cold, every lookup counts
        count, is_protected, watch = self._counter.count_message, self._is_protected, self._watch
        total, reducible, since = self._total, self._reducible, self._since
        first_open, summary_at = self._first_open, self._summary_at
        for i in range(start, n):
            msg = messages[i]
            tokens = count(msg)
            total += tokens
            if isinstance(msg, dict) and msg.get("role") == "tool" and is_placeholder(msg):
                watch.append((msg, msg.get("content")))
            if is_protected(i, msg, messages):
                continue
            reducible += tokens
            if first_open is None:
                first_open = i
            if msg is summary_message:
                since = 0
                summary_at = i
            else:
                # conversation messages only: the summary is the processor's own
                seen.append(msg)
                since += 1
        self._total, self._reducible, self._since = total, reducible, since
        self._first_open, self._summary_at = first_open, summary_at
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

    def _apply(self, edit: Edit, messages: list, summary_message: Any) -> bool:
        """Count ``edit``'s one message in or out of the measurement; False (nothing
        changed) when the context does not check out around its place, or the edit is one
        the meter cannot follow alone (the summary, the head, an unknown message)."""
        i, removed, inserted = edit.at, edit.removed, edit.inserted
        n, first_open, last, watch = len(messages), self._first_open, self._last, self._watch
        delta = (inserted is not None) - (removed is not None)
        right = i + (inserted is not None)  # where the message after the edit sits now
        if not (
            self._seen_len
            and n == self._seen_len + delta
            and summary_message is self._summary
            and (summary_message is None or summary_message is not removed)
            and (summary_message is None or summary_message is not inserted)
            and first_open is not None
            and first_open < i
            and right < n
            and messages[i - 1] is edit.left
            and messages[right] is edit.right
            and (inserted is None or messages[i] is inserted)
            and messages[0] is self._first
            and messages[-1] is last
            and content_size(last) == self._last_size
            and (not watch or all(m.get("content") is c for m, c in watch))
        ):
            return False
        seen, count = self._seen, self._counter.count_message
        # the conversation messages after the edit, matched from the end (the recalled block
        # sits near it): seen[j] is then the last one before them, the removed message
        # itself when it was counted as conversation (by what was decided then, not now)
        j = len(seen) - 1
        for k in range(n - 1, right - 1, -1):
            if j >= 0 and messages[k] is seen[j]:
                j -= 1
        out = removed is not None and j >= 0 and seen[j] is removed
        into = inserted is not None and not self._is_protected(i, inserted, messages)
        summary_at = self._summary_at
        if removed is not None:
            tokens = count(removed)
            self._total -= tokens
            if out:
                self._reducible -= tokens
                self._since -= i > summary_at
                del seen[j]
                j -= 1
            if watch:
                self._watch = [w for w in watch if w[0] is not removed]
            if i < summary_at:
                summary_at -= 1
        if inserted is not None:
            if i <= summary_at:
                summary_at += 1
            tokens = count(inserted)
            self._total += tokens
            if isinstance(inserted, dict) and is_placeholder(inserted):
                self._watch.append((inserted, inserted.get("content")))
            if into:
                self._reducible += tokens
                self._since += i > summary_at
                seen.insert(j + 1, inserted)  # after the conversation messages before it
        self._summary_at = summary_at
        self._seen_len = n
        return True

"""Answers a barge-in cut off: the caller heard only part of them.

When the caller interrupts while the assistant is answering, Pipecat's assistant aggregator
(``LLMAssistantAggregator._handle_interruptions``) writes the text spoken so far to the
context as an assistant message and broadcasts an ``LLMContextAssistantTurnFrame`` (upstream
too). :class:`Interruptions` watches both frames as they pass the processor: an
``InterruptionFrame`` marks the context's last message; the next assistant turn frame names
the assistant message written right after that mark, before any user message, as cut off.
An interruption while nothing was being said writes nothing, and the mark lapses at the next
user message.

The live message is never changed (a provider would reject an unknown key, and the main LLM
would copy a mark in its text): the cut messages are known by identity. The summarizer's
transcript marks them (``interrupted`` in the line's details), their facts and promises are
never pinned, and their archived ``message_json`` carries ``"interrupted": true``
(:func:`archived_form`), taken off again by :func:`provider_form` before a restored message
is sent to a provider.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipecat.frames.frames import InterruptionFrame, LLMContextAssistantTurnFrame

from pipecat_summarizer._text.messages import spoken_text

#: The frames the processor hands to :meth:`Interruptions.on_frame`.
BARGE_IN_FRAMES = (InterruptionFrame, LLMContextAssistantTurnFrame)
#: The key an archived cut message carries (never sent to a provider).
INTERRUPTED_KEY = "interrupted"


def provider_form(message: Any) -> Any:
    """``message`` without the archive's interruption mark (a restored message sent to a
    provider carries no key the provider does not know); unmarked messages as they are."""
    if isinstance(message, Mapping) and INTERRUPTED_KEY in message:
        return {k: v for k, v in message.items() if k != INTERRUPTED_KEY}
    return message


def archived_form(message: Any, cut: bool) -> Any:
    """``message`` as the archive keeps it: a cut answer with ``"interrupted": true``."""
    if cut and isinstance(message, Mapping):
        return {**message, INTERRUPTED_KEY: True}
    return message


class Interruptions:
    """The assistant messages a barge-in cut off, by identity (bounded)."""

    def __init__(self, keep: int = 64) -> None:
        """Initialize with no mark."""
        self._mark: Any = None  # the context's last message at the interruption
        self._armed = False
        self._keep = keep
        self.cut: list[Any] = []  # the cut messages, oldest first

    def on_frame(self, frame: Any, messages: Sequence[Any]) -> Any:
        """Note an ``InterruptionFrame`` (the context's last message is the mark), or take
        the assistant message an ``LLMContextAssistantTurnFrame`` announces as cut when it
        was written right after the mark. Returns the message found cut, or ``None``."""
        if isinstance(frame, InterruptionFrame):
            self._mark, self._armed = (messages[-1] if messages else None), True
            return None
        if not self._armed:
            return None
        self._armed = False
        found = self._after_mark(messages)
        self._mark = None
        if found is not None and not self.is_cut(found):
            self.cut = [*self.cut[-(self._keep - 1) :], found]
        return found

    def _after_mark(self, messages: Sequence[Any]) -> Any:
        start = 0
        if self._mark is not None:
            at = next(
                (i for i in range(len(messages) - 1, -1, -1) if messages[i] is self._mark), None
            )
            if at is None:
                return None  # the mark left the context meanwhile: nothing is known
            start = at + 1
        for message in messages[start:]:
            if not isinstance(message, Mapping):
                continue
            role = message.get("role")
            if role == "user":
                return None  # the caller spoke again first: nothing was cut
            if role == "assistant" and spoken_text(message).strip():
                return message
        return None

    def is_cut(self, message: Any) -> bool:
        """Whether ``message`` is an answer a barge-in cut off."""
        return any(m is message for m in self.cut)

    def ids(self) -> frozenset[int]:
        """``id()`` of each cut message (for the transcript, alive while :attr:`cut` holds
        them)."""
        return frozenset(id(m) for m in self.cut)


__all__ = [
    "BARGE_IN_FRAMES",
    "INTERRUPTED_KEY",
    "Interruptions",
    "archived_form",
    "provider_form",
]

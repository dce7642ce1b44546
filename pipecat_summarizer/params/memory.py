"""The durable memory's parameters: ``ContextSummarizer(memory=MemoryParams(...))``.

How a call uses its store (``MemoryParams``) and how the store's writer queues and flushes
(``WriterParams``). Import them from :mod:`pipecat_summarizer.params`.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

from pipecat_summarizer._validation import shown, validate_numeric_fields

#: The shortest flush interval of the store's writer (a smaller one would spin the event loop).
MIN_FLUSH_INTERVAL_S = 0.01
#: The latest ``conversation_started_at``: the last second of the year 9999 (UTC). Larger
#: values are milliseconds or microseconds by mistake, and past the platform's calendar
#: (recall could not date a snippet of that call).
MAX_CONVERSATION_STARTED_AT = 253_402_300_799.0


def check_conversation_time(name: str, at: object) -> None:
    """Raise ``ValueError`` (``TypeError`` for a non-number) unless ``at`` is a conversation
    time: seconds since the epoch, from 0 to :data:`MAX_CONVERSATION_STARTED_AT`."""
    if isinstance(at, bool) or not isinstance(at, numbers.Real):
        raise TypeError(f"{name} must be seconds since the epoch, got {type(at).__name__}")
    if not 0 <= at <= MAX_CONVERSATION_STARTED_AT:  # type: ignore[operator]
        raise ValueError(
            f"{name} must be seconds since the epoch, from 0 to "
            f"{MAX_CONVERSATION_STARTED_AT:.0f} (the end of the year 9999; a larger value "
            f"is milliseconds or microseconds), got {shown(at)}"
        )


@dataclass
class WriterParams:
    """How the store's writer queues and flushes (``MemoryParams(writer=...)``).

    Parameters:
        max_queue: Records that may wait; beyond it the oldest is dropped.
        flush_interval_s: Seconds between flushes (the most a killed process loses); at
            least ``MIN_FLUSH_INTERVAL_S`` (0.01).
        batch_size: Records per transaction.
        max_backoff_s: Cap on the wait between retries while the database is down.
        write_timeout_s: A write that takes longer counts as an outage (its records stay
            queued, and the next attempt waits for it to settle first: writes are
            idempotent, so a late commit does no harm).
    """

    max_queue: int = 10_000
    flush_interval_s: float = 1.0
    batch_size: int = 500
    max_backoff_s: float = 30.0
    write_timeout_s: float = 10.0

    def __post_init__(self):
        """Validate the fields."""
        validate_numeric_fields(self)
        if self.max_queue < 1 or self.batch_size < 1:
            raise ValueError("max_queue and batch_size must be at least 1")
        if self.flush_interval_s <= 0 or self.max_backoff_s <= 0 or self.write_timeout_s <= 0:
            raise ValueError("flush_interval_s, max_backoff_s and write_timeout_s must be > 0")
        if self.flush_interval_s < MIN_FLUSH_INTERVAL_S:
            raise ValueError(
                f"flush_interval_s must be at least {MIN_FLUSH_INTERVAL_S} "
                f"(got {self.flush_interval_s!r}: a shorter interval spins the event loop)"
            )


@dataclass
class MemoryParams:
    """How a call uses the durable memory, its store (``ContextSummarizer(memory=...)``).

    Parameters:
        resume: Start a known caller's call (``user_id`` set) with their pinned facts and an
            "earlier calls" summary from the store. ``False`` records only.
        earlier_calls_tokens: Token budget of the "earlier calls" summary.
        max_earlier_calls: Most earlier calls whose summaries are considered.
        load_timeout_s: No frame ever waits for the caller's memory: it loads in the
            background and joins the context at the first frame after it arrives, if it
            arrives within this many seconds of the start of the call; later, it is not
            applied (the call has gone on without it) and one WARNING says so.
        flush_timeout_s: ``EndFrame``/``CancelFrame`` wait at most this long for the queue
            to be written.
        resume_dropped_within_s: A call that dropped (ended by a ``CancelFrame``, by the
            pipeline's cleanup without an ``EndFrame``, or marked with
            ``ContextSummarizer.mark_dropped()``) is resumed by the caller's next call if it
            starts within this many seconds of the drop: the messages in view at the drop,
            verbatim, with that call's summary and pinned facts, and a note about the
            dropped connection naming tool calls left without a result. ``0``: off (the
            returning caller's facts and "earlier calls" summary only, as after a goodbye).
            Needs ``resume`` and a ``user_id``.
        conversation_started_at: When the conversation took place (seconds since the epoch,
            UTC), when that is not now: an imported or replayed conversation. Each archived
            message is dated by it (plus the time since the call started, measured on the
            event loop's clock: a loop that simulates time dates messages at its modelled
            instant), and recall labels
            a snippet with its call's date. ``None``: the wall clock. At most the end of
            the year 9999 (``MAX_CONVERSATION_STARTED_AT``).
        writer: Queue size, flush interval (default 1 s) and retry settings.
    """

    resume: bool = True
    earlier_calls_tokens: int = 300
    max_earlier_calls: int = 5
    load_timeout_s: float = 30.0
    flush_timeout_s: float = 3.0
    resume_dropped_within_s: float = 120.0
    conversation_started_at: float | None = None
    writer: WriterParams = field(default_factory=WriterParams)

    def __post_init__(self):
        """Validate the fields."""
        if not isinstance(self.resume, bool):
            raise TypeError(f"resume must be True or False, got {type(self.resume).__name__}")
        validate_numeric_fields(self)
        if self.earlier_calls_tokens < 0 or self.max_earlier_calls < 0:
            raise ValueError("earlier_calls_tokens and max_earlier_calls must not be negative")
        if self.load_timeout_s < 0 or self.flush_timeout_s < 0:
            raise ValueError("load_timeout_s and flush_timeout_s must not be negative")
        if self.resume_dropped_within_s < 0:
            raise ValueError(
                "resume_dropped_within_s must be >= 0 (0: off), "
                f"got {self.resume_dropped_within_s!r}"
            )
        if self.conversation_started_at is not None:
            check_conversation_time("conversation_started_at", self.conversation_started_at)
        if not isinstance(self.writer, WriterParams):
            raise TypeError("writer must be a WriterParams")

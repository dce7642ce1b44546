"""``StoreWriter``: the bounded background queue between a call and its store.

The call side (:meth:`StoreWriter.submit`) is a deque append: O(1), never awaits, never
touches the database. A background task flushes the queue every ``flush_interval_s``
(default 1 s: a process killed mid-call loses at most about that much) in batches, each in
one transaction. When the database is slow, locked or down, the records wait in the queue
and the writer retries with a doubling backoff (one WARNING per outage, one INFO when it is
back). When the queue is full the oldest waiting record is dropped: one ERROR when an
overflow starts, and one ERROR with the count when it ends (or at close).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass

from loguru import logger

from pipecat_summarizer.store.base import MemoryStore
from pipecat_summarizer.store.records import Record
from pipecat_summarizer.validation import validate_numeric_fields


@dataclass
class WriterOptions:
    """How the writer queues and flushes.

    Parameters:
        max_queue: Records that may wait; beyond it the oldest is dropped.
        flush_interval_s: Seconds between flushes (the most a killed process loses).
        batch_size: Records per transaction.
        max_backoff_s: Cap on the wait between retries while the database is down.
        write_timeout_s: A write that takes longer counts as failed (its records stay
            queued; writes are idempotent, so a late commit does no harm).
    """

    max_queue: int = 10_000
    flush_interval_s: float = 1.0
    batch_size: int = 500
    max_backoff_s: float = 30.0
    write_timeout_s: float = 10.0

    def __post_init__(self):
        """Validate the options."""
        validate_numeric_fields(self)
        if self.max_queue < 1 or self.batch_size < 1:
            raise ValueError("max_queue and batch_size must be at least 1")
        if self.flush_interval_s <= 0 or self.max_backoff_s <= 0 or self.write_timeout_s <= 0:
            raise ValueError("flush_interval_s, max_backoff_s and write_timeout_s must be > 0")


class StoreWriter:
    """Queues records and writes them to ``store`` in the background.

    Args:
        store: The store.
        options: Queue and flush settings.
        name: For log lines (a call id, never conversation text).
    """

    def __init__(self, store: MemoryStore, options: WriterOptions | None = None, name: str = ""):
        """Create the writer; :meth:`start` starts its task."""
        self.store = store
        self.options = options or WriterOptions()
        self.name = name
        self._queue: deque[Record] = deque()
        self._task: asyncio.Task | None = None
        self._lock = asyncio.Lock()  # one batch in flight: flush() and the task share it
        self._head_drops = 0  # records ever dropped from the head by an overflow
        self._closing = False
        self._down_since: float | None = None
        self._overflowing = 0  # records dropped in the current overflow
        self.dropped = 0  #: records dropped since the writer was made
        self.written = 0  #: records written
        self.failures = 0  #: failed write attempts

    def __len__(self) -> int:
        """Records waiting."""
        return len(self._queue)

    @property
    def outage(self) -> bool:
        """True while the last write failed."""
        return self._down_since is not None

    def submit(self, record: Record) -> None:
        """Queue ``record`` (O(1), never blocks). The oldest waiting record goes if full."""
        queue = self._queue
        queue.append(record)
        if len(queue) > self.options.max_queue:
            queue.popleft()
            self._head_drops += 1
            self.dropped += 1
            self._overflowing += 1
            if self._overflowing == 1:
                logger.error(
                    f"memory store{self._label()}: queue full ({self.options.max_queue} records "
                    "waiting); dropping the oldest until the store catches up"
                )

    def start(self) -> None:
        """Start the background flush task (idempotent; needs a running loop)."""
        if self._task is None or self._task.done():
            self._closing = False
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def flush(self, timeout: float | None = None) -> bool:
        """Write everything queued now, within ``timeout`` seconds.

        Returns:
            True if the queue is empty afterwards.
        """
        try:
            await asyncio.wait_for(self._drain(), timeout)
        except TimeoutError:
            pass
        return not self._queue

    async def close(self, timeout: float = 3.0) -> bool:
        """Flush within ``timeout`` seconds and stop the task. Records still queued after
        the timeout are lost (one ERROR with the count).

        Returns:
            True if every record was written.
        """
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        ok = await self.flush(timeout)
        if not ok:
            logger.error(
                f"memory store{self._label()}: {len(self._queue)} records not written before "
                f"the {timeout:.1f}s flush timeout; they are lost"
            )
            self.dropped += len(self._queue)
            self._queue.clear()
        self._end_overflow()
        return ok

    # -- background -----------------------------------------------------------------------

    def _label(self) -> str:
        return f" ({self.name})" if self.name else ""

    async def _loop(self) -> None:
        delay = self.options.flush_interval_s
        while not self._closing:
            await asyncio.sleep(delay)
            if await self._write_some():
                delay = self.options.flush_interval_s
            else:
                delay = min(self.options.max_backoff_s, max(delay, 0.05) * 2)

    async def _drain(self) -> None:
        backoff = 0.05
        while self._queue:
            if not await self._write_some():
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    async def _write_some(self) -> bool:
        """Write queued batches until the queue is empty; False on a failure."""
        async with self._lock:
            return await self._write_batches()

    async def _write_batches(self) -> bool:
        while self._queue:
            batch = [self._queue[i] for i in range(min(self.options.batch_size, len(self._queue)))]
            drops_before = self._head_drops
            try:
                await asyncio.wait_for(self.store.write(batch), self.options.write_timeout_s)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the database's problem never becomes the call's
                self.failures += 1
                if self._down_since is None:
                    self._down_since = time.monotonic()
                    logger.warning(
                        f"memory store{self._label()}: write failed ({type(e).__name__}); "
                        f"{len(self._queue)} records wait in the queue, retrying with backoff"
                    )
                return False
            # the batch is written: remove what is left of it at the head (an overflow during
            # the write may already have dropped some of it; newer records sit behind it)
            for _ in range(max(0, len(batch) - (self._head_drops - drops_before))):
                self._queue.popleft()
            self.written += len(batch)
            if self._down_since is not None:
                logger.info(
                    f"memory store{self._label()}: writes resumed after "
                    f"{time.monotonic() - self._down_since:.1f}s"
                )
                self._down_since = None
            self._end_overflow()
        return True

    def _end_overflow(self) -> None:
        if self._overflowing:
            logger.error(
                f"memory store{self._label()}: {self._overflowing} records were dropped "
                "while the queue was full"
            )
            self._overflowing = 0

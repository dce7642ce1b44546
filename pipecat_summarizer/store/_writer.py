"""``StoreWriter``: the bounded background queue between a call and its store.

The call side (:meth:`StoreWriter.submit`) is a deque append: O(1), never awaits, never
touches the database. A background task flushes the queue every ``flush_interval_s``
(default 1 s: a process killed mid-call loses at most about that much) in batches, each in
one transaction. When the database is slow, locked or down, the records wait in the queue
and the writer retries with a doubling backoff (one WARNING per outage, one INFO when it is
back; the WARNING says why: locked, read-only, disk full, connection refused...). A record
the database refuses (not an outage: it would fail again however long the writer waits) is
found by writing the batch in halves, and set aside with one ERROR (its kind and key, no
text) while the rest are written. When the queue is full the oldest waiting record is
dropped: one ERROR when an overflow starts, and one ERROR with the count when it ends (or
at close). A write is never cancelled half-way by the writer: a batch still being written
when the close's wait ends is reported when it settles (lost only if it failed).
"""

from __future__ import annotations

import asyncio
import functools
import time
import warnings
from collections import deque

from loguru import logger

from pipecat_summarizer.params import WriterParams
from pipecat_summarizer.store.base import MemoryStore, error_reason, is_outage
from pipecat_summarizer.store.records import (
    ArchivedMessage,
    CallRecord,
    CompactionRecord,
    FactEvent,
    Record,
    record_key,
)

#: What :meth:`StoreWriter.submit` takes.
RECORD_TYPES = (ArchivedMessage, CompactionRecord, FactEvent, CallRecord)


class _Outage(Exception):
    """A write failed because the database is unavailable (retry everything later)."""

    def __init__(self, error: BaseException):
        super().__init__(error_reason(error))
        self.error = error


def _seen(write: asyncio.Future) -> None:
    """Mark a write's failure as read: it is handled by whoever waits for the write, or by
    the next attempt; a flush cancelled first would leave asyncio to log it at exit."""
    if not write.cancelled():
        write.exception()


class StoreWriter:
    """Queues records and writes them to ``store`` in the background.

    Args:
        store: The store.
        options: Queue and flush settings.
        name: For log lines (a call id, never conversation text).
    """

    def __init__(self, store: MemoryStore, options: WriterParams | None = None, name: str = ""):
        """Create the writer; :meth:`start` starts its task."""
        if not isinstance(store, MemoryStore):
            raise TypeError(f"store must be a MemoryStore, got {type(store).__name__}")
        if options is not None and not isinstance(options, WriterParams):
            raise TypeError(f"options must be a WriterParams, got {type(options).__name__}")
        if not isinstance(name, str):
            raise TypeError(f"name must be a string, got {type(name).__name__}")
        self.store = store
        self.options = options or WriterParams()
        self.name = name
        self._queue: deque[Record] = deque()
        self._task: asyncio.Task | None = None
        self._lock = asyncio.Lock()  # one batch in flight: flush() and the task share it
        # the batch being written (and its records): never cancelled by the writer
        self._inflight: asyncio.Task | None = None
        self._inflight_batch: list[Record] = []
        self._closing = False
        self._down_since: float | None = None
        self._overflowing = 0  # records dropped in the current overflow
        self.dropped = 0  #: records dropped since the writer was made (queue full, or lost)
        self.refused = 0  #: records the database refused, set aside
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
        """Queue ``record`` (O(1), never blocks). The oldest waiting record goes if full.

        Raises:
            TypeError: If ``record`` is not a store record (the database would never take
                it: its batch would be retried forever).
        """
        if not isinstance(record, RECORD_TYPES):
            raise TypeError(f"record must be a store record, got {type(record).__name__}")
        queue = self._queue
        queue.append(record)
        if len(queue) > self.options.max_queue:
            queue.popleft()
            self.dropped += 1
            self._overflowing += 1
            if self._overflowing == 1:
                logger.error(
                    f"memory store{self._label()}: queue full ({self.options.max_queue} records "
                    "waiting); dropping the oldest until the store catches up"
                )

    def discard(self) -> int:
        """Drop every queued record that is not being written now (the caller was forgotten:
        nothing of theirs may be written back). Returns how many."""
        inflight = self._inflight is not None and not self._inflight.done()
        keep = {id(r) for r in self._inflight_batch} if inflight else set()
        before = len(self._queue)
        self._queue = deque(r for r in self._queue if id(r) in keep)
        return before - len(self._queue)

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
        the timeout are lost (one ERROR with the count); a batch still being written then
        is reported when its write settles (one ERROR only if it failed).

        Returns:
            True if every record was written within the wait.
        """
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()  # a write it started goes on (see _write_batches)
            try:
                await task
            except asyncio.CancelledError:
                pass
        ok = await self.flush(timeout)
        if not ok:
            inflight = self._inflight if self._inflight and not self._inflight.done() else None
            pending = {id(r) for r in self._inflight_batch} if inflight else set()
            lost = [r for r in self._queue if id(r) not in pending]
            kept = len(self._queue) - len(lost)
            if lost:
                logger.error(
                    f"memory store{self._label()}: {len(lost)} records not written before the "
                    f"{timeout:.1f}s flush timeout; they are lost"
                )
                self.dropped += len(lost)
            if inflight is not None and kept:
                logger.warning(
                    f"memory store{self._label()}: {kept} records were still being written "
                    "when the flush timeout ended; reported when the write settles"
                )
                inflight.add_done_callback(functools.partial(self._settled_late, n=kept))
            self._queue.clear()
        self._end_overflow()
        return ok

    # -- background -----------------------------------------------------------------------

    def _label(self) -> str:
        return f" ({self.name})" if self.name else ""

    def _settled_late(self, task: asyncio.Task, n: int) -> None:
        if task.cancelled() or task.exception() is not None:
            self.dropped += n
            logger.error(
                f"memory store{self._label()}: {n} records being written at the end of the "
                "flush timeout were not written; they are lost"
            )
        else:
            logger.info(f"memory store{self._label()}: {n} records written after the wait ended")

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
        """Write queued batches until the queue is empty; False on an outage."""
        async with self._lock:
            return await self._write_batches()

    async def _write_batches(self) -> bool:
        while self._queue:
            done = self._inflight if self._inflight is not None and self._inflight.done() else None
            if done is not None:  # settled while nobody waited (after a write timeout)
                self._inflight = None
                if not done.cancelled() and done.exception() is None:
                    self._done(self._inflight_batch)
                    continue
            if self._inflight is None:
                batch = [
                    self._queue[i] for i in range(min(self.options.batch_size, len(self._queue)))
                ]
                self._inflight_batch = batch
                self._inflight = asyncio.ensure_future(self._write_batch(batch))
                self._inflight.add_done_callback(_seen)
            # asyncio.wait never cancels the write: a flush that times out (the close's wait)
            # leaves it to finish, and one that outlasts write_timeout_s is waited for by the
            # next attempt. Not wait_for(shield()): on 3.11 a wait_for cancelled in the loop
            # turn its future settles returns the result and loses the cancel, and a close's
            # drain then retried a full disk forever
            inflight = self._inflight
            try:
                await asyncio.wait((inflight,), timeout=self.options.write_timeout_s)
                if not inflight.done():
                    raise TimeoutError
                inflight.result()
            except asyncio.CancelledError:
                raise
            except (_Outage, TimeoutError) as e:
                self.failures += 1
                if self._down_since is None:
                    self._down_since = time.monotonic()
                    why = e.args[0] if isinstance(e, _Outage) else "write timed out"
                    logger.warning(
                        f"memory store{self._label()}: write failed ({why}); "
                        f"{len(self._queue)} records wait in the queue, retrying with backoff"
                    )
                if inflight.done():
                    self._inflight = None
                return False
            self._inflight = None
            self._done(self._inflight_batch)
            if self._down_since is not None:
                logger.info(
                    f"memory store{self._label()}: writes resumed after "
                    f"{time.monotonic() - self._down_since:.1f}s"
                )
                self._down_since = None
            self._end_overflow()
        return True

    def _done(self, batch: list[Record]) -> None:
        """The batch is written (or set aside): remove what is left of it at the head (an
        overflow during the write may have dropped some of it; newer records sit behind)."""
        queue = self._queue
        for record in batch:
            if queue and queue[0] is record:
                queue.popleft()

    async def _write_batch(self, batch: list[Record]) -> None:
        """Write ``batch``; a record the database refuses is set aside (found by halves).

        Raises:
            _Outage: The database is unavailable: nothing is set aside, all is retried.
        """
        try:
            await self.store.write(batch)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the database's problem never becomes the call's
            if is_outage(e):
                raise _Outage(e) from e
            if len(batch) == 1:
                self._set_aside(batch[0], e)
                return
            half = len(batch) // 2
            await self._write_batch(batch[:half])
            await self._write_batch(batch[half:])
            return
        self.written += len(batch)

    def _set_aside(self, record: Record, error: BaseException) -> None:
        self.refused += 1
        logger.error(
            f"memory store{self._label()}: the database refused a {record_key(record)} "
            f"({error_reason(error)}); it is set aside and the other records are written"
        )

    def _end_overflow(self) -> None:
        if self._overflowing:
            logger.error(
                f"memory store{self._label()}: {self._overflowing} records were dropped "
                "while the queue was full"
            )
            self._overflowing = 0


def __getattr__(name: str) -> object:
    """``WriterOptions``, renamed ``WriterParams`` in 0.2: one release, with a warning."""
    if name == "WriterOptions":
        warnings.warn(
            "WriterOptions is deprecated: use WriterParams (pipecat_summarizer.params)",
            DeprecationWarning,
            stacklevel=2,
        )
        return WriterParams
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

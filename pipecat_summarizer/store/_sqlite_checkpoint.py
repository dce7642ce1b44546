"""The SQLite store's WAL checkpoints, on a thread and a connection of their own.

SQLite's automatic checkpoint runs inside the commit that takes the WAL past 1,000 pages, on
the connection that wrote: the store's one thread, where recall's searches run too. At a
million archived messages that write cost ~26 ms of the thread (bugs.md S15-F-2), and a
turn's search queued behind it missed its budget. So the store's connection has
``wal_autocheckpoint=0`` and this thread checkpoints (PASSIVE: it never blocks a reader or
the writer) when a write tells it the WAL has passed the same threshold. Python's ``sqlite3``
releases the interpreter's lock inside SQLite, so the copy never holds up the store's thread.

How far the WAL is: its file, read by this thread (the header's salts and page size, then a
binary search of the frames that carry those salts: the current log is a prefix of the file;
a dozen small reads), less the frames this thread's last checkpoint copied if the log has not
started over since. Never the ``-shm`` file: SQLite's locks are POSIX locks on it, and closing
any descriptor of that file would drop every lock this process holds there. Where the WAL
cannot be read, every write wakes a checkpoint, at most one a ``RETRY_S``. A checkpoint that
cannot finish (another connection reads an older snapshot, or another process checkpoints) is
retried every ``RETRY_S`` and logged once.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import struct
import threading
import time
import weakref
from pathlib import Path

from loguru import logger

from pipecat_summarizer.store.base import error_reason

#: The WAL frames not yet copied into the database that wake a checkpoint (SQLite's own
#: automatic checkpoint's default).
THRESHOLD_PAGES = 1000
#: The wait before a checkpoint that could not finish is tried again (seconds).
RETRY_S = 1.0
#: The WAL frames past which a checkpoint makes the writers wait (RESTART): the writes kept
#: coming during the PASSIVE ones, and the log never started over.
RESTART_PAGES = 4 * THRESHOLD_PAGES
#: The checkpoints in a row that could not finish before a WARNING says so (the first ones:
#: DEBUG). Another process's checkpointer on the same file refuses ours now and then for
#: the moment its own runs: a WARNING (and an INFO once it finished) each time was noise in
#: a deployment of two processes writing one file; a reader holding its snapshot for long
#: (what an operator must hear of) fails every try.
WARN_AFTER = 3
_WAL_HEADER = 32
_FRAME_HEADER = 24

# one checkpoint of a file at a time in this process: SQLite refuses a second as busy without
# waiting, and a forget's TRUNCATE refused so would leave the forgotten text in the WAL
_locks: dict[str, threading.Lock] = {}
_locks_lock = threading.Lock()
# each file's live checkpointers in this process (their signals): see truncation_owed
_live: dict[str, weakref.WeakSet[_Signals]] = {}


def checkpoint_lock(path: Path) -> threading.Lock:
    """The lock every checkpoint of the file at ``path`` takes in this process."""
    key = os.path.abspath(path)
    with _locks_lock:
        return _locks.setdefault(key, threading.Lock())


def checkpoint_now(conn: sqlite3.Connection, mode: str) -> tuple[int, int, int]:
    """``PRAGMA wal_checkpoint(mode)`` on ``conn``; a TRUNCATE without waiting for readers.

    A TRUNCATE (like a RESTART) takes the writers' lock first, then waits for the readers
    of older snapshots through the connection's busy handler, holding that lock: with
    another process's read held, the forget's truncation held the store's thread (every
    turn's search queued behind it) for the whole ``busy_timeout_s`` (5 s), and every
    retry of an owed one made the store's writes wait as long (S17-A-2). Refused at once,
    it is owed to the checkpointer, which retries every ``RETRY_S``."""
    if mode != "TRUNCATE":
        return conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
    (wait_ms,) = conn.execute("PRAGMA busy_timeout").fetchone()
    conn.execute("PRAGMA busy_timeout=0")
    try:
        return conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.execute(f"PRAGMA busy_timeout={int(wait_ms)}")


def truncation_owed(path: Path) -> int:
    """A forget's truncation of the WAL at ``path`` was refused as busy (another connection
    read an older snapshot, or another process checkpointed): the forgotten text's old pages
    are still in the WAL's bytes, which a PASSIVE checkpoint copies but never erases. Every
    checkpointer of the file in this process runs a TRUNCATE checkpoint at once, and again
    every ``RETRY_S`` until one succeeds. Returns how many were told (0: the file has none
    open here; its next opening's forget or close truncates it)."""
    key = os.path.abspath(path)
    with _locks_lock:
        told = list(_live.get(key, ()))
    for signals in told:
        with signals.wake:
            signals.truncate += 1
            signals.loud = True
            signals.wake.notify_all()
    return len(told)


def _forget_locks() -> None:
    # a forked child: a lock its parent's checkpointer held is held for good here
    global _locks_lock
    _locks.clear()
    _live.clear()
    _locks_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_locks)


class _Signals:
    """What the store's thread and the checkpointer's share: the writes signalled, those
    looked at, and the stop. The thread holds this, never the :class:`Checkpointer`: a
    store dropped unclosed drops its checkpointer, whose finalizer then stops the thread."""

    def __init__(self) -> None:
        # a reentrant lock: the finalizer that stops the thread may run (a collection) on a
        # thread that holds it already
        self.wake = threading.Condition(threading.RLock())
        self.wrote = 0  # writes signalled
        self.seen = 0  # writes the thread has looked at
        self.stop = False
        self.truncate = 0  # truncations asked for (truncation_owed); 0: none owed
        # one of them a forget's (truncation_owed): its refusals WARN once a streak; the
        # opening's own (a -wal found, maybe no forget in it) only DEBUG: in a deployment
        # of two processes writing one file it is refused for a while, as a matter of course
        self.loud = False
        self.pid = os.getpid()

    def stop_now(self) -> None:
        if self.pid != os.getpid():
            # a forked child's copy (its store drops it, the finalizer runs): the thread is
            # the parent's, and the lock may have been held by one of the parent's threads
            # at the fork, for good here
            return
        with self.wake:
            self.stop = True
            self.wake.notify_all()


class Checkpointer:
    """One store connection's checkpoints: a thread, its connection, and the lock that a
    forget's TRUNCATE checkpoint takes (one checkpoint of this process at a time: SQLite
    refuses a second one as busy, without waiting).

    The thread ends when :meth:`stop` is called, or when this object is collected (a store
    dropped without a close: its thread and connection would otherwise stay for good,
    holding the file open)."""

    def __init__(
        self,
        path: Path,
        busy_timeout_s: float,
        threshold: int = THRESHOLD_PAGES,
        *,
        truncate: bool = False,
    ):
        """Start the thread (its connection is opened on it). ``truncate``: a TRUNCATE
        checkpoint is owed from the start (the opening found a WAL left, see
        :func:`wal_left`)."""
        self.path = path
        self.busy_timeout_s = busy_timeout_s
        self.threshold = threshold
        #: Held by a checkpoint: this thread's, or a forget's on the store's thread.
        self.lock = checkpoint_lock(path)
        #: The checkpoints run (counted, with the thread that ran them: tests and probes).
        self.runs = 0
        self.restarts = 0
        self.thread_idents: set[int] = set()
        self._signals = signals = _Signals()
        signals.truncate = int(truncate)
        self._failing = False
        self._fails = 0  # the checkpoints in a row that could not finish
        with _locks_lock:
            _live.setdefault(os.path.abspath(path), weakref.WeakSet()).add(signals)
        self.thread = threading.Thread(
            target=_run,
            args=(weakref.ref(self), signals),
            name=f"sqlite-checkpoint:{path.name}",
            daemon=True,
        )
        weakref.finalize(self, signals.stop_now)
        self.thread.start()

    def wrote(self) -> None:
        """A write committed on the store's connection: look at the WAL (never waits)."""
        signals = self._signals
        with signals.wake:
            signals.wrote += 1
            signals.wake.notify()

    def settled(self) -> None:
        """Wait until every write signalled so far has been looked at (and its checkpoint,
        if it woke one, has run): for tests."""
        signals = self._signals
        with signals.wake:
            while not (signals.seen >= signals.wrote or signals.stop or not self.thread.is_alive()):
                signals.wake.wait(RETRY_S)

    def stop(self) -> None:
        """End the thread (a checkpoint under way finishes first) and close its connection."""
        self._signals.stop_now()
        if self.thread is not threading.current_thread():
            self.thread.join()

    def _open(self) -> sqlite3.Connection | None:
        try:
            conn = sqlite3.connect(
                str(self.path), timeout=self.busy_timeout_s, isolation_level=None
            )
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
            # the syncs of a checkpoint as the store's connection has them
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA wal_autocheckpoint=0")
        except sqlite3.Error as e:
            self._failed(f"its connection did not open ({error_reason(e)})")
            return None
        return conn

    def _checkpoint(
        self,
        conn: sqlite3.Connection,
        *,
        restart: bool = False,
        truncate: bool = False,
        quiet: bool = False,
    ) -> bool:
        """One PASSIVE checkpoint (RESTART: writers wait for it, and the next one starts
        the log over; TRUNCATE: the WAL's file emptied too, see :func:`truncation_owed`);
        whether it copied the whole WAL. ``quiet``: a refusal is DEBUG only, out of the
        streak that WARNs."""
        mode = "TRUNCATE" if truncate else "RESTART" if restart else "PASSIVE"
        try:
            with self.lock:
                self.runs += 1
                self.restarts += restart
                self.thread_idents.add(threading.get_ident())
                busy, log, done = checkpoint_now(conn, mode)
        except sqlite3.Error as e:
            self._failed(error_reason(e), quiet=quiet)
            return False
        if busy or (log >= 0 and done < log):
            self._failed("another connection reads an older snapshot, or checkpoints", quiet)
            return False
        if self._fails >= WARN_AFTER:
            logger.info("memory store: the WAL checkpoint succeeded again")
        self._failing = False
        self._fails = 0
        return True

    def _failed(self, reason: str, quiet: bool = False) -> None:
        """A checkpoint (or its connection) failed: a WARNING once the streak reaches
        ``WARN_AFTER`` tries, DEBUG before and after (``quiet``: DEBUG, not counted)."""
        if quiet:
            logger.debug(f"memory store: the WAL's truncation could not finish ({reason})")
            return
        self._failing = True
        self._fails += 1
        if self._fails == WARN_AFTER:
            logger.warning(
                f"memory store: the WAL checkpoint could not finish ({reason}; "
                f"{WARN_AFTER} tries in a row); retried every {RETRY_S:g} s"
            )
        else:
            logger.debug(f"memory store: the WAL checkpoint could not finish ({reason})")


def _run(ref: weakref.ReferenceType[Checkpointer], signals: _Signals) -> None:
    """The checkpointer's thread: woken by writes, it looks at the WAL and checkpoints past
    the threshold. It holds its :class:`Checkpointer` only while it works (``ref``), so the
    object can be collected while the thread waits."""
    conn: sqlite3.Connection | None = None
    copied: tuple[tuple[int, int], int] | None = None  # the log's salts, frames copied
    last_try = float("-inf")
    retry = again = False
    wake = signals.wake
    try:
        while True:
            with wake:
                if retry and not again:
                    wake.wait_for(lambda: signals.stop, timeout=RETRY_S)
                elif not again:
                    wake.wait_for(
                        lambda: signals.stop or signals.truncate or signals.wrote > signals.seen
                    )
                if signals.stop:
                    owed, loud = signals.truncate, signals.loud
                    break
                seen = signals.wrote
                owed, loud = signals.truncate, signals.loud
            me = ref()
            if me is None:  # collected meanwhile (its finalizer stops us too)
                return
            again = False
            try:
                log = _wal_log(me.path)  # before: frames written meanwhile stay pending
                pending = _pending_frames(log, copied)
                if owed:
                    # a forget's text still in the WAL's bytes: emptied, whatever its size
                    last_try = time.monotonic()
                    if conn is None:
                        conn = me._open()
                    truncated = conn is not None and me._checkpoint(
                        conn, truncate=True, quiet=not loud
                    )
                    retry, copied = not truncated, None
                    if truncated:
                        with wake:  # those asked for meanwhile: once more
                            signals.truncate -= owed
                            signals.loud = signals.loud and signals.truncate > 0
                elif pending is None and time.monotonic() - last_try < RETRY_S:
                    # the WAL's state unknown: at most one checkpoint a RETRY_S (one more
                    # write, later, wakes the next)
                    retry = False
                elif pending is None or pending >= me.threshold or retry:
                    last_try = time.monotonic()
                    if conn is None:
                        conn = me._open()
                    # writes that came during the checkpoints kept the log from starting
                    # over (a writer starts it over only if every frame was copied when it
                    # began): past RESTART_PAGES, one checkpoint that makes them wait
                    restart = log is not None and log[1] >= RESTART_PAGES
                    retry = conn is None or not me._checkpoint(conn, restart=restart)
                    copied = None if retry or log is None else log
                    if not retry:
                        # the frames written meanwhile: copied at once if past the threshold
                        left = _pending_frames(_wal_log(me.path), copied)
                        again = left is not None and left >= me.threshold
            except Exception as e:  # never the thread's end: the WAL would grow for good
                retry = True
                me._failed(f"{type(e).__name__}: {e}")
            del me  # never held while waiting: see the docstring
            with wake:
                signals.seen = max(signals.seen, seen)
                wake.notify_all()
        me = ref()
        if owed and me is not None:
            _last_truncation(me, conn, loud)
        del me
    finally:
        if conn is not None:
            conn.close()
        with wake:
            signals.seen = signals.wrote
            wake.notify_all()


def _last_truncation(me: Checkpointer, conn: sqlite3.Connection | None, loud: bool) -> None:
    """The store closes with a truncation still owed (S17-A-1): one last try (the reader may
    have let go since the last retry; the close of the store's connection does not always
    truncate then: another process's idle connection keeps it from it); refused again, the
    text stays in the -wal until the file's next opening by a store (:func:`wal_left`) or
    its last connection's close."""
    opened = me._open() if conn is None else None
    try:
        used = conn or opened
        if used is not None and me._checkpoint(used, truncate=True, quiet=not loud):
            return
    finally:
        if opened is not None:
            opened.close()
    if not loud:
        return  # the opening's own: no forget's text known to be there
    logger.warning(
        "memory store: closed while a forget's WAL truncation is still refused (another "
        "connection reads an older snapshot): the forgotten text leaves the -wal file at the "
        "store's next opening (or the file's last close)"
    )


def truncate_at_opening(conn: sqlite3.Connection, path: Path) -> bool:
    """One TRUNCATE checkpoint on the opening's connection, never waiting (another
    checkpoint of this process under way, a reader of an older snapshot, a writer: refused
    at once): whether it emptied the WAL. Refused, the opening's checkpointer owes it."""
    lock = checkpoint_lock(path)
    if not lock.acquire(blocking=False):
        return False
    try:
        busy, log, done = checkpoint_now(conn, "TRUNCATE")
    except sqlite3.Error:
        return False
    finally:
        lock.release()
    return not busy and not (log >= 0 and done < log)


def wal_left(path: Path) -> bool:
    """Whether a ``-wal`` file beside ``path`` holds any frame's bytes (copied or not, of the
    current log or an older one): what a store's opening finds when another connection has
    the file open, or a process died or closed while a forget's truncation was owed
    (S17-A-1). The opening's checkpointer then owes a TRUNCATE (see :func:`truncation_owed`):
    a forget's old pages may be in those bytes, and no process is left to owe it."""
    try:
        return os.stat(f"{path}-wal").st_size > _WAL_HEADER
    except OSError:
        return False


def _wal_log(path: Path) -> tuple[tuple[int, int], int] | None:
    """The WAL's current log: its salts and its frames (committed or being written), or
    ``None`` (no WAL, or unreadable)."""
    try:
        # never waits to open: an operator's FIFO (or device) in the WAL's place would hold
        # this thread, and the store's close that joins it, for good; only a regular file
        # is read
        fd = os.open(f"{path}-wal", os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(fd, "rb", buffering=0) as wal:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            header = wal.read(_WAL_HEADER)
            if len(header) < _WAL_HEADER:
                return None
            page_size, _, salt1, salt2 = struct.unpack_from(">IIII", header, 8)
            frame = page_size + _FRAME_HEADER
            size = os.fstat(wal.fileno()).st_size
            low, high = 0, max(0, (size - _WAL_HEADER) // frame)
            while low < high:  # the last frame with the header's salts
                mid = (low + high + 1) // 2
                wal.seek(_WAL_HEADER + (mid - 1) * frame + 8)
                if struct.unpack(">II", wal.read(8) or b"\0" * 8) == (salt1, salt2):
                    low = mid
                else:
                    high = mid - 1
    except (OSError, struct.error):
        return None
    return (salt1, salt2), low


def _pending_frames(
    log: tuple[tuple[int, int], int] | None, copied: tuple[tuple[int, int], int] | None
) -> int | None:
    """The WAL frames not yet copied into the database, or ``None`` (unknown): the log's,
    less those this thread's last checkpoint copied if the log has not started over."""
    if log is None:
        return None
    salts, frames = log
    if copied is not None and copied[0] == salts:
        return max(0, frames - copied[1])
    return frames

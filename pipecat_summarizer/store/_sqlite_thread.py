"""The SQLite store's thread: one worker thread and the one connection made on it.

A connection is used on its own thread only (sqlite3 refuses any other). A close retires
the thread: its queued jobs run, then the close; a job issued meanwhile goes to a new
thread, which first waits for the retired one to end (so calls keep their order and never
run two at a time) and then opens its own connection.

A file's store also has a checkpointer (``_sqlite_checkpoint``): its WAL checkpoints run on
a thread of their own, woken by the writes of this thread's jobs; a close stops it first.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from pipecat_summarizer.store._sqlite_checkpoint import Checkpointer

T = TypeVar("T")


class StoreThread:
    """One worker thread of a store and the connection ``connect`` makes on it."""

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        after: ThreadPoolExecutor | None = None,
        checkpointer: Callable[[], Checkpointer] | None = None,
    ) -> None:
        """A thread that starts once ``after`` (the retired thread, if any) has ended;
        ``checkpointer`` makes the connection's checkpointer once it is open (``None``: an
        in-memory or read-only store, without one)."""
        self._connect: Callable[[], sqlite3.Connection] | None = connect
        self._make_checkpointer = checkpointer
        self.checkpointer: Checkpointer | None = None
        #: The process that made it: a forked child has neither the thread nor the right to
        #: use the connection (SQLite forbids carrying one across a fork): it makes its own.
        self.pid = os.getpid()
        self.conn: sqlite3.Connection | None = None
        # the job on this thread now: a read nobody waits for is interrupted (see interrupt)
        self._running: object | None = None
        self._running_lock = threading.Lock()
        # the thread holds its initializer as long as it lives: never this object (nor the
        # store through ``connect``), or a store dropped unclosed would never be collected
        self.executor = ThreadPoolExecutor(
            1, thread_name_prefix="sqlite-store", initializer=_wait_for, initargs=(after,)
        )

    def call(self, fn: Callable[[sqlite3.Connection], T], job: object) -> T:
        """``fn(conn)``, on this thread, as ``job`` (opens the connection the first time)."""
        if self.conn is None:
            assert self._connect is not None, "a job after the close"
            self.conn = self._connect()
            if self._make_checkpointer is not None:
                self.checkpointer = self._make_checkpointer()
                self.checkpointer.wrote()  # the opening's migration or purge may have written
        with self._running_lock:
            self._running = job
        changes = self.conn.total_changes
        try:
            return fn(self.conn)
        finally:
            with self._running_lock:
                self._running = None
            if self.checkpointer is not None and self.conn.total_changes != changes:
                self.checkpointer.wrote()

    def interrupt(self, job: object) -> None:
        """Interrupt ``job``'s statement if it is the one running (a job not started yet
        never runs: its future was cancelled; one that ended is left alone)."""
        with self._running_lock:
            if self._running is job and self.conn is not None:
                self.conn.interrupt()

    def retire(self) -> Future[None]:
        """Close the connection after the jobs queued so far, and end the thread; returns
        the close's future. Called under the store's lock, as every submit is: no job
        reaches a retired thread (its executor would refuse it)."""
        closed = self.executor.submit(self._close)
        self.executor.shutdown(wait=False)  # the queued jobs and the close still run
        return closed

    def _close(self) -> None:
        self._connect = None  # the store is free to go once closed
        self._make_checkpointer = None
        if self.checkpointer is not None:
            # stopped first: the store's connection, the file's last, checkpoints as it closes
            checkpointer, self.checkpointer = self.checkpointer, None
            checkpointer.stop()
        if self.conn is not None:
            conn, self.conn = self.conn, None
            conn.close()


def _wait_for(retired: ThreadPoolExecutor | None) -> None:
    """A new thread's start: the retired thread's jobs and close end first."""
    if retired is not None:
        retired.shutdown(wait=True)


class Job:
    """One call on a store's thread: what ``interrupt`` compares, and the thread it went to."""

    __slots__ = ("thread",)

    def __init__(self, thread: StoreThread) -> None:
        self.thread = thread

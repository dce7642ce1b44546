"""SQLite's forget in two transactions, and what the store's reads hide between them.

In WAL mode a reader sees the database as of its read's start. A forget that wrote its
tombstone and deleted the caller's rows in one transaction was invisible to another process
until it committed: a live call's forget watch there read no tombstone and placed the text
being deleted (bugs.md S9-P-1). So the forget commits the tombstone first, with a pending row
naming the caller (``forget_pending``): from then on every process's watch sees it. A second
transaction deletes the caller's rows, removes the pending row and merges the full-text index.

Between the two (the deletes, the merge; for good if the process dies there) the tombstone is
authoritative: each read hides the rows of a pending caller's sessions that did not start
after the forget (:class:`Pending`), as the tombstone refuses their writes; and the deletes are
finished by the store's next opening, in any process, or its next forget
(:func:`finish_pending`). A new session of the caller, started after the forget, keeps its
rows, however late the deletes are finished.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from loguru import logger

from pipecat_summarizer.store import _sqlite_schema as schema
from pipecat_summarizer.store._sqlite_checkpoint import checkpoint_now, truncation_owed
from pipecat_summarizer.store._statements import forget_statements, tombstone_statement
from pipecat_summarizer.store.base import error_reason
from pipecat_summarizer.store.records import user_hash

R = TypeVar("R")

#: The deletes (parameters: the caller, the forget's time), each with whether its rows count.
_DELETES = forget_statements("?")
_IS_PENDING = "SELECT 1 FROM forget_pending WHERE user_id = ?"
_PENDING = """INSERT INTO forget_pending VALUES (?, ?)
    ON CONFLICT(user_id) DO UPDATE SET at = MAX(at, excluded.at)"""


def begin(conn: sqlite3.Connection, user_id: str, at: float) -> None:
    """The forget's first transaction: ``user_id``'s tombstone (time ``at``) and their
    pending row, committed."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(tombstone_statement("?"), (user_hash(user_id), at))
        conn.execute(_PENDING, (user_id, at))
        conn.execute("COMMIT")
    except BaseException:
        schema.rollback(conn)
        raise


def finish(conn: sqlite3.Connection, user_id: str, at: float) -> int:
    """The forget's second transaction: delete ``user_id``'s rows but those of their sessions
    that started after ``at``, remove their pending row (unless a later forget's), and merge
    the full-text index without the deleted tokens. Returns the rows deleted (none when
    the pending row is gone: another connection finished the forget)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if not conn.execute(_IS_PENDING, (user_id,)).fetchall():
            conn.execute("ROLLBACK")
            return 0
        n = 0
        for sql, counted in _DELETES:
            deleted = conn.execute(sql, (user_id, at)).rowcount
            n += deleted if counted else 0
        conn.execute("DELETE FROM forget_pending WHERE user_id = ? AND at <= ?", (user_id, at))
        # the index's segments still hold the deleted tokens: merge them away
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')")
        conn.execute("COMMIT")
    except BaseException:
        schema.rollback(conn)
        raise
    return n


def finish_pending(conn: sqlite3.Connection) -> int:
    """Finish the forgets whose deletes are pending (a process died between the two
    transactions, or is between them now: finishing again deletes nothing more). Returns
    how many were finished."""
    pending = conn.execute("SELECT user_id, at FROM forget_pending").fetchall()
    for user_id, at in pending:
        finish(conn, user_id, at)
    if pending:
        logger.info(f"memory store: {len(pending)} forgets' pending deletes finished")
    return len(pending)


#: How long a forget's truncation waits on the store's thread for a running checkpoint.
LOCK_WAIT_S = 0.02


def finish_left(
    conn: sqlite3.Connection,
    *,
    truncate: bool,
    in_file: bool,
    lock: threading.Lock | None = None,
    path: Path | None = None,
) -> bool:
    """Finish the forgets a process left pending (:func:`finish_pending`): one still under
    way in another process (the lock not free in time) is left to it, with a WARNING. Then
    truncate the WAL of a file (``truncate``: also when none was left) holding ``lock`` (the
    file's checkpoint lock: a checkpoint of the checkpointer's thread running at that moment
    would have SQLite refuse the truncation as busy); refused all the same (another
    connection's snapshot), the file's checkpointers at ``path`` are owed it (see
    :func:`truncate_wal`). Returns whether one was finished."""
    try:
        finished = finish_pending(conn) > 0
        if (truncate or finished) and in_file:
            _truncate(conn, lock, path)
    except sqlite3.OperationalError as e:
        logger.warning(
            f"memory store: a pending forget is left to finish later ({error_reason(e)})"
        )
        return False
    return finished


def _truncate(conn: sqlite3.Connection, lock: threading.Lock | None, path: Path | None) -> None:
    """:func:`truncate_wal` holding ``lock`` (see :func:`finish_left`). A checkpoint holding
    it longer than ``LOCK_WAIT_S`` (a slow disk's may take seconds) leaves the truncation to
    the file's checkpointers, which run it once their checkpoint ends: this is the store's
    thread, where the turns' searches queue behind the forget (S16-A-3). With no checkpointer
    of the file here, it waits for the lock."""
    if lock is None:
        truncate_wal(conn, path)
        return
    if not lock.acquire(timeout=LOCK_WAIT_S):
        if path is not None and truncation_owed(path):
            logger.debug("memory store: a checkpoint runs; the checkpointer truncates the WAL")
            return
        lock.acquire()
    try:
        truncate_wal(conn, path)
    finally:
        lock.release()


def truncate_wal(conn: sqlite3.Connection, path: Path | None = None) -> None:
    """Checkpoint and truncate the WAL after deletes (their pages' old copies are in it).
    Refused as busy (another connection reads an older snapshot: another process's search,
    an ``inspect``; or another process checkpoints), the file's checkpointers in this
    process (at ``path``) are owed it: they run a TRUNCATE checkpoint until one succeeds
    (a PASSIVE checkpoint copies the old pages but never erases them, S16-A-1)."""
    # never waiting for the reader with the writers' lock held (S17-A-2)
    busy, _, _ = checkpoint_now(conn, "TRUNCATE")
    if busy:
        told = truncation_owed(path) if path is not None else 0
        then = (
            "the store's checkpointer truncates it as soon as it can"
            if told
            else "the forgotten text leaves it at the next truncation (a forget, a close)"
        )
        logger.warning(
            f"memory store: forget could not truncate the WAL now (another connection reads "
            f"an older snapshot, or writes: never waited for); {then}"
        )


class Pending:
    """The forgets whose deletes are pending, as a read finds them: which rows it hides."""

    def __init__(self, conn: sqlite3.Connection, rows: Sequence[tuple[str, float]]):
        """Read the sessions of each pending caller (``rows``: ``(user_id, at)``)."""
        self.since = {str(u): float(at) for u, at in rows}
        self._later: dict[str, set[str]] = {}  # the caller's sessions kept, by caller
        self._hidden: set[str] = set()  # the sessions hidden
        for user_id, at in self.since.items():
            calls = conn.execute(
                "SELECT call_id, started_at > ? FROM calls WHERE user_id = ?", (at, user_id)
            ).fetchall()
            self._later[user_id] = {c for c, later in calls if later}
            self._hidden.update(c for c, later in calls if not later)

    @classmethod
    def read(cls, conn: sqlite3.Connection) -> Pending | None:
        """The pending forgets, or ``None`` (the common case: one read of an empty table)."""
        rows = conn.execute("SELECT user_id, at FROM forget_pending").fetchall()
        return cls(conn, rows) if rows else None

    def visible(self, user_id: str | None, call_id: str) -> bool:
        """Whether a row of ``call_id`` (and of ``user_id``) may be read."""
        if call_id in self._hidden:
            return False
        return user_id not in self.since or call_id in self._later[user_id]

    def keep(self, records: Iterable[R]) -> list[R]:
        """The records (with ``call_id`` and ``user_id``) that may be read."""
        return [r for r in records if self.visible(_user(r), r.call_id)]  # type: ignore[attr-defined]

    def later_calls(self, user_id: str) -> int | None:
        """How many of a pending caller's sessions started after the forget (``None``: not
        pending)."""
        return len(self._later[user_id]) if user_id in self.since else None


def _user(record: Any) -> str | None:
    return getattr(record, "user_id", None)


def hide(conn: sqlite3.Connection, records: Iterable[R]) -> list[R]:
    """``records`` without those a pending forget hides (see :class:`Pending`)."""
    pending = Pending.read(conn)
    return list(records) if pending is None else pending.keep(records)

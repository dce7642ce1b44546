"""``SQLiteMemoryStore``: the embedded default, stdlib ``sqlite3`` on one worker thread.

One file in WAL mode (readers never block the writer; several processes on one machine can
share it: writes serialize on SQLite's lock, waiting up to ``busy_timeout_s``), or a private
in-memory database when no path is given. Every call runs on the store's own thread, so the
event loop never blocks on disk or on a lock. Archived messages are indexed with FTS5
(BM25 ranking, Porter stemming, diacritics folded).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from loguru import logger

from pipecat_summarizer._text.text_caches import empty_text_caches
from pipecat_summarizer._validation import check_number
from pipecat_summarizer.store import _sqlite_forget, _sqlite_search, _sqlite_writes
from pipecat_summarizer.store._rows import (
    BEFORE_HITS,
    CALL_COLS,
    COMPACTION_COLS,
    FACT_COLS,
    MESSAGE_COLS,
    Hits,
    to_call,
    to_compaction,
    to_fact,
    to_message,
)
from pipecat_summarizer.store._sqlite_checkpoint import (
    Checkpointer,
    checkpoint_lock,
    truncate_at_opening,
    truncation_owed,
    wal_left,
)
from pipecat_summarizer.store._sqlite_forget import Pending, hide
from pipecat_summarizer.store._sqlite_schema import (
    IMMUTABLE_TRIES,
    FileStamp,
    into_wal,
    migrate,
    open_read_only,
    scope_of,
    scope_range,
    session_key,
)
from pipecat_summarizer.store._sqlite_thread import Job, StoreThread
from pipecat_summarizer.store._statements import (
    caller_memory_of,
    caller_summaries_sql,
    check_purge_days,
)
from pipecat_summarizer.store.base import (
    MemoryStore,
    StoreError,
    check_count,
    check_retention_days,
    check_user_id,
    query_words,
)
from pipecat_summarizer.store.records import (
    ArchivedMessage,
    CallerMemory,
    CallRecord,
    CompactionRecord,
    FactEvent,
    Record,
    SearchHit,
    user_hash,
)

T = TypeVar("T")

#: The longest wait for another process's lock a store accepts (an hour).
MAX_BUSY_TIMEOUT_S = 3600.0
#: The page cache of the store's connection (KiB; SQLite's default is 2 MB).
CACHE_KIB = 65536
#: A caller's forget tombstone, by ``user_hash``.
_TOMBSTONE = "SELECT at FROM forgotten WHERE user_hash = ?"


class _Opening:
    """What a store's opening found for its checkpointer: a holder of its own, so that
    the checkpointer's factory never holds the store (see ``StoreThread``)."""

    __slots__ = ("removals", "wal_left")

    def __init__(self) -> None:
        self.wal_left = False
        # the file's removals last read by this store: a change owes a truncation
        self.removals: int | None = None


class SQLiteMemoryStore(MemoryStore):
    """The SQLite backend.

    Args:
        path: The database file (created if missing), or ``None`` for a private in-memory
            database (gone when the store closes).
        busy_timeout_s: How long a write waits for another process's lock before it fails
            (the writer then keeps the records and retries).
        retention_days: If set, records older than this are deleted when the store opens.
        read_only: Open an existing store for reading only (``inspect``): the file is
            opened with ``mode=ro``, nothing is created, migrated or purged, the journal mode
            is left as it is, and every write raises :class:`StoreError`. A file that is not
            a memory store, or one of a schema version this code does not know, is refused.

    Example::

        store = SQLiteMemoryStore("memory.db")
        summarizer = ContextSummarizer(context=context, summarizer=..., store=store,
                                       call_id=call_id, user_id=caller_number)
    """

    backend = "sqlite"

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        busy_timeout_s: float = 5.0,
        retention_days: float | None = None,
        read_only: bool = False,
    ):
        """Configure the store; nothing is opened until first use."""
        if path is not None and not isinstance(path, (str, Path)):
            raise TypeError(f"path must be a str, a Path or None, got {type(path).__name__}")
        if path is not None and not str(path).strip():
            raise ValueError("path must not be empty (None for an in-memory store)")
        if path is not None and "://" in str(path):
            # never echo it: a DSN may hold a password
            raise ValueError(
                "path looks like a connection URL, not a SQLite file: use open_store(dsn) or "
                "PostgresMemoryStore(dsn) for PostgreSQL"
            )
        if path is not None and Path(path).is_dir():
            raise ValueError("path is a folder: give the database file's path inside it")
        if path is not None and Path(path).exists() and not Path(path).is_file():
            # a FIFO, a device or a socket: SQLite's reads fail (or block) on it
            raise ValueError("path is not a regular file (a FIFO, a device or a socket?)")
        check_number("busy_timeout_s", busy_timeout_s)
        if not 0 <= busy_timeout_s <= MAX_BUSY_TIMEOUT_S:
            raise ValueError(
                f"busy_timeout_s must be between 0 and {MAX_BUSY_TIMEOUT_S:g} seconds, "
                f"got {busy_timeout_s!r}"
            )
        check_retention_days(retention_days)
        self.path = None if path is None else Path(path)
        self.busy_timeout_s = float(busy_timeout_s)
        self.retention_days = retention_days
        if not isinstance(read_only, bool):
            raise TypeError(f"read_only must be a bool, got {type(read_only).__name__}")
        if read_only and path is None:
            raise ValueError("read_only needs a path (an in-memory store starts empty)")
        self.read_only = read_only
        # the store's thread and its connection; a close retires it (the next call starts
        # another, once the retired one has ended)
        self._thread: StoreThread | None = None
        self._retired: ThreadPoolExecutor | None = None
        self._closed: Future[None] | None = None  # the last close's
        self._open_lock = threading.Lock()
        # the loop the removals timer was started on for this opening (see _run)
        self._armed: asyncio.AbstractEventLoop | None = None
        # common words' counts, kept across searches
        self._df: _sqlite_search.WordCounts = {}
        # what the latest opening found, read by the checkpointer made after it
        self._opening = _Opening()
        # a read-only opening as immutable: the file as it was then (_sqlite_schema)
        self._frozen: list[FileStamp | None] = [None]

    def __repr__(self) -> str:
        """``SQLiteMemoryStore('path')``."""
        return f"SQLiteMemoryStore({str(self.path) if self.path else ':memory:'!r})"

    # -- thread plumbing ------------------------------------------------------------------

    async def _run(self, fn: Callable[[sqlite3.Connection], T], *, read: bool = False) -> T:
        """``fn(conn)`` on the store's thread (see :meth:`_run_once`). A read-only store
        opened as immutable (a read-only folder) whose file was written since (S17-A-3:
        SQLite would go on serving the pages it cached, a forgotten caller's rows among
        them, mixed with the new file's) is opened again first, on the file as it is now;
        a read during which it changed is read again on a new opening."""
        for _ in range(IMMUTABLE_TRIES):
            stamp = self._frozen[0]
            if stamp is not None and stamp.changed():
                logger.info("memory store: the file opened read-only changed; opened again")
                await self.close()  # the next opening sees the file as it is now
            done = await self._run_once(fn, read=read)
            stamp = self._frozen[0]
            if stamp is None or not stamp.changed():
                return done
        raise StoreError(
            f"store path {str(self.path)!r}: its folder is not writable and the file keeps "
            "changing (another process writes it): copy the files to a writable folder"
        )

    async def _run_once(self, fn: Callable[[sqlite3.Connection], T], *, read: bool = False) -> T:
        """``fn(conn)`` on the store's thread. A ``read`` whose caller stops waiting (a
        recall search the frame gave up on, the call's end) is interrupted where it is, so
        the thread is free for the next one: never left to finish for nobody, holding up
        the next turn's search and taking the interpreter's lock from the event loop."""
        loop = asyncio.get_running_loop()
        with self._open_lock:  # never submitted to a thread a close has retired
            if self._thread is not None and self._thread.pid != os.getpid():
                # a forked child: the parent's thread does not run here (a job would wait
                # forever) and its connection is the parent's: left alone, never closed
                # here (S15-S-2); this process opens its own
                self._thread = self._retired = None
            if self._thread is None:
                self._armed = None  # a new opening: its timer is started again
                self._thread = StoreThread(
                    self._connect, after=self._retired, checkpointer=self._checkpointer()
                )
            job = Job(self._thread)
            future = loop.run_in_executor(self._thread.executor, self._call, fn, job)
        try:
            done = await future
        except asyncio.CancelledError:
            if read:
                self._interrupt(job)
            raise
        if self._armed is not loop:
            # the removals timer, once the store answered a call on this loop: once per
            # opening (a close, a forked child's own thread) and loop, not after every call
            self._watch_deletes()
            if self._deletes.watching:
                self._armed = loop
        return done

    def _is_open(self) -> bool:
        """Whether the store's thread is there (not closed): see ``MemoryStore._is_open``."""
        return self._thread is not None

    def _checkpointer(self) -> Callable[[], Checkpointer] | None:
        """What makes a file's checkpointer (never the store itself: see StoreThread)."""
        if self.path is None or self.read_only:
            return None
        path, busy, opening = self.path, self.busy_timeout_s, self._opening
        # made right after the connection (on the store's thread): what its opening found
        return lambda: Checkpointer(path, busy, truncate=opening.wal_left)

    def _call(self, fn: Callable[[sqlite3.Connection], T], job: Job) -> T:
        return job.thread.call(fn, job)

    def _interrupt(self, job: Job) -> None:
        job.thread.interrupt(job)

    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            return self._connect_read_only()
        target = str(self.path) if self.path else ":memory:"
        if self.path is not None and not self.path.parent.exists():
            raise StoreError(f"store path {target!r}: folder does not exist")
        # before this connection writes: a -wal with bytes in it may hold a forget's old
        # pages that no process is left to truncate (S17-A-1); its checkpointer owes one
        self._opening.wal_left = self.path is not None and wal_left(self.path)
        conn = sqlite3.connect(target, timeout=self.busy_timeout_s, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
            if self.path is not None:
                into_wal(conn, self.busy_timeout_s)
                # never a checkpoint inside a write on this thread, where searches wait: the
                # checkpointer's thread runs them (_sqlite_checkpoint, bugs.md S15-F-2)
                conn.execute("PRAGMA wal_autocheckpoint=0")
            # WAL + NORMAL: a killed process loses nothing committed; only power loss can
            # roll back the last transactions
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=OFF")
            # deleted content is overwritten with zeros (forget: nothing stays in the file)
            conn.execute("PRAGMA secure_delete=ON")
            # a search reads the full-text index, the document sizes and the hits' rows:
            # with the default 2 MB cache they are read from the OS again on every turn
            conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
            # the v2 migration computes existing messages' scopes in SQL
            conn.create_function("pcs_scope", 2, scope_of, deterministic=True)
            migrate(conn)
            if self.retention_days:
                _sqlite_writes.purge(conn, self.retention_days)
            self._finish_forgets(conn)
            if self._opening.wal_left and self.path is not None:
                # at once where nobody reads an older snapshot (a process that died or
                # closed owing it, S17-A-1); else owed to the checkpointer, made next
                self._opening.wal_left = not truncate_at_opening(conn, self.path)
            # the baseline of other processes' deletes (see MemoryStore._check_deletes)
            row = conn.execute("SELECT n FROM removals WHERE id = 1").fetchone()
            removals = None if row is None else int(row[0])
            self._opening.removals = removals
            self._removals_read(removals)
        except Exception:
            conn.close()
            raise
        return conn

    def _connect_read_only(self) -> sqlite3.Connection:
        """The file as it is (see ``_sqlite_schema.open_read_only``)."""
        assert self.path is not None
        return open_read_only(self.path, self.busy_timeout_s, self._frozen)

    def _finish_forgets(self, conn: sqlite3.Connection, *, truncate: bool = False) -> None:
        """Finish the forgets left pending (``_sqlite_forget.finish_left``)."""
        path = self.path
        lock = None if path is None else checkpoint_lock(path)
        in_file = path is not None
        _sqlite_forget.finish_left(conn, truncate=truncate, in_file=in_file, lock=lock, path=path)

    # -- the interface --------------------------------------------------------------------

    async def open(self) -> None:
        """Open the database and create or migrate its schema (idempotent)."""
        await self._run(lambda conn: None)

    async def close(self) -> None:
        """Close the connection and its thread, after the calls issued before (a call
        issued after opens the store again). An in-memory database is gone afterwards."""
        self._stop_deletes()
        self._armed = None
        with self._open_lock:
            thread, self._thread = self._thread, None
            if thread is not None and thread.pid != os.getpid():
                thread = self._retired = self._closed = None  # a forked child's copy (see _run)
            if thread is not None:
                self._retired = thread.executor
                self._closed = thread.retire()
            closed = self._closed
        if thread is None and (closed is None or closed.done()):
            return
        assert closed is not None
        # a close (or a second one) cancelled: the connection still closes
        await asyncio.shield(asyncio.wrap_future(closed))

    async def write(self, records: Sequence[Record]) -> None:
        """Write ``records`` in one transaction."""
        self._refuse_write()
        records = list(records)
        if records:
            await self._run(lambda conn: _sqlite_writes.write(conn, records))

    async def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        return await self._run(lambda conn: conn.execute(sql, tuple(params)).fetchall())

    async def calls(self, user_id: str | None = None, *, limit: int = 50) -> list[CallRecord]:
        """Calls newest first: all of ``user_id``'s, or the most recent of any caller."""
        limit = check_count("limit", limit)
        if user_id is not None:
            check_user_id(user_id)
        where, params = ("WHERE user_id = ?", [user_id]) if user_id is not None else ("", [])
        sql = f"SELECT {CALL_COLS} FROM calls {where} ORDER BY started_at DESC LIMIT ?"

        def read(conn: sqlite3.Connection) -> list[CallRecord]:
            rows = conn.execute(sql, (*params, int(limit))).fetchall()
            return hide(conn, (to_call(r) for r in rows))

        return await self._run(read)

    async def call(self, call_id: str) -> CallRecord | None:
        """One call's row (a session's key, or the newest session of an application's
        call id), or ``None``."""

        def read(conn: sqlite3.Connection) -> list[CallRecord]:
            key = session_key(conn, call_id)
            rows = conn.execute(f"SELECT {CALL_COLS} FROM calls WHERE call_id = ?", (key,))
            return hide(conn, (to_call(r) for r in rows.fetchall()))

        calls = await self._run(read)
        return calls[0] if calls else None

    async def compactions(self, call_id: str) -> list[CompactionRecord]:
        """A call's summary attempts, in order."""
        rows = await self._keyed(
            f"SELECT {COMPACTION_COLS} FROM compactions WHERE call_id = ? ORDER BY attempt",
            call_id,
            convert=to_compaction,
        )
        return rows

    async def _keyed(
        self,
        sql: str,
        call_id: str,
        params: Sequence[Any] = (),
        *,
        convert: Callable[[tuple], T],
        read: bool = False,
    ) -> list[T]:
        """``sql`` with the session ``call_id`` names as its first parameter: its rows
        converted (on the store's thread), without those a pending forget hides."""

        def run(conn: sqlite3.Connection) -> list[T]:
            rows = conn.execute(sql, (session_key(conn, call_id), *params)).fetchall()
            return hide(conn, (convert(r) for r in rows))

        return await self._run(run, read=read)

    async def messages(
        self, call_id: str, *, compaction: int | None = None
    ) -> list[ArchivedMessage]:
        """A call's archived messages in order (those of one compaction if given)."""
        sql = f"SELECT {MESSAGE_COLS} FROM messages WHERE call_id = ?"
        params: list[Any] = []
        if compaction is not None:
            sql += " AND compaction = ?"
            params.append(compaction)
        sql += " ORDER BY position"

        # converted on the store's thread: hundreds of rows cost the loop milliseconds
        return await self._keyed(sql, call_id, params, convert=to_message)

    async def message(self, call_id: str, position: int) -> ArchivedMessage | None:
        """One archived message, or ``None``."""
        rows = await self._keyed(
            f"SELECT {MESSAGE_COLS} FROM messages WHERE call_id = ? AND position = ?",
            call_id,
            [int(position)],
            convert=to_message,
        )
        return rows[0] if rows else None

    async def messages_at(self, keys: Sequence[tuple[str, int]]) -> list[ArchivedMessage | None]:
        """Several archived messages in one query, in the order of ``keys`` (``None`` where
        there is none)."""
        wanted = [(str(c), int(p)) for c, p in keys]
        if not wanted:
            return []

        def read(conn: sqlite3.Connection) -> list[ArchivedMessage | None]:
            found: dict[tuple[str, int], ArchivedMessage] = {}
            for i in range(0, len(wanted), 200):  # stay under SQLite's variable limit
                chunk = wanted[i : i + 200]
                rows = conn.execute(
                    f"WITH k(c, p) AS (VALUES {','.join(['(?,?)'] * len(chunk))}) "
                    f"SELECT {MESSAGE_COLS} FROM k JOIN messages m "
                    "ON m.call_id = k.c AND m.position = k.p",
                    [v for key in chunk for v in key],
                ).fetchall()
                for m in hide(conn, (to_message(row) for row in rows)):
                    found[(m.call_id, m.position)] = m
            return [found.get(key) for key in wanted]

        return await self._run(read, read=True)

    async def fact_history(
        self, *, call_id: str | None = None, user_id: str | None = None
    ) -> list[FactEvent]:
        """Pinned-fact changes of a call or of a caller, oldest first."""
        if call_id is None and user_id is None:
            raise ValueError("fact_history needs call_id or user_id")
        order = "ORDER BY at, call_id, seq"
        if call_id is not None:
            sql = f"SELECT {FACT_COLS} FROM facts WHERE call_id = ? {order}"
            return await self._keyed(sql, call_id, convert=to_fact)

        def read(conn: sqlite3.Connection) -> list[FactEvent]:
            rows = conn.execute(
                f"SELECT {FACT_COLS} FROM facts WHERE user_id = ? {order}", (user_id,)
            )
            return hide(conn, (to_fact(r) for r in rows.fetchall()))

        return await self._run(read)

    async def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        call_id: str | None = None,
        limit: int = 10,
        any_word: bool = False,
        _replies: int = 0,
    ) -> list[SearchHit]:
        """FTS5 search of archived messages, ranked by BM25 (best first).

        ``_replies`` is recall's (see ``search.reads_replies``): the message that followed
        each of the first ``_replies`` hits is read in the same trip to the store's thread,
        and returned as the list's ``replies`` (``{(call_id, position): (role, content)}``,
        of those hits that have one), and the message before each of the first
        ``BEFORE_HITS`` as its ``befores`` (see ``Hits``)."""
        hits, _ = await self._search(query, user_id, call_id, limit, any_word, _replies, None)
        return hits

    async def _search(
        self,
        query: str,
        user_id: str | None,
        call_id: str | None,
        limit: int,
        any_word: bool,
        replies: int,
        tombstone: str | None,
    ) -> tuple[list[SearchHit], float | None]:
        """:meth:`search`, and the tombstone of the caller whose ``user_hash`` is
        ``tombstone`` (its time or ``None``; not read when ``tombstone`` is ``None``) read in
        the same job, before the search's statements."""
        words = query_words(query)
        limit = check_count("limit", limit)  # never past what SQLite binds (MAX_COUNT)

        def find(conn: sqlite3.Connection) -> tuple[list[SearchHit], tuple | None, float | None]:
            at = None
            if tombstone is not None:
                # first: a forget committed after it hides its rows from the search below
                # (its pending deletes, ``hide``), or has deleted them
                row = conn.execute(_TOMBSTONE, (tombstone,)).fetchone()
                at = None if row is None else float(row[0])
            if not words or limit <= 0:
                return [], None, at
            call = None if call_id is None else session_key(conn, call_id)
            rows = _sqlite_search.find(conn, self._df, words, user_id, call, limit, any_word)
            hits = hide(conn, (SearchHit(*r) for r in rows))
            if not replies:
                return hits, None, at
            keys = [(h.call_id, h.position) for h in hits[:replies]]
            before = _sqlite_search.befores(conn, hits[: min(replies, BEFORE_HITS)])
            return hits, (_sqlite_search.followers(conn, keys, user_id), before), at

        if tombstone is None and (not words or limit <= 0):
            return (Hits() if replies else []), None  # nothing to search, nothing to read
        hits, around, at = await self._run(find, read=True)
        if around is None:
            return (Hits(hits) if replies else hits), at
        return Hits(hits, *around), at

    async def search_noticing(
        self,
        query: str,
        *,
        user_id: str,
        since: float,
        limit: int = 10,
        any_word: bool = False,
        _replies: int = 0,
    ) -> tuple[list[SearchHit], bool]:
        """:meth:`search` of ``user_id``'s messages and ``noticed_forget(user_id, since)``
        in one job on the store's thread: the caller's tombstone is read first, then the
        search runs (see ``MemoryStore.search_noticing``); ``_replies`` as :meth:`search`'s.
        While the call's baseline read is under way, or with ``search`` overridden (a
        subclass's), the two calls side by side."""
        check_user_id(user_id)
        apart = await self._noticing_apart(
            query, user_id=user_id, since=since, limit=limit, any_word=any_word, replies=_replies
        )
        if apart is not None:
            return apart
        key = user_hash(user_id)
        hits, at = await self._search(query, user_id, None, limit, any_word, _replies, key)
        return hits, await self._noticed_at(user_id, since, at)

    search_noticing.one_trip = True  # type: ignore[attr-defined]
    # its trips run one at a time on the store's thread: a watch of its own beside a search
    # answers after the search anyway (recall starts none for a late answer it serves while
    # the turn's own search still runs)
    search_noticing.serial = True  # type: ignore[attr-defined]

    # the one search that takes ``_replies``: an override of ``search`` (a test's slow
    # store) or a wrapper (``PrefetchingArchive``) does not have this mark
    search.reads_replies = True  # type: ignore[attr-defined]

    async def forgotten_at(self, user_id: str) -> float | None:
        """When ``user_id`` was last forgotten (the tombstone's time), or ``None``."""
        check_user_id(user_id)
        rows = await self._query(_TOMBSTONE, (user_hash(user_id),))
        return float(rows[0][0]) if rows else None

    async def _removals(self) -> int | None:
        """The file's removals (one row, bumped by every delete of messages): a read of its
        primary key. A closed store answers ``None``."""
        if self._thread is None:
            return None
        rows = await self._query("SELECT n FROM removals WHERE id = 1")
        value = int(rows[0][0]) if rows else None
        opening = self._opening
        if value != opening.removals and value is not None and self.path and not self.read_only:
            # a delete since (this process's or another's): its truncation may be owed by a
            # process that closed or died since, or that never will (S17-A-1): this file's
            # checkpointers here truncate too once the readers let them
            if opening.removals is not None:
                truncation_owed(self.path)
            opening.removals = value
        return value

    async def tombstones(self, user_hashes: Sequence[str]) -> dict[str, float]:
        """The forget tombstones among ``user_hashes``: their times, by hash (one read of
        the tombstones' primary key). A closed store answers ``{}`` (never opened again)."""
        keys = list(dict.fromkeys(k for k in user_hashes if isinstance(k, str)))
        found: dict[str, float] = {}
        if self._thread is None:
            return found
        for start in range(0, len(keys), 500):  # under SQLite's oldest limit of 999 variables
            batch = keys[start : start + 500]
            marks = ", ".join("?" * len(batch))
            rows = await self._query(
                f"SELECT user_hash, at FROM forgotten WHERE user_hash IN ({marks})", batch
            )
            found.update((str(h), float(at)) for h, at in rows)
        return found

    async def caller_memory(self, user_id: str, *, max_calls: int = 5) -> CallerMemory:
        """The caller's current pinned facts and their latest calls' summaries."""
        check_user_id(user_id)
        max_calls = check_count("max_calls", max_calls)

        def read(conn: sqlite3.Connection) -> CallerMemory:
            # the caller's current state of each key (kept by every write), oldest first
            facts = conn.execute(
                "SELECT key, action, text, fact_kind, source, call_id FROM caller_facts"
                " WHERE user_id = ? ORDER BY at, seq",
                (user_id,),
            ).fetchall()
            calls = conn.execute(caller_summaries_sql("?"), (user_id, int(max_calls))).fetchall()
            pending = Pending.read(conn)
            later = None if pending is None else pending.later_calls(user_id)
            if pending is not None and later is not None:
                # the calls that started after a pending forget are the newest (kept)
                facts = [f for f in facts if pending.visible(user_id, f[5])]
                calls = calls[:later]
            return caller_memory_of(user_id, (f[:5] for f in facts), calls)

        return await self._run(read)

    async def forget(self, user_id: str) -> int:
        """Delete every record of ``user_id`` in every table, and leave a tombstone (a hash
        of the id, and the time) so that no session of theirs that started before now writes
        anything again, in this process or another. Nothing of their words stays in the
        files: deleted content is zeroed (``secure_delete``), the full-text index is merged
        without their tokens (FTS5 ``optimize``) and the WAL is checkpointed and truncated
        (if another connection holds a read snapshot, the WAL is truncated at the next
        checkpoint; a WARNING says so).

        The tombstone is committed first, then the deletes (see ``_sqlite_forget``): another
        process's call sees the forget as soon as it starts, and its reads hide the rows
        until they are gone. If the deletes fail (or the process dies first), the next
        opening of the store or its next forget finishes them; a session of the caller that
        started after the forget keeps its rows. Then the process's caches keyed by
        conversation text are emptied (``_text.text_caches``)."""
        if not isinstance(user_id, str) or not user_id:
            raise ValueError("forget needs a non-empty user_id")
        self._refuse_write()
        at = self._forgotten_now(user_id)  # a live call of this process stops at once

        scope = scope_range(scope_of(user_id, ""))

        def forget(conn: sqlite3.Connection) -> int:
            try:
                _sqlite_forget.begin(conn, user_id, at)
                n = _sqlite_forget.finish(conn, user_id, at)
                self._finish_forgets(conn, truncate=True)  # and those a process left
                return n
            finally:
                # their words, kept as the keys of their scope's cached counts, go too (the
                # counts of what went are counted again anyway: see
                # ``_sqlite_search.word_counts``): on the store's thread (walked on the loop,
                # a search running meanwhile that adds a count made the forget raise after it
                # had run)
                for key in [k for k in self._df if k[0] == scope]:
                    self._df.pop(key, None)

        try:
            return await self._run(forget)
        finally:
            # what this process holds of their words outside the store (see text_caches):
            # after the deletes (a search queued before the forget may have read their rows)
            empty_text_caches()

    async def purge_older_than(self, days: float) -> int:
        """Delete records older than ``days`` days."""
        check_purge_days(days)
        self._refuse_write()

        # the counts of what went are counted again (see ``_sqlite_search.word_counts``)
        return await self._run(lambda conn: _sqlite_writes.purge(conn, days))

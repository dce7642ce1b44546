"""The store's one small async interface, shared by the SQLite and PostgreSQL backends."""

from __future__ import annotations

import asyncio
import weakref
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence

from pipecat_summarizer._text.text_caches import empty_text_caches
from pipecat_summarizer._text.vocabulary import words
from pipecat_summarizer._validation import check_number
from pipecat_summarizer.errors import PipecatSummarizerError

# the forget bookkeeping (its own module), its names where their users import them from
from pipecat_summarizer.store._forgets import BASELINE_WAIT_S as BASELINE_WAIT_S
from pipecat_summarizer.store._forgets import FORGET_SKEW_S as FORGET_SKEW_S
from pipecat_summarizer.store._forgets import MAX_BASELINES as MAX_BASELINES
from pipecat_summarizer.store._forgets import Deletes, Forgets
from pipecat_summarizer.store._forgets import on_forget as on_forget
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

#: The schema version this code writes; the ``schema_version`` table holds the database's.
#: v2: the caller (or, for a call without one, the call) is part of the full-text index, so
#: a caller's search ranks only their own messages; an older database migrates on open.
#: v3 (PostgreSQL): the scoped GIN index without a pending list (``fastupdate = off``) and
#: its statistics gathered; nothing changes on SQLite.
#: v4: a call row per session (``calls.label`` holds the application's call id, so a reused
#: id never merges two callers), each caller's current facts (``caller_facts``: a returning
#: caller's memory reads those, not their whole history) and forget tombstones
#: (``forgotten``).
#: v5 (PostgreSQL): each caller's word index (``message_words``), which recall's search
#: reads; nothing changes on SQLite.
#: v6 (PostgreSQL): the word index is emptied with the messages by a ``TRUNCATE``.
#: v7 (SQLite): the forgets whose deletes are still to be done (``forget_pending``): a forget
#: commits its tombstone before its deletes; nothing changes on PostgreSQL.
#: v8: the removal counts (``removals``), which a trigger bumps in every transaction that
#: deletes archived messages: a search's kept word counts stand while it is unchanged.
#: v9 (PostgreSQL): a delete's word rows found by their whole key (a forget's cost linear in
#: its messages), and the fold of ``removals`` any role that may forget runs
#: (``removals_fold``, the owner's rights); nothing changes on SQLite.
SCHEMA_VERSION = 9


def query_words(query: str, limit: int = 32) -> list[str]:
    """The words of a search query, split by the text vocabulary's
    :func:`~pipecat_summarizer._text.vocabulary.words` (letters and digits only: no query
    syntax gets through)."""
    if not isinstance(query, str):
        raise TypeError(f"query must be a string, got {type(query).__name__}")
    return words(query)[:limit]


class StoreError(PipecatSummarizerError):
    """A store could not be opened or read (bad path or DSN, newer schema, closed store)."""


#: The largest ``limit`` / ``max_calls`` a read takes (a signed 64-bit integer).
MAX_COUNT = 2**63 - 1


def check_count(name: str, value: object) -> int:
    """A read's ``limit`` / ``max_calls``: a non-negative integer (not a bool, a string or
    a float; SQLite takes a negative ``LIMIT`` for no limit at all).

    Raises:
        TypeError: If it is not an integer.
        ValueError: If it is negative or past :data:`MAX_COUNT`.
    """
    check_number(name, value, integer=True)
    if value < 0:  # type: ignore[operator]
        raise ValueError(f"{name} must not be negative, got {value!r}")
    if value > MAX_COUNT:  # type: ignore[operator]
        # neither database takes a LIMIT past a signed 64-bit integer (an OverflowError or
        # a DataError that did not name the argument)
        raise ValueError(f"{name} must be at most 2**63 - 1, got {value!r}")
    return int(value)  # type: ignore[call-overload]


def check_user_id(value: object) -> str:
    """A read's ``user_id`` (required): a string.

    Raises:
        TypeError: If it is not a string.
    """
    if not isinstance(value, str):
        raise TypeError(f"user_id must be a string, got {type(value).__name__}")
    return value


def check_retention_days(value: object) -> None:
    """``retention_days``: ``None`` or a positive, finite number of days (not a bool).

    Raises:
        TypeError: If it is a bool, a string or another non-number.
        ValueError: If it is NaN, infinite, zero or negative.
    """
    check_number("retention_days", value, optional=True)
    if value is not None and not value > 0:  # type: ignore[operator]
        raise ValueError(f"retention_days must be positive (or None), got {value!r}")


#: (what an error's text says, lower-cased) -> why, for the store's outage WARNINGs
_SQLITE_REASONS = (
    ("locked", "database locked by another connection"),
    ("busy", "database locked by another connection"),
    ("not a database", "not a database"),
    ("readonly", "read-only"),
    ("read-only", "read-only"),
    ("disk is full", "disk full"),
    ("database or disk is full", "disk full"),
    ("unable to open", "cannot open the file"),
    ("disk i/o error", "disk I/O error"),
    ("malformed", "database file is corrupt"),
)
#: PostgreSQL SQLSTATE (or its class, two characters) -> why
_SQLSTATE_REASONS = {
    "28": "authentication failed",
    "3D000": "database does not exist",
    "53100": "disk full",
    "53200": "server out of memory",
    "53300": "too many connections",
    "55P03": "locked (lock not available)",
    "57014": "statement timed out or was cancelled",
    "25006": "read-only",
    "57P01": "server shutting down",
    "57P02": "server crashed",
    "57P03": "server starting up",
    "08": "connection failed",
    "40P01": "deadlock",
    "40001": "serialization failure",
}


def error_reason(error: BaseException) -> str:
    """Why a store operation failed, in a few words and with the exception's class, for
    WARNINGs: ``locked``, ``not a database``, ``read-only``, ``disk full``, ``connection
    refused``, ``authentication failed``... Never the database's message itself (it may
    quote a value the caller said)."""
    if isinstance(error, StoreError):
        return str(error)[:300]  # our own words: no conversation text, no password
    name = type(error).__name__
    sqlstate = getattr(error, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate:
        why = _SQLSTATE_REASONS.get(sqlstate) or _SQLSTATE_REASONS.get(sqlstate[:2])
        return f"{why} ({name})" if why else f"{name}, SQLSTATE {sqlstate}"
    if isinstance(error, ConnectionRefusedError):
        return f"connection refused ({name})"
    if isinstance(error, TimeoutError):
        return f"timed out ({name})"
    if isinstance(error, OSError) and error.errno is not None:
        import errno as errnos

        if error.errno == errnos.ENOSPC:
            return f"disk full ({name})"
        if error.errno in (errnos.EACCES, errnos.EROFS, errnos.EPERM):
            return f"read-only or permission denied ({name})"
        if error.errno in (errnos.ECONNRESET, errnos.EPIPE, errnos.ENOTCONN):
            return f"connection lost ({name})"
        return f"{errnos.errorcode.get(error.errno, 'OS error')} ({name})"
    module = type(error).__module__ or ""
    if module.startswith("sqlite3") or name in ("OperationalError", "DatabaseError"):
        text = str(error).lower()
        for needle, why in _SQLITE_REASONS:
            if needle in text:
                return f"{why} ({name})"
    if "connection" in name.lower() or "closed" in str(error).lower()[:80]:
        return f"connection lost ({name})"
    return name


#: SQLSTATE classes of errors a record causes (retrying it never helps): data exceptions,
#: integrity violations, program limits (a tsvector over 1 MB, an index row too large)
_RECORD_SQLSTATES = ("22", "23", "54")
#: SQLite errors a record causes
_SQLITE_RECORD_ERRORS = ("string or blob too big", "constraint failed", "datatype mismatch")


def is_outage(error: BaseException) -> bool:
    """Whether a failed write failed because of the database (locked, down, full, read-only,
    a connection lost: retry everything later) rather than because of a record in it (bad
    text, a value out of range: retrying never helps). Unknown errors count as outages, so
    nothing is set aside on a guess."""
    if isinstance(error, (UnicodeError, ValueError, TypeError, OverflowError)):
        return False  # a value that cannot be bound or encoded
    sqlstate = getattr(error, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate:
        return not sqlstate.startswith(_RECORD_SQLSTATES)
    name = type(error).__name__
    if type(error).__module__.startswith("asyncpg") and name == "DataError":
        return False  # asyncpg could not encode an argument
    if type(error).__module__.startswith("sqlite3") or name in (
        "IntegrityError",
        "InterfaceError",
        "ProgrammingError",
        "DataError",
        "OperationalError",
    ):
        if name in ("IntegrityError", "DataError"):
            return False
        text = str(error).lower()
        if name in ("InterfaceError", "ProgrammingError") and "binding" in text:
            return False
        return not any(needle in text for needle in _SQLITE_RECORD_ERRORS)
    return True


#: The tables every memory store has, whatever its backend and version.
REQUIRED_TABLES = frozenset({"schema_version", "calls", "messages", "compactions", "facts"})


def check_store_tables(where: str, names: set[str], known: frozenset[str] | None) -> None:
    """Refuse a database that is not a memory store (read-only opening: never guess).

    Args:
        where: The file or database, for the message (never a DSN with its password).
        names: Its tables and views.
        known: The names this backend's schema may hold (besides ``sqlite_*`` and the
            full-text index's own ``messages_fts*``); ``None`` where other tables may live
            beside the store (a PostgreSQL database shared with the application).

    Raises:
        StoreError: If a store table is missing or an unknown table is present.
    """
    missing = sorted(REQUIRED_TABLES - names)
    if missing:
        raise StoreError(f"{where}: not a memory store (no {', '.join(missing)} table)")
    if known is None:
        return
    unknown = sorted(n for n in names - known if not n.startswith(("sqlite_", "messages_fts")))
    if unknown:
        shown = ", ".join(repr(n[:40]) for n in unknown[:5])
        raise StoreError(f"{where}: not a memory store (unknown tables {shown})")


def check_store_version(where: str, version: object) -> None:
    """Refuse a schema version this code cannot read as it is (a read-only opening never
    migrates: an older store is migrated by opening it once read-write, by the code that
    writes to it).

    Raises:
        StoreError: If ``version`` is not ``SCHEMA_VERSION``.
    """
    if version == SCHEMA_VERSION and isinstance(version, int):
        return
    if isinstance(version, int) and 1 <= version < SCHEMA_VERSION:
        raise StoreError(
            f"{where}: schema v{version} is older than this code's v{SCHEMA_VERSION}; "
            "a read-only opening does not migrate it (open it read-write once to migrate)"
        )
    raise StoreError(
        f"{where}: schema version {version!r} is not one this code knows "
        f"(v{SCHEMA_VERSION}); use the version that wrote it"
    )


class MemoryStore(ABC):
    """Where a call's records go, and where a returning caller's memory comes from.

    A ``call_id`` argument of a read names a session's key (a record's ``call_id``) or else
    an application's call id: the newest session recorded under it (its ``label``).

    Every method is a coroutine and none blocks the event loop. :meth:`open` is idempotent
    and creates or migrates the schema on first use; the other methods call it. A store may
    be shared by many calls (and processors) of one process; the application closes it.
    """

    #: ``"sqlite"`` or ``"postgres"``.
    backend: str = ""
    #: Opened for reading only (``inspect``): every write raises :class:`StoreError`.
    read_only: bool = False

    @abstractmethod
    async def open(self) -> None:
        """Connect, and create or migrate the schema (idempotent)."""

    @abstractmethod
    async def close(self) -> None:
        """Release connections and threads. The store can be opened again."""

    @abstractmethod
    async def write(self, records: Sequence[Record]) -> None:
        """Write ``records`` in one transaction (idempotent: natural keys, upserts).

        Raises:
            Exception: The backend's own error when the database is unavailable; the
                writer keeps the records and retries.
        """

    @abstractmethod
    async def calls(self, user_id: str | None = None, *, limit: int = 50) -> list[CallRecord]:
        """Calls newest first: all of ``user_id``'s, or the most recent of any caller."""

    @abstractmethod
    async def call(self, call_id: str) -> CallRecord | None:
        """One call's row, or ``None``."""

    @abstractmethod
    async def compactions(self, call_id: str) -> list[CompactionRecord]:
        """A call's summary attempts, in order."""

    @abstractmethod
    async def messages(
        self, call_id: str, *, compaction: int | None = None
    ) -> list[ArchivedMessage]:
        """A call's archived messages in conversation order (only those summarized by
        ``compaction`` if given)."""

    @abstractmethod
    async def message(self, call_id: str, position: int) -> ArchivedMessage | None:
        """One archived message, or ``None``."""

    async def messages_at(self, keys: Sequence[tuple[str, int]]) -> list[ArchivedMessage | None]:
        """Several archived messages in one read: one entry per ``(call_id, position)`` of
        ``keys``, in order, ``None`` where there is none.

        The SQL backends answer with one query; this default reads them one by one.
        """
        return [await self.message(call_id, position) for call_id, position in keys]

    @abstractmethod
    async def fact_history(
        self, *, call_id: str | None = None, user_id: str | None = None
    ) -> list[FactEvent]:
        """Pinned-fact changes of a call or of a caller, oldest first."""

    @abstractmethod
    async def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        call_id: str | None = None,
        limit: int = 10,
        any_word: bool = False,
    ) -> list[SearchHit]:
        """Full-text search of archived messages, best first.

        Args:
            query: Words (any punctuation is ignored; no query syntax).
            user_id: Only this caller's messages.
            call_id: Only this call's messages.
            limit: At most this many hits.
            any_word: Match messages with any of the words (ranked), instead of all.
        """

    @abstractmethod
    async def caller_memory(self, user_id: str, *, max_calls: int = 5) -> CallerMemory:
        """A returning caller's pinned facts and their latest calls' final summaries."""

    @abstractmethod
    async def forget(self, user_id: str) -> int:
        """Delete everything held for ``user_id`` (every table). Returns rows deleted."""

    @abstractmethod
    async def purge_older_than(self, days: float) -> int:
        """Delete records older than ``days`` days. Returns rows deleted."""

    @property
    def _forgets(self) -> Forgets:
        """This store object's forget bookkeeping (made on first use: a backend need not
        call an ``__init__`` of this class, which has none)."""
        forgets = self.__dict__.get("_forget_book")
        if forgets is None:
            forgets = self.__dict__["_forget_book"] = Forgets()
        return forgets

    def forget_generation(self, user_id: str) -> int:
        """How many times :meth:`forget` ran for ``user_id`` on this store object (in this
        process), or another process's forget was noticed (:meth:`noticed_forget`): a live
        call's recorder, recall and semantic index compare it with the value they saw
        before and drop what they hold of the caller when it moved.

        A token: compare it for equality only (``==`` / ``!=``), never by order. While a
        forget of the caller is under way (PostgreSQL: counted, rows not yet deleted), each
        read answers a new negative value, never answered again, so that a read made during
        the forget matches no other read (before, during or after it)."""
        return self._forgets.generation(user_id)

    async def forgotten_at(self, user_id: str) -> float | None:
        """When ``user_id`` was last forgotten, by any process (the tombstone's time), or
        ``None``. A store without tombstones answers ``None``."""
        return None

    async def tombstones(self, user_hashes: Sequence[str]) -> dict[str, float]:
        """The forget tombstones among ``user_hashes`` (each a caller's
        :func:`~pipecat_summarizer.store.records.user_hash`, the key tombstones keep): when
        each was last forgotten, by any process, by hash; the others are left out. One read
        by the tombstones' key (ask a few hundred at a time). A store without tombstones
        answers ``{}``.

        The process's cache of semantic vectors reads it to learn of other processes'
        forgets (:func:`~pipecat_summarizer._recall.vector_cache.sweep_tombstones`)."""
        return {}

    def forget_baseline(self, user_id: str, since: float) -> asyncio.Future[float | None]:
        """Start reading ``user_id``'s tombstone as the baseline of their call that started
        at ``since`` (its key, as the call passes it to :meth:`noticed_forget`): a call
        reads it at its start, before the caller's memory. The same read is answered for
        the same key; the :data:`MAX_BASELINES` latest calls' are kept. It reads
        :meth:`tombstones` (a store that keeps tombstones answers both)."""
        self._check_deletes()
        return self._forgets.baseline(user_id, since, lambda: self._tombstone(user_id))

    def _check_deletes(self) -> None:
        """Learn of other processes' deletes (a forget of a caller with no live call here)
        from the database's removals, at most every ``_forgets.DELETES_CHECK_S``, in a task
        of its own; a change empties the caches keyed by conversation text (see
        ``_forgets.Deletes``). The store's timer is started too if it is open and has none
        on this loop (a store opened on an earlier loop). While the timer runs, it does the
        reads: a call's start and turns (this is called there) start none, so no read of the
        removals is started on a turn's path (a trip beside the turn's search)."""
        self._watch_deletes()
        if self._deletes.watching:
            return
        self._deletes.check(self._removals, empty_text_caches)

    def _watch_deletes(self) -> None:
        """Start the store's removals timer (``_forgets.Deletes.watch``) if the store is open
        and a loop runs: a forget by another process reaches this process's text caches
        within ``_forgets.DELETES_CHECK_S`` whether or not a call is live here (S14-S-1).
        The backends call it as they open; their close stops it (``_stop_deletes``)."""
        deletes = self._deletes
        if deletes.watching or not self._is_open():
            return  # (armed: its loop's own, or replaced by watch when that loop is gone)
        me = weakref.ref(self)

        def reader() -> Callable[[], Awaitable[int | None]] | None:
            # weak: a store the application dropped without closing ends its timer
            store = me()
            return store._removals if store is not None and store._is_open() else None

        deletes.watch(reader, empty_text_caches)

    def _stop_deletes(self) -> None:
        """Stop the removals timer (the store closes; its next opening starts one)."""
        deletes = self.__dict__.get("_deletes_seen")
        if deletes is not None:
            deletes.stop()

    def _is_open(self) -> bool:
        """Whether the store is open now (its connection or pool there, not closing): the
        removals timer reads only then, and never opens a closed store."""
        return False

    @property
    def _deletes(self) -> Deletes:
        """What this store object last read of the database's removals (made on first use)."""
        deletes = self.__dict__.get("_deletes_seen")
        if deletes is None:
            deletes = self.__dict__["_deletes_seen"] = Deletes()
        return deletes

    def _removals_read(self, value: int | None) -> None:
        """The removals read by the store's own work (its opening): see ``_check_deletes``."""
        self._deletes.saw(value, empty_text_caches)

    async def _removals(self) -> int | None:
        """The database's removals (a value that changes with every transaction that
        deletes archived messages), or ``None`` where a store keeps none."""
        return None

    async def _tombstone(self, user_id: str) -> float | None:
        return (await self.tombstones([user_hash(user_id)])).get(user_hash(user_id))

    async def search_noticing(
        self,
        query: str,
        *,
        user_id: str,
        since: float,
        limit: int = 10,
        any_word: bool = False,
    ) -> tuple[list[SearchHit], bool]:
        """:meth:`search` of ``user_id``'s messages and :meth:`noticed_forget` of their call
        that started at ``since``, together: a recall turn's own search and its forget
        watch. Both backends read the caller's tombstone in the search's own trip to the
        database (SQLite: the same job on the store's thread, before the search's
        statements; PostgreSQL: the search's statement), so a turn makes one trip, not two.

        This default (a store of another kind) makes the two calls side by side.

        Returns:
            ``(hits, noticed)``: the hits, and whether a forget of the caller by any process
            was noticed (as :meth:`noticed_forget` answers).
        """
        search = self.search(query, user_id=user_id, limit=limit, any_word=any_word)
        hits, noticed = await asyncio.gather(search, self.noticed_forget(user_id, since))
        return hits, noticed

    async def _noticed_at(self, user_id: str, since: float, at: float | None) -> bool:
        """:meth:`noticed_forget` on a tombstone the backend read itself (``at``, its time
        or ``None``) in a search's trip (:meth:`search_noticing`), read after the call's
        baseline had answered."""
        self._check_deletes()

        async def read(_: str) -> float | None:
            return at

        noticed = await self._forgets.noticed(user_id, since, read)
        if noticed:
            empty_text_caches()  # as noticed_forget
        return noticed

    async def _noticing_apart(
        self, query: str, *, user_id: str, since: float, limit: int, any_word: bool, replies: int
    ) -> tuple[list[SearchHit], bool] | None:
        """A backend's :meth:`search_noticing` as two calls where one trip cannot serve:
        ``search`` overridden (a subclass's: it is the search, called as such), or the
        call's baseline read under way (:meth:`_one_trip_watch`). ``None``: one trip may."""
        if not getattr(self.search, "reads_replies", False):
            return await MemoryStore.search_noticing(
                self, query, user_id=user_id, since=since, limit=limit, any_word=any_word
            )
        if self._one_trip_watch(user_id, since):
            return None
        search = self.search(  # type: ignore[call-arg]  # the backends' search takes it
            query, user_id=user_id, limit=limit, any_word=any_word, _replies=replies
        )
        hits, noticed = await asyncio.gather(search, self.noticed_forget(user_id, since))
        return hits, noticed

    def _one_trip_watch(self, user_id: str, since: float) -> bool:
        """Whether a search may read the call's tombstone in its own trip: not while the
        call's baseline read is under way (the tombstone must be read after it: a forget
        between the two would be taken for the baseline)."""
        return not self._forgets.baseline_pending(user_id, since)

    async def noticed_forget(self, user_id: str, since: float) -> bool:
        """Whether ``user_id`` was forgotten by any process during their call that started
        at ``since`` (this process's wall clock); a forget seen here for the first time
        counts as one in this process (see :meth:`forget_generation`), so a live call drops
        what it holds of the caller even when another process ran the forget.

        The tombstone (:meth:`forgotten_at`) is compared by value with the one read at the
        call's start (:meth:`forget_baseline`), never by its time: another process's clock
        may be off. Without a baseline, a tombstone up to :data:`FORGET_SKEW_S` older than
        ``since`` counts."""
        self._check_deletes()  # other callers' forgets, by other processes (S14-S-1)
        noticed = await self._forgets.noticed(user_id, since, self.forgotten_at)
        if noticed:
            # what this process holds of their words outside the store (see text_caches)
            empty_text_caches()
        return noticed

    def _refuse_write(self) -> None:
        """Raise :class:`StoreError` if the store was opened read-only (every write, forget
        and purge calls this first)."""
        if self.read_only:
            raise StoreError("this store was opened read-only")

    def _forgotten_now(self, user_id: str, at: float | None = None) -> float:
        """Count a forget of ``user_id`` (every backend's :meth:`forget` calls this first and
        writes the returned time as the tombstone's); ``at``: a tombstone read back."""
        return self._forgets.counted(user_id, at)

    def _forget_running(self, user_id: str) -> Callable[[], None]:
        """Mark a forget of ``user_id`` (counted already) as under way until the returned
        function is called (once its deletes are committed): see :meth:`forget_generation`."""
        return self._forgets.under_way(user_id)

    async def __aenter__(self) -> MemoryStore:
        """Open the store."""
        await self.open()
        return self

    async def __aexit__(self, *exc) -> None:
        """Close the store."""
        await self.close()

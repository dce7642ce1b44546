"""The store's one small async interface, shared by the SQLite and PostgreSQL backends."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence

from pipecat_summarizer.store.records import (
    ArchivedMessage,
    CallerMemory,
    CallRecord,
    CompactionRecord,
    FactEvent,
    Record,
    SearchHit,
)

#: The schema version this code writes; the ``schema_version`` table holds the database's.
#: v2: the caller (or, for a call without one, the call) is part of the full-text index, so
#: a caller's search ranks only their own messages; an older database migrates on open.
#: v3 (PostgreSQL): the scoped GIN index without a pending list (``fastupdate = off``) and
#: its statistics gathered; nothing changes on SQLite.
SCHEMA_VERSION = 3

_WORD = re.compile(r"\w+", re.UNICODE)


def query_words(query: str, limit: int = 32) -> list[str]:
    """The words of a search query (letters and digits only: no query syntax gets through)."""
    if not isinstance(query, str):
        raise TypeError(f"query must be a string, got {type(query).__name__}")
    return _WORD.findall(query.lower())[:limit]


class StoreError(Exception):
    """A store could not be opened or read (bad path or DSN, newer schema, closed store)."""


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

    Every method is a coroutine and none blocks the event loop. :meth:`open` is idempotent
    and creates or migrates the schema on first use; the other methods call it. A store may
    be shared by many calls (and processors) of one process; the application closes it.
    """

    #: ``"sqlite"`` or ``"postgres"``.
    backend: str = ""

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

    async def __aenter__(self) -> MemoryStore:
        """Open the store."""
        await self.open()
        return self

    async def __aexit__(self, *exc) -> None:
        """Close the store."""
        await self.close()

"""``SQLiteMemoryStore``: the embedded default, stdlib ``sqlite3`` on one worker thread.

One file in WAL mode (readers never block the writer; several processes on one machine can
share it: writes serialize on SQLite's lock, waiting up to ``busy_timeout_s``), or a private
in-memory database when no path is given. Every call runs on the store's own thread, so the
event loop never blocks on disk or on a lock. Archived messages are indexed with FTS5
(BM25 ranking, Porter stemming, diacritics folded).
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from loguru import logger

from pipecat_summarizer._validation import check_number
from pipecat_summarizer.store._rows import (
    CALL_COLS,
    COMPACTION_COLS,
    FACT_COLS,
    MESSAGE_COLS,
    call_label,
    call_row,
    caller_fact_row,
    compaction_row,
    fact_row,
    message_row,
    to_call,
    to_compaction,
    to_fact,
    to_message,
)
from pipecat_summarizer.store.base import (
    SCHEMA_VERSION,
    MemoryStore,
    StoreError,
    check_count,
    check_retention_days,
    check_store_tables,
    check_store_version,
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
    not_forgotten,
    user_hash,
)

T = TypeVar("T")

#: An any-word search ranks its rarest words while their matches stay within this many
#: messages (see ``SQLiteMemoryStore._rarest``), and of those the latest this many first:
#: BM25 over every match of a common word costs ~20 ms at 100k archived messages.
RANK_MATCHES = 3000
#: How long a common word's document count (at least ``DF_CACHE_MIN``) is reused.
DF_TTL_S = 60.0
DF_CACHE_MIN = 200
#: The longest wait for another process's lock a store accepts (an hour).
MAX_BUSY_TIMEOUT_S = 3600.0
#: The page cache of the store's connection (KiB; SQLite's default is 2 MB).
CACHE_KIB = 65536

#: Full-text rowids (schema v2): ``scope << ID_BITS | messages.id``, where ``scope`` is a hash
#: of the caller (of the call when there is no caller). A caller's messages are one rowid
#: range, which FTS5 seeks inside its index: their search ranks only their own matches.
SCOPE_BITS = 23
ID_BITS = 40
_ID_MASK = (1 << ID_BITS) - 1


def scope_of(user_id: str | None, call_id: str) -> int:
    """The full-text scope of a message: a hash of its caller, or of its call when it has
    none. Two callers may share a scope (the search filters on the exact caller too)."""
    key = f"u:{user_id}" if user_id is not None else f"c:{call_id}"
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - SCOPE_BITS)


def scope_range(scope: int) -> tuple[int, int]:
    """The full-text rowids of a scope's messages (inclusive bounds)."""
    return scope << ID_BITS, (scope << ID_BITS) | _ID_MASK


#: The tables (and views) of a SQLite memory store: anything else is another application's.
STORE_TABLES = frozenset(
    {
        "schema_version",
        "calls",
        "messages",
        "compactions",
        "facts",
        "messages_fts_source",
        "caller_facts",
        "forgotten",
    }
)

# version -> statements; applied in order inside one write transaction
MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE calls(
            call_id TEXT PRIMARY KEY, user_id TEXT, started_at REAL NOT NULL,
            ended_at REAL, ended_by TEXT, summary TEXT, facts TEXT NOT NULL DEFAULT '[]',
            messages_in_context INTEGER NOT NULL DEFAULT 0,
            messages_archived INTEGER NOT NULL DEFAULT 0,
            compactions INTEGER NOT NULL DEFAULT 0, turns INTEGER NOT NULL DEFAULT 0,
            resumed INTEGER NOT NULL DEFAULT 0)""",
        "CREATE INDEX calls_user ON calls(user_id, started_at)",
        """CREATE TABLE messages(
            id INTEGER PRIMARY KEY, call_id TEXT NOT NULL, user_id TEXT,
            position INTEGER NOT NULL, turn INTEGER NOT NULL, at REAL NOT NULL,
            role TEXT NOT NULL, content TEXT NOT NULL, message_json TEXT NOT NULL,
            tool_call_ids TEXT NOT NULL DEFAULT '[]', removed_by TEXT NOT NULL,
            compaction INTEGER, evicted_turn INTEGER, UNIQUE(call_id, position))""",
        "CREATE INDEX messages_user ON messages(user_id, at)",
        "CREATE INDEX messages_at ON messages(at)",
        # external-content FTS5 index over messages.content, kept in step by triggers
        """CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages',
            content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')""",
        """CREATE TRIGGER messages_ai AFTER INSERT ON messages BEGIN
            INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content); END""",
        """CREATE TRIGGER messages_ad AFTER DELETE ON messages BEGIN
            INSERT INTO messages_fts(messages_fts, rowid, content)
            VALUES ('delete', old.id, old.content); END""",
        """CREATE TRIGGER messages_au AFTER UPDATE OF content ON messages BEGIN
            INSERT INTO messages_fts(messages_fts, rowid, content)
            VALUES ('delete', old.id, old.content);
            INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content); END""",
        """CREATE TABLE compactions(
            call_id TEXT NOT NULL, attempt INTEGER NOT NULL, compaction INTEGER,
            ok INTEGER NOT NULL, reason TEXT NOT NULL, turn INTEGER NOT NULL, at REAL NOT NULL,
            messages_before INTEGER, messages_after INTEGER, messages_summarized INTEGER,
            tokens_before INTEGER, tokens_after INTEGER, summary TEXT, summary_sha256 TEXT,
            latency_s REAL, model TEXT, error TEXT, user_id TEXT,
            PRIMARY KEY(call_id, attempt))""",
        "CREATE INDEX compactions_user ON compactions(user_id, at)",
        """CREATE TABLE facts(
            call_id TEXT NOT NULL, seq INTEGER NOT NULL, user_id TEXT, key TEXT NOT NULL,
            action TEXT NOT NULL, text TEXT NOT NULL, fact_kind TEXT NOT NULL,
            source TEXT NOT NULL, actor TEXT NOT NULL, turn INTEGER NOT NULL,
            at REAL NOT NULL, PRIMARY KEY(call_id, seq))""",
        "CREATE INDEX facts_user ON facts(user_id, at)",
    ],
    # the scope (caller, or call) in the full-text rowid: see SCOPE_BITS
    2: [
        "ALTER TABLE messages ADD COLUMN scope INTEGER NOT NULL DEFAULT 0",
        "UPDATE messages SET scope = pcs_scope(user_id, call_id)",
        "DROP TRIGGER messages_ai",
        "DROP TRIGGER messages_ad",
        "DROP TRIGGER messages_au",
        "DROP TABLE messages_fts",
        # what the index holds, by full-text rowid (FTS5 reads it to rebuild)
        f"""CREATE VIEW messages_fts_source AS
            SELECT (scope << {ID_BITS}) | id AS fts_rowid, content FROM messages""",
        """CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages_fts_source',
            content_rowid='fts_rowid', tokenize='porter unicode61 remove_diacritics 2')""",
        "INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')",
        f"""CREATE TRIGGER messages_ai AFTER INSERT ON messages BEGIN
            SELECT RAISE(ABORT, 'message id out of the full-text range')
            WHERE new.id > {_ID_MASK} OR new.scope NOT BETWEEN 0 AND {(1 << SCOPE_BITS) - 1};
            INSERT INTO messages_fts(rowid, content)
            VALUES ((new.scope << {ID_BITS}) | new.id, new.content); END""",
        f"""CREATE TRIGGER messages_ad AFTER DELETE ON messages BEGIN
            INSERT INTO messages_fts(messages_fts, rowid, content)
            VALUES ('delete', (old.scope << {ID_BITS}) | old.id, old.content); END""",
        f"""CREATE TRIGGER messages_au AFTER UPDATE OF content, scope ON messages BEGIN
            INSERT INTO messages_fts(messages_fts, rowid, content)
            VALUES ('delete', (old.scope << {ID_BITS}) | old.id, old.content);
            INSERT INTO messages_fts(rowid, content)
            VALUES ((new.scope << {ID_BITS}) | new.id, new.content); END""",
    ],
    3: [],  # v3 changes PostgreSQL's index only
    # v4: a call's row is a session's (its key unique per CallRecorder) and the application's
    # id is its label, so a reused id never merges two callers; each caller's current facts
    # in a table of their own (a returning caller's memory reads those, not the whole
    # history); and the forget tombstones (hashes of the forgotten ids: see ``forget``)
    4: [
        "ALTER TABLE calls ADD COLUMN label TEXT",
        "UPDATE calls SET label = call_id",
        "CREATE INDEX calls_label ON calls(label, started_at)",
        """CREATE TABLE caller_facts(
            user_id TEXT NOT NULL, key TEXT NOT NULL, action TEXT NOT NULL,
            text TEXT NOT NULL, fact_kind TEXT NOT NULL, source TEXT NOT NULL,
            at REAL NOT NULL, call_id TEXT NOT NULL, seq INTEGER NOT NULL,
            PRIMARY KEY(user_id, key))""",
        """INSERT INTO caller_facts SELECT user_id, key, action, text, fact_kind, source, at,
            call_id, seq FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY user_id, key
            ORDER BY at DESC, seq DESC) AS n FROM facts WHERE user_id IS NOT NULL) WHERE n = 1""",
        "CREATE TABLE forgotten(user_hash TEXT PRIMARY KEY, at REAL NOT NULL)",
    ],
}

_INSERT_MESSAGE = """INSERT INTO messages(call_id, user_id, position, turn, at, role, content,
    message_json, tool_call_ids, removed_by, compaction, evicted_turn, scope)
    VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)
    ON CONFLICT(call_id, position) DO UPDATE SET removed_by=excluded.removed_by,
    compaction=COALESCE(excluded.compaction, messages.compaction)"""
_INSERT_COMPACTION = """INSERT OR REPLACE INTO compactions VALUES
    (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"""
_INSERT_FACT = "INSERT OR REPLACE INTO facts VALUES (?,?,?,?,?,?,?,?,?,?,?)"
_CALLER_FACT = """INSERT INTO caller_facts VALUES (?,?,?,?,?,?,?,?,?)
    ON CONFLICT(user_id, key) DO UPDATE SET action=excluded.action, text=excluded.text,
    fact_kind=excluded.fact_kind, source=excluded.source, at=excluded.at,
    call_id=excluded.call_id, seq=excluded.seq
    WHERE excluded.at > caller_facts.at
    OR (excluded.at = caller_facts.at AND excluded.seq >= caller_facts.seq)"""
_START_CALL = """INSERT INTO calls(call_id, user_id, started_at, resumed, label)
    VALUES (?,?,?,?,?)
    ON CONFLICT(call_id) DO UPDATE SET user_id=COALESCE(excluded.user_id, calls.user_id),
    resumed=MAX(excluded.resumed, calls.resumed)"""
_END_CALL = """INSERT INTO calls(call_id, user_id, started_at, ended_at, ended_by, summary, facts,
    messages_in_context, messages_archived, compactions, turns, resumed, label)
    VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)
    ON CONFLICT(call_id) DO UPDATE SET user_id=COALESCE(excluded.user_id, calls.user_id),
    ended_at=excluded.ended_at, ended_by=excluded.ended_by, summary=excluded.summary,
    facts=excluded.facts, messages_in_context=excluded.messages_in_context,
    messages_archived=excluded.messages_archived, compactions=excluded.compactions,
    turns=excluded.turns, resumed=MAX(excluded.resumed, calls.resumed)"""


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back the transaction if it is still open: SQLite rolls it back itself on some
    errors (a full disk, an I/O error), and a ROLLBACK then would raise "no transaction is
    active" in place of the error that says why."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def session_key(conn: sqlite3.Connection, call_id: str) -> str:
    """What a ``call_id`` argument names: a session's key, or else the newest session
    recorded under that application id (label), or else the key itself."""
    row = conn.execute("SELECT call_id FROM calls WHERE call_id = ?", (call_id,)).fetchone()
    if row is None:
        row = conn.execute(
            "SELECT call_id FROM calls WHERE label = ? ORDER BY started_at DESC LIMIT 1",
            (call_id,),
        ).fetchone()
    return row[0] if row else call_id


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
        self._conn: sqlite3.Connection | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._open_lock = threading.Lock()
        # (scope bounds, word) -> (messages matching, when)
        self._df: dict[tuple[tuple[int, int], str], tuple[int, float]] = {}

    def __repr__(self) -> str:
        """``SQLiteMemoryStore('path')``."""
        return f"SQLiteMemoryStore({str(self.path) if self.path else ':memory:'!r})"

    # -- thread plumbing ------------------------------------------------------------------

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._executor is None:
            with self._open_lock:
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(1, thread_name_prefix="sqlite-store")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._call, fn)

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._conn is None:
            self._conn = self._connect()
        return fn(self._conn)

    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            return self._connect_read_only()
        target = str(self.path) if self.path else ":memory:"
        if self.path is not None and not self.path.parent.exists():
            raise StoreError(f"store path {target!r}: folder does not exist")
        conn = sqlite3.connect(target, timeout=self.busy_timeout_s, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
            if self.path is not None:
                conn.execute("PRAGMA journal_mode=WAL")
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
            self._migrate(conn)
            if self.retention_days:
                self._purge(conn, self.retention_days)
        except Exception:
            conn.close()
            raise
        return conn

    def _connect_read_only(self) -> sqlite3.Connection:
        """The file as it is: ``mode=ro`` (never created), no journal-mode switch, no
        migration; refused unless it is a memory store of a version this code knows."""
        assert self.path is not None
        if not self.path.is_file():
            raise StoreError(f"store path {str(self.path)!r}: no such file")
        uri = "file:" + urllib.parse.quote(str(self.path.resolve())) + "?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=self.busy_timeout_s, isolation_level=None)
        except sqlite3.Error as e:
            raise StoreError(f"store path {str(self.path)!r}: cannot open ({e})") from e
        try:
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
            conn.execute("PRAGMA query_only=ON")
            try:
                names = {
                    r[0]
                    for r in conn.execute(
                        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
                    )
                }
            except sqlite3.DatabaseError as e:  # not a database at all
                raise StoreError(f"store path {str(self.path)!r}: not a memory store ({e})") from e
            check_store_tables(str(self.path), names, STORE_TABLES)
            version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
            check_store_version(str(self.path), version)
        except BaseException:
            conn.close()
            raise
        return conn

    def _refuse_write(self) -> None:
        if self.read_only:
            raise StoreError("this store was opened read-only")

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version(version INTEGER NOT NULL)")
        version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] or 0
        if version >= SCHEMA_VERSION:
            if version > SCHEMA_VERSION:
                raise StoreError(f"database schema v{version} is newer than this code's")
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            # another process may have migrated while we waited for the lock
            version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] or 0
            for v in sorted(MIGRATIONS):
                if v > version:
                    for statement in MIGRATIONS[v]:
                        conn.execute(statement)
                    conn.execute("INSERT INTO schema_version VALUES (?)", (v,))
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    # -- the interface --------------------------------------------------------------------

    async def open(self) -> None:
        """Open the database and create or migrate its schema (idempotent)."""
        await self._run(lambda conn: None)

    async def close(self) -> None:
        """Close the connection and its thread. An in-memory database is gone afterwards."""
        executor, self._executor = self._executor, None
        if executor is None:
            return

        def _close(conn_holder=self) -> None:
            if conn_holder._conn is not None:
                conn_holder._conn.close()
                conn_holder._conn = None

        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(executor, _close)
        finally:
            executor.shutdown(wait=False)

    async def write(self, records: Sequence[Record]) -> None:
        """Write ``records`` in one transaction."""
        self._refuse_write()
        records = list(records)
        if records:
            await self._run(lambda conn: self._write(conn, records))

    @staticmethod
    def _write(conn: sqlite3.Connection, records: list[Record]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            records = SQLiteMemoryStore._after_forget(conn, records)
            for r in records:
                if isinstance(r, ArchivedMessage):
                    scope = scope_of(r.user_id, r.call_id)
                    conn.execute(_INSERT_MESSAGE, (*message_row(r), scope))
                elif isinstance(r, CompactionRecord):
                    conn.execute(_INSERT_COMPACTION, compaction_row(r))
                elif isinstance(r, FactEvent):
                    conn.execute(_INSERT_FACT, fact_row(r))
                    if r.user_id is not None:
                        conn.execute(_CALLER_FACT, caller_fact_row(r))
                elif isinstance(r, CallRecord):
                    if r.ended_at is None:
                        conn.execute(
                            _START_CALL,
                            (r.call_id, r.user_id, r.started_at, r.resumed, call_label(r)),
                        )
                    else:
                        conn.execute(_END_CALL, call_row(r))
                else:
                    raise TypeError(f"not a store record: {type(r).__name__}")
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    @staticmethod
    def _after_forget(conn: sqlite3.Connection, records: list[Record]) -> list[Record]:
        """The batch without the records of forgotten callers' sessions that started before
        the forget (inside the write transaction: a forget cannot slip in between)."""
        users = {r.user_id for r in records if r.user_id is not None}
        if not users:
            return records
        hashes = {user_hash(u): u for u in users}
        marks = ",".join("?" * len(hashes))
        tombstones = {
            hashes[h]: at
            for h, at in conn.execute(
                f"SELECT user_hash, at FROM forgotten WHERE user_hash IN ({marks})", list(hashes)
            )
        }
        if not tombstones:
            return records
        sessions = list({r.call_id for r in records if r.user_id in tombstones})
        started = dict(
            conn.execute(
                f"SELECT call_id, started_at FROM calls WHERE call_id IN "
                f"({','.join('?' * len(sessions))})",
                sessions,
            ).fetchall()
        )
        kept = not_forgotten(records, tombstones, started)
        if len(kept) < len(records):
            logger.info(
                f"memory store: {len(records) - len(kept)} records of a forgotten caller's "
                "earlier session refused"
            )
        return kept

    async def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        return await self._run(lambda conn: conn.execute(sql, tuple(params)).fetchall())

    async def calls(self, user_id: str | None = None, *, limit: int = 50) -> list[CallRecord]:
        """Calls newest first: all of ``user_id``'s, or the most recent of any caller."""
        limit = check_count("limit", limit)
        if user_id is not None:
            check_user_id(user_id)
        where, params = ("WHERE user_id = ?", [user_id]) if user_id is not None else ("", [])
        rows = await self._query(
            f"SELECT {CALL_COLS} FROM calls {where} ORDER BY started_at DESC LIMIT ?",
            [*params, int(limit)],
        )
        return [to_call(r) for r in rows]

    async def call(self, call_id: str) -> CallRecord | None:
        """One call's row (a session's key, or the newest session of an application's
        call id), or ``None``."""

        def read(conn: sqlite3.Connection) -> list[tuple]:
            key = session_key(conn, call_id)
            return conn.execute(
                f"SELECT {CALL_COLS} FROM calls WHERE call_id = ?", (key,)
            ).fetchall()

        rows = await self._run(read)
        return to_call(rows[0]) if rows else None

    async def compactions(self, call_id: str) -> list[CompactionRecord]:
        """A call's summary attempts, in order."""
        rows = await self._keyed(
            f"SELECT {COMPACTION_COLS} FROM compactions WHERE call_id = ? ORDER BY attempt",
            call_id,
        )
        return [to_compaction(r) for r in rows]

    async def _keyed(self, sql: str, call_id: str, params: Sequence[Any] = ()) -> list[tuple]:
        """``sql`` with the session ``call_id`` names as its first parameter."""
        return await self._run(
            lambda conn: conn.execute(sql, (session_key(conn, call_id), *params)).fetchall()
        )

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

        def read(conn: sqlite3.Connection) -> list[ArchivedMessage]:
            # converted on the store's thread: hundreds of rows cost the loop milliseconds
            rows = conn.execute(sql, (session_key(conn, call_id), *params)).fetchall()
            return [to_message(r) for r in rows]

        return await self._run(read)

    async def message(self, call_id: str, position: int) -> ArchivedMessage | None:
        """One archived message, or ``None``."""
        rows = await self._keyed(
            f"SELECT {MESSAGE_COLS} FROM messages WHERE call_id = ? AND position = ?",
            call_id,
            [int(position)],
        )
        return to_message(rows[0]) if rows else None

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
                for row in rows:
                    m = to_message(row)
                    found[(m.call_id, m.position)] = m
            return [found.get(key) for key in wanted]

        return await self._run(read)

    async def fact_history(
        self, *, call_id: str | None = None, user_id: str | None = None
    ) -> list[FactEvent]:
        """Pinned-fact changes of a call or of a caller, oldest first."""
        if call_id is None and user_id is None:
            raise ValueError("fact_history needs call_id or user_id")
        if call_id is not None:
            rows = await self._keyed(
                f"SELECT {FACT_COLS} FROM facts WHERE call_id = ? ORDER BY at, call_id, seq",
                call_id,
            )
        else:
            rows = await self._query(
                f"SELECT {FACT_COLS} FROM facts WHERE user_id = ? ORDER BY at, call_id, seq",
                [user_id],
            )
        return [to_fact(r) for r in rows]

    async def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        call_id: str | None = None,
        limit: int = 10,
        any_word: bool = False,
    ) -> list[SearchHit]:
        """FTS5 search of archived messages, ranked by BM25 (best first)."""
        words = query_words(query)
        limit = int(limit)
        if not words or limit <= 0:
            return []

        def find(conn: sqlite3.Connection) -> list[tuple]:
            call = None if call_id is None else session_key(conn, call_id)
            return self._find(conn, words, user_id, call, limit, any_word)

        return [SearchHit(*r) for r in await self._run(find)]

    def _find(
        self,
        conn: sqlite3.Connection,
        words: list[str],
        user_id: str | None,
        call_id: str | None,
        limit: int,
        any_word: bool,
    ) -> list[tuple]:
        """The search in the store's thread (``call_id`` already a session key)."""
        bounds = self._bounds(conn, user_id, call_id)
        if bounds is None:
            return []  # a call with no archived messages
        ranked = self._rarest(conn, words, bounds) if any_word else words
        if not ranked:
            return []
        # every word quoted: FTS5 operators in the caller's words are just words
        match = (" OR " if any_word else " ").join(f'"{w}"' for w in ranked)
        lo, hi = bounds
        if any_word:
            # even the rarest word may match thousands: rank its latest RANK_MATCHES
            # matches in the scope (a rowid range is cheap for FTS5); all of them only if
            # that window holds too few of this caller's
            edge = conn.execute(
                "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? "
                "AND rowid BETWEEN ? AND ? ORDER BY rowid DESC LIMIT 1 OFFSET ?",
                (match, lo, hi, RANK_MATCHES),
            ).fetchone()
            if edge is not None:
                rows = self._ranked(conn, match, (edge[0] + 1, hi), user_id, call_id, limit)
                if len(rows) >= limit:
                    return rows
        return self._ranked(conn, match, bounds, user_id, call_id, limit)

    @staticmethod
    def _bounds(
        conn: sqlite3.Connection, user_id: str | None, call_id: str | None
    ) -> tuple[int, int] | None:
        """The full-text rowids a search may match: the caller's scope, the call's (the
        scope of its caller, or of the call itself when it has none), or all of them.
        ``None`` when the call has no archived messages."""
        if user_id is not None:
            return scope_range(scope_of(user_id, ""))
        if call_id is not None:
            scopes = conn.execute(
                "SELECT DISTINCT scope FROM messages WHERE call_id = ? LIMIT 2", (call_id,)
            ).fetchall()
            if not scopes:
                return None
            if len(scopes) == 1:
                return scope_range(scopes[0][0])
        return 0, (1 << (SCOPE_BITS + ID_BITS)) - 1

    @staticmethod
    def _ranked(
        conn: sqlite3.Connection,
        match: str,
        bounds: tuple[int, int],
        user_id: str | None,
        call_id: str | None,
        limit: int,
    ) -> list[tuple]:
        """The best ``limit`` matches of ``match`` in ``bounds`` that belong to the caller
        (and call). BM25 ranks the index alone, and only the best rows are read: the rest
        of a message (its text) is never sorted. Ties go to the latest message."""
        where = ""
        params: list[str | int] = []
        if user_id is not None:
            where += " AND m.user_id = ?"
            params.append(user_id)
        if call_id is not None:
            where += " AND m.call_id = ?"
            params.append(call_id)
        columns = (
            "m.call_id, m.position, m.turn, m.at, m.role, m.content, m.removed_by, "
            "-f.score, m.user_id"
        )
        ranked = (
            "SELECT rowid AS id, bm25(messages_fts) AS score FROM messages_fts "
            "WHERE messages_fts MATCH ? AND rowid BETWEEN ? AND ?"
        )
        rows = conn.execute(
            f"SELECT {columns}, f.id FROM ({ranked} ORDER BY score, rowid DESC LIMIT ?) f "
            f"JOIN messages m ON m.id = (f.id & {_ID_MASK}) WHERE 1{where} "
            "ORDER BY f.score, f.id DESC",
            (match, *bounds, limit, *params),
        ).fetchall()
        if len(rows) < limit and conn.execute(
            "SELECT count(*) FROM (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? "
            "AND rowid BETWEEN ? AND ? LIMIT ?)",
            (match, *bounds, limit),
        ).fetchone()[0] > len(rows):
            # the scope holds others' matches (a shared scope, or a call of a caller): the
            # filter goes inside the ranking
            rows = conn.execute(
                f"SELECT {columns}, f.id FROM ({ranked}) f "
                f"JOIN messages m ON m.id = (f.id & {_ID_MASK}) WHERE 1{where} "
                "ORDER BY f.score, f.id DESC LIMIT ?",
                (match, *bounds, *params, limit),
            ).fetchall()
        return [r[:-1] for r in rows]

    def _rarest(
        self, conn: sqlite3.Connection, words: Sequence[str], bounds: tuple[int, int]
    ) -> list[str]:
        """The words an any-word search ranks: the rarest in the scope's messages first,
        while their matches stay within ``RANK_MATCHES`` (always the rarest one). A word in
        thousands of messages (the speakers' names, "today") weighs almost nothing in BM25,
        but scoring every message it matches is what made a search at 100k archived
        messages slow. Counts of common words are cached for ``DF_TTL_S`` (they only drift
        as the archive grows)."""
        now = time.monotonic()
        cache = self._df
        if len(cache) > 20_000:
            cache.clear()
        counted = []
        for w in dict.fromkeys(words):
            n, at = cache.get((bounds, w), (0, -DF_TTL_S))
            if now - at >= DF_TTL_S:
                n = conn.execute(
                    "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ? "
                    "AND rowid BETWEEN ? AND ?",
                    (f'"{w}"', *bounds),
                ).fetchone()[0]
                if n >= DF_CACHE_MIN:  # a rare word is cheap to count, and may be new
                    cache[(bounds, w)] = (n, now)
            if n:
                counted.append((n, w))
        kept: list[str] = []
        total = 0
        for n, w in sorted(counted):
            if kept and total + n > RANK_MATCHES:
                break
            kept.append(w)
            total += n
        return kept

    async def forgotten_at(self, user_id: str) -> float | None:
        """When ``user_id`` was last forgotten (the tombstone's time), or ``None``."""
        check_user_id(user_id)
        rows = await self._query(
            "SELECT at FROM forgotten WHERE user_hash = ?", (user_hash(user_id),)
        )
        return float(rows[0][0]) if rows else None

    async def caller_memory(self, user_id: str, *, max_calls: int = 5) -> CallerMemory:
        """The caller's current pinned facts and their latest calls' summaries."""
        check_user_id(user_id)
        max_calls = check_count("max_calls", max_calls)

        def read(conn: sqlite3.Connection) -> CallerMemory:
            # the caller's current state of each key (kept by every write), oldest first
            facts = [
                {"key": k, "text": t, "kind": kd, "source": s}
                for k, a, t, kd, s in conn.execute(
                    "SELECT key, action, text, fact_kind, source FROM caller_facts"
                    " WHERE user_id = ? ORDER BY at, seq",
                    (user_id,),
                )
                if a != "unpinned"
            ]
            rows = conn.execute(
                "SELECT COALESCE(ended_at, started_at), COALESCE(summary, (SELECT summary FROM"
                " compactions c WHERE c.call_id = calls.call_id AND c.ok"
                " ORDER BY attempt DESC LIMIT 1)), resumed FROM calls WHERE user_id = ?"
                " ORDER BY started_at DESC LIMIT ?",
                (user_id, int(max_calls)),
            ).fetchall()
            summaries = [(at, text, bool(resumed)) for at, text, resumed in rows if text]
            return CallerMemory(user_id, facts, summaries, len(rows))

        return await self._run(read)

    async def forget(self, user_id: str) -> int:
        """Delete every record of ``user_id`` in every table, and leave a tombstone (a hash
        of the id, and the time) so that no session of theirs that started before now writes
        anything again, in this process or another. Nothing of their words stays in the
        files: deleted content is zeroed (``secure_delete``), the full-text index is merged
        without their tokens (FTS5 ``optimize``) and the WAL is checkpointed and truncated
        (if another connection holds a read snapshot, the WAL is truncated at the next
        checkpoint; a WARNING says so)."""
        if not isinstance(user_id, str) or not user_id:
            raise ValueError("forget needs a non-empty user_id")
        self._refuse_write()
        self._forgotten_now(user_id)  # a live call of this process stops at once

        def delete(conn: sqlite3.Connection) -> int:
            conn.execute("BEGIN IMMEDIATE")
            try:
                n = 0
                for table in ("messages", "compactions", "facts"):
                    n += conn.execute(
                        f"DELETE FROM {table} WHERE user_id = ? OR call_id IN "
                        "(SELECT call_id FROM calls WHERE user_id = ?)",
                        (user_id, user_id),
                    ).rowcount
                n += conn.execute("DELETE FROM calls WHERE user_id = ?", (user_id,)).rowcount
                conn.execute("DELETE FROM caller_facts WHERE user_id = ?", (user_id,))
                conn.execute(
                    "INSERT INTO forgotten VALUES (?, ?) ON CONFLICT(user_hash) "
                    "DO UPDATE SET at = excluded.at",
                    (user_hash(user_id), time.time()),
                )
                # the index's segments still hold the deleted tokens: merge them away
                conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')")
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
            if self.path is not None:
                busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                if busy:
                    logger.warning(
                        "memory store: forget could not truncate the WAL now (another "
                        "connection is reading); the forgotten text leaves it at the next "
                        "checkpoint"
                    )
            return n

        return await self._run(delete)

    async def purge_older_than(self, days: float) -> int:
        """Delete records older than ``days`` days."""
        if isinstance(days, bool) or not days >= 0:
            raise ValueError("days must be a non-negative number")
        self._refuse_write()
        return await self._run(lambda conn: self._purge(conn, days))

    @staticmethod
    def _purge(conn: sqlite3.Connection, days: float) -> int:
        cutoff = time.time() - days * 86400
        conn.execute("BEGIN IMMEDIATE")
        try:
            n = 0
            for table in ("messages", "compactions", "facts"):
                n += conn.execute(f"DELETE FROM {table} WHERE at < ?", (cutoff,)).rowcount
            n += conn.execute(
                "DELETE FROM calls WHERE COALESCE(ended_at, started_at) < ?", (cutoff,)
            ).rowcount
            conn.execute("DELETE FROM caller_facts WHERE at < ?", (cutoff,))
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        return n

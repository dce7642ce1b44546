"""The SQLite store's schema: its tables, their migrations, and the full-text index's rowids.

Schema v2 puts the caller's scope in each full-text rowid (see ``SCOPE_BITS``), so a
caller's search reads only their own range of the FTS5 index.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
import urllib.parse
from pathlib import Path

from pipecat_summarizer.store.base import (
    SCHEMA_VERSION,
    StoreError,
    check_store_tables,
    check_store_version,
)

#: Full-text rowids (schema v2): ``scope << ID_BITS | messages.id``, where ``scope`` is a hash
#: of the caller (of the call when there is no caller). A caller's messages are one rowid
#: range, which FTS5 seeks inside its index: their search ranks only their own matches.
SCOPE_BITS = 23
ID_BITS = 40
ID_MASK = (1 << ID_BITS) - 1


def scope_of(user_id: str | None, call_id: str) -> int:
    """The full-text scope of a message: a hash of its caller, or of its call when it has
    none. Two callers may share a scope (the search filters on the exact caller too)."""
    key = f"u:{user_id}" if user_id is not None else f"c:{call_id}"
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - SCOPE_BITS)


def scope_range(scope: int) -> tuple[int, int]:
    """The full-text rowids of a scope's messages (inclusive bounds)."""
    return scope << ID_BITS, (scope << ID_BITS) | ID_MASK


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
        "forget_pending",
        "removals",
    }
)

# version -> statements; applied in order inside one write transaction
#: A removal's bump of ``removals`` (schema v8). A row an operator deleted (S13-A-4) comes
#: back at a random value below 2**40, not at 1: a count kept at the value the row had
#: before the delete is not found again by chance (and a search that reads no row reuses
#: no count: ``_sqlite_search.word_counts``).
_BUMP = (
    "INSERT INTO removals VALUES (1, random() & 1099511627775) "
    "ON CONFLICT(id) DO UPDATE SET n = n + 1"
)

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
            WHERE new.id > {ID_MASK} OR new.scope NOT BETWEEN 0 AND {(1 << SCOPE_BITS) - 1};
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
    5: [],  # v5 adds PostgreSQL's caller word index only
    6: [],  # v6 keeps PostgreSQL's word index through TRUNCATE
    # v7: the forgets whose deletes are still to be done (see ``_sqlite_forget``)
    7: ["CREATE TABLE forget_pending(user_id TEXT PRIMARY KEY, at REAL NOT NULL)"],
    # v8: the messages deleted so far (a purge's, a forget's, anyone's), counted in the
    # deleting transaction: a word count a search keeps stands while this is unchanged
    # (``_sqlite_search.word_counts``). An UPDATE of what the search counts (an operator's
    # redaction of content, a move to another caller: S13-A-1) counts as a removal too; the
    # writes' upsert sets none of these columns, and never fires it
    8: [
        "CREATE TABLE removals(id INTEGER PRIMARY KEY, n INTEGER NOT NULL)",
        "INSERT INTO removals VALUES (1, 0)",
        f"""CREATE TRIGGER messages_removed AFTER DELETE ON messages BEGIN
            {_BUMP}; END""",
        f"""CREATE TRIGGER messages_changed AFTER UPDATE OF content, scope, user_id, at
            ON messages WHEN old.content IS NOT new.content OR old.scope IS NOT new.scope
                OR old.user_id IS NOT new.user_id OR old.at IS NOT new.at
            BEGIN {_BUMP}; END""",
    ],
    9: [],  # v9 changes PostgreSQL's word index triggers and its fold of removals only
}


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


def rollback(conn: sqlite3.Connection) -> None:
    """Roll back the transaction if it is still open: SQLite rolls it back itself on some
    errors (a full disk, an I/O error), and a ROLLBACK then would raise "no transaction is
    active" in place of the error that says why."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def into_wal(conn: sqlite3.Connection, busy_timeout_s: float) -> None:
    """``PRAGMA journal_mode=WAL``, waiting up to ``busy_timeout_s`` for another writer.

    Turning a rollback-journal file into WAL upgrades a read to a write, which SQLite
    refuses at once (SQLITE_BUSY) rather than through the busy handler: of three workers
    opening such a file together, one failed its opening
    (tests/store/test_s18_wal_conversion_waits.py)."""
    deadline = time.monotonic() + busy_timeout_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            left = deadline - time.monotonic()
            busy = getattr(e, "sqlite_errorcode", -1) & 0xFF == sqlite3.SQLITE_BUSY
            if not busy or left <= 0:
                raise
            time.sleep(min(0.02, left))


def migrate(conn: sqlite3.Connection) -> None:
    """Create the schema, or bring it to ``SCHEMA_VERSION`` (one write transaction)."""
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
        rollback(conn)
        raise


def open_read_only(
    path: Path, busy_timeout_s: float, frozen: list[FileStamp | None] | None = None
) -> sqlite3.Connection:
    """The file as it is: ``mode=ro`` (never created), no journal-mode switch, no
    migration; refused unless it is a memory store of a version this code knows.

    ``frozen`` (a one-item list) gets the file's :class:`FileStamp` when it is opened as
    immutable (a read-only folder), else ``None``: SQLite then never looks at the file
    again for changes, and the store must (:meth:`FileStamp.changed`).

    Raises:
        StoreError: If it is missing, cannot be opened, or is not such a store.
    """
    if frozen is not None:
        frozen[0] = None
    if not path.is_file():
        raise StoreError(f"store path {str(path)!r}: no such file")
    try:
        return _checked_read_only(path, busy_timeout_s, immutable=False)
    except StoreError as e:
        if not _unwritable_folder(path, e):
            raise
    # A WAL-mode file needs its -shm beside it, which a read-only folder (a backup on
    # read-only media) cannot hold. Closed cleanly (no -wal left), the file alone is the
    # whole store: read it as immutable, which needs no -shm.
    for _ in range(IMMUTABLE_TRIES):
        stamp = FileStamp.of(path)  # before any page is read
        if stamp is None and not path.is_file():
            raise StoreError(f"store path {str(path)!r}: no such file")
        if stamp is None:
            raise StoreError(
                f"store path {str(path)!r}: its folder is not writable and the store was not "
                "closed cleanly (a -wal file is beside it): copy the files to a writable folder"
            )
        conn = _checked_read_only(path, busy_timeout_s, immutable=True)
        if not stamp.changed():
            if frozen is not None:
                frozen[0] = stamp
            return conn
        conn.close()  # written while it was checked: its pages may be of two versions
    raise StoreError(
        f"store path {str(path)!r}: its folder is not writable and the file keeps changing "
        "(another process writes it): copy the files to a writable folder"
    )


#: The openings as immutable tried while the file changes under them.
IMMUTABLE_TRIES = 3


class FileStamp:
    """A file opened as immutable, as it was then (S17-A-3): SQLite takes such a file as
    never changing (it takes no lock, never checks its change counter, keeps the pages it
    read in its cache); if another process writes it after all (a live store's folder
    mounted read-only here, a writable copy opened again), the connection would go on
    serving the pages it cached (a forgotten caller's rows after their forget, none of the
    new rows) mixed with pages read from the new file. :meth:`changed` says when that
    connection must not be read any more."""

    __slots__ = ("path", "stat")

    def __init__(self, path: Path, stat: tuple[int, int, int, int]) -> None:
        self.path = path
        self.stat = stat

    @classmethod
    def of(cls, path: Path) -> FileStamp | None:
        """The file's stamp now, or ``None`` if a -wal is beside it (being written)."""
        stat = _stat(path)
        if stat is None or Path(f"{path}-wal").exists():
            return None
        return cls(path, stat)

    def changed(self) -> bool:
        """Whether the file was written since (its identity, size or time changed, or a
        -wal appeared beside it: the writes are there)."""
        return _stat(self.path) != self.stat or Path(f"{self.path}-wal").exists()


def _stat(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _unwritable_folder(path: Path, error: StoreError) -> bool:
    """Whether ``error`` is SQLite unable to open the WAL's files in a read-only folder."""
    cause = error.__cause__
    # the primary code: an extended one (CANTOPEN_*) names the same failure
    cant_open = getattr(cause, "sqlite_errorcode", -1) & 0xFF == sqlite3.SQLITE_CANTOPEN
    return cant_open and not os.access(path.parent, os.W_OK)


def _checked_read_only(path: Path, busy_timeout_s: float, *, immutable: bool) -> sqlite3.Connection:
    """:func:`open_read_only`'s connection (``immutable``: SQLite takes the file as never
    changing, and makes no -shm)."""
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro"
    if immutable:
        uri += "&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout_s, isolation_level=None)
    except sqlite3.Error as e:
        raise StoreError(f"store path {str(path)!r}: cannot open ({e})") from e
    try:
        conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        conn.execute("PRAGMA query_only=ON")
        try:
            names = {
                r[0]
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
                )
            }
        except sqlite3.DatabaseError as e:  # not a database at all
            raise StoreError(f"store path {str(path)!r}: not a memory store ({e})") from e
        check_store_tables(str(path), names, STORE_TABLES)
        version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
        check_store_version(str(path), version)
    except BaseException:
        conn.close()
        raise
    return conn

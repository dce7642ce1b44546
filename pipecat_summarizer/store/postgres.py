"""``PostgresMemoryStore``: the fleet backend, on asyncpg with a connection pool.

Many workers on many machines can write for the same caller: every record has a natural
key and is written with an upsert, and the schema migration takes a transaction-level
advisory lock, so concurrent first uses migrate once. Archived messages carry a generated
``tsvector`` column (GIN-indexed) for ranked full-text search in the configured language.
Install with ``pip install 'pipecat-summarizer[postgres]'``.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

from pipecat_summarizer._validation import check_number
from pipecat_summarizer.store._dsn import mask_dsn
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

_LOCK_KEY = 0x5C_0A_11  # advisory lock for migrations


async def _keep_session(conn) -> None:
    """The pool's reset: nothing to undo (see ``PostgresMemoryStore.open``)."""


_CONFIG = re.compile(r"^[a-z_]+$")

#: What the full-text index holds (schema v2): the message's words plus a lexeme for its
#: caller and one for its call, so a caller's search finds only their own matches in the
#: index. No query word becomes one of these lexemes (they start with ``#``).
SCOPED_TSV = (
    "(tsv || array_to_tsvector(ARRAY['#u' || md5(COALESCE(user_id, '')), '#c' || md5(call_id)]))"
)
#: How much of a message the full-text index holds (schema v4): 100,000 characters are at
#: most 400 kB of UTF-8, whose tsvector stays under PostgreSQL's 1 MB limit.
TSV_CHARS = 100_000
#: A search ranks at most this many of the scope's matches, the latest (as on SQLite): the
#: ranking reads every row it scores.
RANK_MATCHES = 3000


def _migrations(config: str) -> dict[int, list[str]]:
    return {
        1: [
            """CREATE TABLE calls(
                call_id TEXT PRIMARY KEY, user_id TEXT, started_at DOUBLE PRECISION NOT NULL,
                ended_at DOUBLE PRECISION, ended_by TEXT, summary TEXT,
                facts TEXT NOT NULL DEFAULT '[]',
                messages_in_context INTEGER NOT NULL DEFAULT 0,
                messages_archived INTEGER NOT NULL DEFAULT 0,
                compactions INTEGER NOT NULL DEFAULT 0, turns INTEGER NOT NULL DEFAULT 0,
                resumed BOOLEAN NOT NULL DEFAULT FALSE)""",
            "CREATE INDEX calls_user ON calls(user_id, started_at)",
            f"""CREATE TABLE messages(
                id BIGSERIAL PRIMARY KEY, call_id TEXT NOT NULL, user_id TEXT,
                position INTEGER NOT NULL, turn INTEGER NOT NULL, at DOUBLE PRECISION NOT NULL,
                role TEXT NOT NULL, content TEXT NOT NULL, message_json TEXT NOT NULL,
                tool_call_ids TEXT NOT NULL DEFAULT '[]', removed_by TEXT NOT NULL,
                compaction INTEGER, evicted_turn INTEGER,
                tsv tsvector GENERATED ALWAYS AS (to_tsvector('{config}', content)) STORED,
                UNIQUE(call_id, position))""",
            "CREATE INDEX messages_user ON messages(user_id, at)",
            "CREATE INDEX messages_at ON messages(at)",
            "CREATE INDEX messages_tsv ON messages USING GIN(tsv)",
            """CREATE TABLE compactions(
                call_id TEXT NOT NULL, attempt INTEGER NOT NULL, compaction INTEGER,
                ok BOOLEAN NOT NULL, reason TEXT NOT NULL, turn INTEGER NOT NULL,
                at DOUBLE PRECISION NOT NULL, messages_before INTEGER, messages_after INTEGER,
                messages_summarized INTEGER, tokens_before INTEGER, tokens_after INTEGER,
                summary TEXT, summary_sha256 TEXT, latency_s DOUBLE PRECISION, model TEXT,
                error TEXT, user_id TEXT, PRIMARY KEY(call_id, attempt))""",
            "CREATE INDEX compactions_user ON compactions(user_id, at)",
            """CREATE TABLE facts(
                call_id TEXT NOT NULL, seq INTEGER NOT NULL, user_id TEXT, key TEXT NOT NULL,
                action TEXT NOT NULL, text TEXT NOT NULL, fact_kind TEXT NOT NULL,
                source TEXT NOT NULL, actor TEXT NOT NULL, turn INTEGER NOT NULL,
                at DOUBLE PRECISION NOT NULL, PRIMARY KEY(call_id, seq))""",
            "CREATE INDEX facts_user ON facts(user_id, at)",
        ],
        # the caller and the call in the full-text index: see SCOPED_TSV
        2: [
            f"CREATE INDEX IF NOT EXISTS messages_scoped ON messages USING GIN({SCOPED_TSV})",
            "DROP INDEX IF EXISTS messages_tsv",
        ],
        # GIN's fast update parks new entries in a pending list that every search scans
        # whole (and that makes the planner shun the index) until a vacuum merges it: off,
        # so each insert updates the index itself (the writer is off the turn's path). The
        # list is merged once, and the index expression gets its statistics now (a v2
        # database's index was created on a table autovacuum may not analyze for long).
        3: [
            "ALTER INDEX messages_scoped SET (fastupdate = off)",
            "SELECT gin_clean_pending_list('messages_scoped')",
            "ANALYZE messages",
        ],
        # v4: as on SQLite (see sqlite.MIGRATIONS[4])
        4: [
            "ALTER TABLE calls ADD COLUMN label TEXT",
            "UPDATE calls SET label = call_id",
            "CREATE INDEX calls_label ON calls(label, started_at)",
            """CREATE TABLE caller_facts(
                user_id TEXT NOT NULL, key TEXT NOT NULL, action TEXT NOT NULL,
                text TEXT NOT NULL, fact_kind TEXT NOT NULL, source TEXT NOT NULL,
                at DOUBLE PRECISION NOT NULL, call_id TEXT NOT NULL, seq INTEGER NOT NULL)""",
            # a fact's key has no bound (a summary bullet without a topic is keyed by its
            # text): a B-tree entry holds at most about 2.7 kB, so the key is indexed by its
            # digest (a long key failed its insert, and the fact was set aside)
            "CREATE UNIQUE INDEX caller_facts_key ON caller_facts(user_id, md5(key))",
            """INSERT INTO caller_facts SELECT DISTINCT ON (user_id, key) user_id, key, action,
                text, fact_kind, source, at, call_id, seq FROM facts WHERE user_id IS NOT NULL
                ORDER BY user_id, key, at DESC, seq DESC""",
            "CREATE TABLE forgotten(user_hash TEXT PRIMARY KEY, at DOUBLE PRECISION NOT NULL)",
            # the full-text index holds a message's first TSV_CHARS characters: a tsvector
            # is at most 1 MB (a longer tool result failed its insert, and blocked the
            # writer); the message itself is stored whole
            "DROP INDEX IF EXISTS messages_scoped",
            "ALTER TABLE messages DROP COLUMN tsv",
            f"""ALTER TABLE messages ADD COLUMN tsv tsvector GENERATED ALWAYS AS
                (to_tsvector('{config}', left(content, {TSV_CHARS}))) STORED""",
            f"""CREATE INDEX messages_scoped ON messages USING GIN({SCOPED_TSV})
                WITH (fastupdate = off)""",
            "ANALYZE messages",
        ],
    }


_INSERT_MESSAGE = """INSERT INTO messages(call_id, user_id, position, turn, at, role, content,
    message_json, tool_call_ids, removed_by, compaction, evicted_turn)
    VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)
    ON CONFLICT(call_id, position) DO UPDATE SET removed_by=excluded.removed_by,
    compaction=COALESCE(excluded.compaction, messages.compaction)"""
_INSERT_COMPACTION = """INSERT INTO compactions VALUES
    ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18)
    ON CONFLICT(call_id, attempt) DO NOTHING"""
_INSERT_FACT = """INSERT INTO facts VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)
    ON CONFLICT(call_id, seq) DO NOTHING"""
_CALLER_FACT = """INSERT INTO caller_facts VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)
    ON CONFLICT(user_id, md5(key)) DO UPDATE SET action=excluded.action, text=excluded.text,
    fact_kind=excluded.fact_kind, source=excluded.source, at=excluded.at,
    call_id=excluded.call_id, seq=excluded.seq
    WHERE (excluded.at, excluded.seq) >= (caller_facts.at, caller_facts.seq)"""
_START_CALL = """INSERT INTO calls(call_id, user_id, started_at, resumed, label)
    VALUES ($1,$2,$3,$4,$5)
    ON CONFLICT(call_id) DO UPDATE SET user_id=COALESCE(excluded.user_id, calls.user_id),
    resumed=excluded.resumed OR calls.resumed"""
_END_CALL = """INSERT INTO calls(call_id, user_id, started_at, ended_at, ended_by, summary, facts,
    messages_in_context, messages_archived, compactions, turns, resumed, label)
    VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13)
    ON CONFLICT(call_id) DO UPDATE SET user_id=COALESCE(excluded.user_id, calls.user_id),
    ended_at=excluded.ended_at, ended_by=excluded.ended_by, summary=excluded.summary,
    facts=excluded.facts, messages_in_context=excluded.messages_in_context,
    messages_archived=excluded.messages_archived, compactions=excluded.compactions,
    turns=excluded.turns, resumed=excluded.resumed OR calls.resumed"""


def _key(n: int) -> str:
    """SQL naming the session a ``call_id`` argument (``$n``) names: a session's key, or
    else the newest session recorded under that application id (label), or else itself."""
    return (
        f"COALESCE((SELECT call_id FROM calls WHERE call_id = ${n}), (SELECT call_id FROM "
        f"calls WHERE label = ${n} ORDER BY started_at DESC LIMIT 1), ${n})"
    )


class PostgresMemoryStore(MemoryStore):
    """The PostgreSQL backend.

    Args:
        dsn: A ``postgresql://user@host:port/db`` connection string.
        min_size: Connections the pool keeps open.
        max_size: Most connections the pool opens.
        text_search_config: PostgreSQL text-search configuration of the archive (the
            caller's language: ``english``, ``french``, ``simple``...). Fixed when the
            schema is created.
        connect_timeout_s: Timeout for one connection attempt.
        retention_days: If set, records older than this are deleted when the store opens.
        read_only: Read an existing store only (``inspect``): every session is read-only
            (``default_transaction_read_only``), nothing is created, migrated or purged, and
            every write raises :class:`StoreError`. A database that is not a memory store, or
            one of a schema version this code does not know, is refused.

    Raises:
        StoreError: If ``asyncpg`` is not installed (the ``postgres`` extra).
    """

    backend = "postgres"

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 4,
        text_search_config: str = "english",
        connect_timeout_s: float = 5.0,
        retention_days: float | None = None,
        read_only: bool = False,
    ):
        """Configure the store; nothing connects until first use."""
        if not isinstance(dsn, str) or not dsn.startswith(("postgresql://", "postgres://")):
            raise ValueError("dsn must be a postgresql:// connection string")
        if not isinstance(text_search_config, str) or not _CONFIG.match(text_search_config):
            raise ValueError("text_search_config must be a configuration name like 'english'")
        check_number("min_size", min_size, integer=True)
        check_number("max_size", max_size, integer=True)
        if not 1 <= min_size <= max_size:
            raise ValueError("pool sizes must satisfy 1 <= min_size <= max_size")
        check_number("connect_timeout_s", connect_timeout_s)
        if not connect_timeout_s > 0:
            raise ValueError(f"connect_timeout_s must be positive, got {connect_timeout_s!r}")
        check_retention_days(retention_days)
        try:
            import asyncpg  # noqa: F401
        except ImportError as e:
            raise StoreError(
                "PostgresMemoryStore needs asyncpg: pip install 'pipecat-summarizer[postgres]'"
            ) from e
        self.dsn = dsn
        self.min_size, self.max_size = min_size, max_size
        self.text_search_config = text_search_config
        self.connect_timeout_s = connect_timeout_s
        self.retention_days = retention_days
        if not isinstance(read_only, bool):
            raise TypeError(f"read_only must be a bool, got {type(read_only).__name__}")
        self.read_only = read_only
        self._pool: Any = None
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        """The DSN without its password."""
        return f"PostgresMemoryStore({mask_dsn(self.dsn)!r})"

    async def open(self) -> None:
        """Create the pool and migrate the schema (idempotent)."""
        if self._pool is not None:
            return
        import asyncpg

        async with self._lock:
            if self._pool is not None:
                return
            pool = await asyncpg.create_pool(
                self.dsn,
                min_size=self.min_size,
                max_size=self.max_size,
                timeout=self.connect_timeout_s,
                command_timeout=30,
                server_settings={
                    # small per-turn queries: starting parallel workers costs more than it saves
                    "max_parallel_workers_per_gather": "0",
                    # a search planned with its own words (their statistics, the tsquery
                    # folded to a constant), never a cached generic plan: ~0.3 ms to plan,
                    # where a generic plan ran the search 1.5-2.5x slower
                    "plan_cache_mode": "force_custom_plan",
                    **({"default_transaction_read_only": "on"} if self.read_only else {}),
                },
                # the store leaves no session state (no SET, LISTEN, cursor or session
                # lock), so a released connection needs no RESET ALL round trip; asyncpg
                # still rolls back a transaction left open
                reset=_keep_session,
            )
            try:
                async with pool.acquire() as conn:
                    if self.read_only:
                        await self._check_read_only(conn)
                    else:
                        await self._migrate(conn)
                    if self.retention_days and not self.read_only:
                        await self._purge(conn, self.retention_days)
            except BaseException:
                await pool.close()
                raise
            self._pool = pool

    async def _check_read_only(self, conn) -> None:
        """Refuse a database that is not a memory store of this code's version."""
        where = f"database {self._database()!r}"
        names = {
            r[0]
            for r in await conn.fetch(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema()"
            )
        }
        # a PostgreSQL database may hold the application's tables too: only ours must be there
        check_store_tables(where, names, None)
        check_store_version(where, await conn.fetchval("SELECT MAX(version) FROM schema_version"))

    def _database(self) -> str:
        """The database's name (for messages: no host, user or password)."""
        return urllib.parse.urlsplit(self.dsn).path.lstrip("/") or "(default)"

    def _refuse_write(self) -> None:
        if self.read_only:
            raise StoreError("this store was opened read-only")

    async def _migrate(self, conn) -> None:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version(version INTEGER NOT NULL)"
            )
            version = await conn.fetchval("SELECT MAX(version) FROM schema_version") or 0
            if version > SCHEMA_VERSION:
                raise StoreError(f"database schema v{version} is newer than this code's")
            for v, statements in sorted(_migrations(self.text_search_config).items()):
                if v > version:
                    for statement in statements:
                        await conn.execute(statement)
                    await conn.execute("INSERT INTO schema_version VALUES ($1)", v)

    async def close(self) -> None:
        """Close the pool."""
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), 5)
            except (TimeoutError, OSError):
                pool.terminate()

    async def _acquire(self):
        await self.open()
        return self._pool.acquire()

    async def write(self, records: Sequence[Record]) -> None:
        """Write ``records`` in one transaction."""
        self._refuse_write()
        records = list(records)
        for r in records:
            if not isinstance(r, (ArchivedMessage, CompactionRecord, FactEvent, CallRecord)):
                raise TypeError(f"not a store record: {type(r).__name__}")
        if not records:
            return
        sql = {
            "start": _START_CALL,
            "message": _INSERT_MESSAGE,
            "compaction": _INSERT_COMPACTION,
            "fact": _INSERT_FACT,
            "caller_fact": _CALLER_FACT,
            "end": _END_CALL,
        }
        async with await self._acquire() as conn, conn.transaction():
            records = await self._after_forget(conn, records)
            if not records:
                return
            groups = self._groups(records)
            # calls first, their end last; messages before compactions, in record order
            for name in ("start", "message", "compaction", "fact", "caller_fact", "end"):
                if groups[name]:
                    await conn.executemany(sql[name], groups[name])

    @staticmethod
    def _groups(records: Sequence[Record]) -> dict[str, list[tuple]]:
        """The batch's insert parameters, by statement."""
        groups: dict[str, list[tuple]] = {
            "start": [],
            "message": [],
            "compaction": [],
            "fact": [],
            "caller_fact": [],
            "end": [],
        }
        for r in records:
            if isinstance(r, ArchivedMessage):
                groups["message"].append(message_row(r))
            elif isinstance(r, CompactionRecord):
                groups["compaction"].append(compaction_row(r))
            elif isinstance(r, FactEvent):
                groups["fact"].append(fact_row(r))
                if r.user_id is not None:
                    groups["caller_fact"].append(caller_fact_row(r))
            elif isinstance(r, CallRecord):
                if r.ended_at is None:
                    groups["start"].append(
                        (r.call_id, r.user_id, r.started_at, r.resumed, call_label(r))
                    )
                else:
                    groups["end"].append(call_row(r))
            else:
                raise TypeError(f"not a store record: {type(r).__name__}")
        return groups

    async def _after_forget(self, conn, records: list[Record]) -> list[Record]:
        """The batch without the records of forgotten callers' sessions that started before
        the forget. Each caller's advisory lock is taken shared (writers never wait for each
        other; a forget takes it exclusively), so a forget cannot slip in between."""
        users = sorted({r.user_id for r in records if r.user_id is not None})
        if not users:
            return records
        hashes = {user_hash(u): u for u in users}
        await conn.execute(
            "SELECT pg_advisory_xact_lock_shared(hashtextextended(h, 0)) FROM unnest($1::text[]) h",
            sorted(hashes),
        )
        rows = await conn.fetch(
            "SELECT user_hash, at FROM forgotten WHERE user_hash = ANY($1::text[])", list(hashes)
        )
        if not rows:
            return records
        tombstones = {hashes[r["user_hash"]]: r["at"] for r in rows}
        sessions = list({r.call_id for r in records if r.user_id in tombstones})
        started = {
            r["call_id"]: r["started_at"]
            for r in await conn.fetch(
                "SELECT call_id, started_at FROM calls WHERE call_id = ANY($1::text[])", sessions
            )
        }
        return not_forgotten(records, tombstones, started)

    async def _fetch(self, query: str, *args) -> list:
        async with await self._acquire() as conn:
            return await conn.fetch(query, *args)

    async def calls(self, user_id: str | None = None, *, limit: int = 50) -> list[CallRecord]:
        """Calls newest first: all of ``user_id``'s, or the most recent of any caller."""
        limit = check_count("limit", limit)
        if user_id is not None:
            check_user_id(user_id)
        if user_id is None:
            rows = await self._fetch(
                f"SELECT {CALL_COLS} FROM calls ORDER BY started_at DESC LIMIT $1", int(limit)
            )
        else:
            rows = await self._fetch(
                f"SELECT {CALL_COLS} FROM calls WHERE user_id = $1 "
                "ORDER BY started_at DESC LIMIT $2",
                user_id,
                int(limit),
            )
        return [to_call(tuple(r)) for r in rows]

    async def call(self, call_id: str) -> CallRecord | None:
        """One call's row, or ``None``."""
        rows = await self._fetch(
            f"SELECT {CALL_COLS} FROM calls WHERE call_id = {_key(1)}", call_id
        )
        return to_call(tuple(rows[0])) if rows else None

    async def compactions(self, call_id: str) -> list[CompactionRecord]:
        """A call's summary attempts, in order."""
        rows = await self._fetch(
            f"SELECT {COMPACTION_COLS} FROM compactions WHERE call_id = {_key(1)} ORDER BY attempt",
            call_id,
        )
        return [to_compaction(tuple(r)) for r in rows]

    async def messages(
        self, call_id: str, *, compaction: int | None = None
    ) -> list[ArchivedMessage]:
        """A call's archived messages in order (those of one compaction if given)."""
        if compaction is None:
            rows = await self._fetch(
                f"SELECT {MESSAGE_COLS} FROM messages WHERE call_id = {_key(1)} ORDER BY position",
                call_id,
            )
        else:
            rows = await self._fetch(
                f"SELECT {MESSAGE_COLS} FROM messages WHERE call_id = {_key(1)} "
                "AND compaction = $2 ORDER BY position",
                call_id,
                compaction,
            )
        return [to_message(tuple(r)) for r in rows]

    async def message(self, call_id: str, position: int) -> ArchivedMessage | None:
        """One archived message, or ``None``."""
        rows = await self._fetch(
            f"SELECT {MESSAGE_COLS} FROM messages WHERE call_id = {_key(1)} AND position = $2",
            call_id,
            int(position),
        )
        return to_message(tuple(rows[0])) if rows else None

    async def messages_at(self, keys: Sequence[tuple[str, int]]) -> list[ArchivedMessage | None]:
        """Several archived messages in one query, in the order of ``keys`` (``None`` where
        there is none)."""
        wanted = [(str(c), int(p)) for c, p in keys]
        if not wanted:
            return []
        rows = await self._fetch(
            f"SELECT {MESSAGE_COLS} FROM messages m JOIN unnest($1::text[], $2::int[]) "
            "AS k(c, p) ON m.call_id = k.c AND m.position = k.p",
            [c for c, _ in wanted],
            [p for _, p in wanted],
        )
        found = {(r["call_id"], r["position"]): to_message(tuple(r)) for r in rows}
        return [found.get(key) for key in wanted]

    async def fact_history(
        self, *, call_id: str | None = None, user_id: str | None = None
    ) -> list[FactEvent]:
        """Pinned-fact changes of a call or of a caller, oldest first."""
        if call_id is None and user_id is None:
            raise ValueError("fact_history needs call_id or user_id")
        column, value = (_key(1), call_id) if call_id is not None else ("$1", user_id)
        which = "call_id" if call_id is not None else "user_id"
        rows = await self._fetch(
            f"SELECT {FACT_COLS} FROM facts WHERE {which} = {column} ORDER BY at, call_id, seq",
            value,
        )
        return [to_fact(tuple(r)) for r in rows]

    async def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        call_id: str | None = None,
        limit: int = 10,
        any_word: bool = False,
    ) -> list[SearchHit]:
        """``tsvector`` search of archived messages, ranked by ``ts_rank_cd``."""
        statement = self._search_sql(
            query, user_id=user_id, call_id=call_id, limit=limit, any_word=any_word
        )
        if statement is None:
            return []
        return [SearchHit(*tuple(r)) for r in await self._fetch(*statement)]

    def _search_sql(
        self,
        query: str,
        *,
        user_id: str | None,
        call_id: str | None,
        limit: int,
        any_word: bool,
    ) -> tuple[Any, ...] | None:
        """The search's statement and its arguments (``None``: nothing to search)."""
        words = query_words(query)
        if not words or int(limit) <= 0:
            return None
        # plain words only, joined by the operator: no tsquery syntax from the caller
        text = (" or " if any_word else " ").join(words)
        cfg = self.text_search_config
        args: list[Any] = [text, sorted(set(words))]
        match = f"websearch_to_tsquery('{cfg}', $1)"
        where = ""
        for column, prefix, value in (("user_id", "#u", user_id), ("call_id", "#c", call_id)):
            if value is not None:
                args.append(value)
                n = len(args)
                # a call_id argument names a session (or the newest under that label)
                named = f"${n}" if column == "user_id" else _key(n)
                # the scope's lexeme in the query: the index returns only its messages
                match += f" && ($$'{prefix}$$ || md5({named}) || $$'$$)::tsquery"
                # checked again on the rows found, written so that no B-tree index can
                # serve it: read through messages_user (or the call's key) it would
                # compute the index expression on every message of the scope
                where += f" AND {column} || '' = {named}"
        args.append(int(limit))
        n = len(args)
        # how many distinct query words a message has (the score's integer part)
        indexes = range(1, len(args[1]) + 1)
        hits = " + ".join(f"(m.tsv @@ w.a[{i}])::int" for i in indexes)
        query = f"websearch_to_tsquery('{cfg}', $1)"
        if any_word:
            # any of the words: the query is an OR, whose covers (for ts_rank_cd) are single
            # positions of the words present, so a message holding one of the words ranks
            # exactly as against that word alone, at a fraction of the cost (most messages
            # that can place hold one word when no more than limit hold two)
            one = " ".join(f"WHEN h.tsv @@ w.a[{i}] THEN w.b[{i}]" for i in indexes)
            query = f"CASE WHEN h.hits = 1 THEN CASE {one} END ELSE {query} END"
        # c: the scope's latest RANK_MATCHES matches (at least ``limit``; ``id + 0``: found by
        # the index, not by walking the primary key), sorted narrow (id, ctid), their words
        # then read by ctid (a TID scan, same snapshot). The score is how many distinct query
        # words match, plus ts_rank_cd scaled into [0, 1), so a message with more of the words
        # outranks one repeating a single word (as BM25's idf does on SQLite). Only messages
        # with as many words as the limit-th best can place, so only they get the (costly)
        # ts_rank_cd; only the best rows are read whole.
        sql = f"""
            WITH c AS MATERIALIZED (
                SELECT id, ctid FROM messages WHERE {SCOPED_TSV} @@ ({match}){where}
                ORDER BY id + 0 DESC LIMIT {max(RANK_MATCHES, int(limit))}),
            w AS MATERIALIZED (
                SELECT array_agg(plainto_tsquery('{cfg}', x) ORDER BY x) AS a,
                    array_agg(websearch_to_tsquery('{cfg}', x) ORDER BY x) AS b
                FROM unnest($2::text[]) x),
            h AS MATERIALIZED (
                SELECT m.id, m.at, m.tsv, {hits} AS hits FROM messages m, w
                WHERE m.ctid = ANY(ARRAY(SELECT ctid FROM c))),
            t AS (SELECT hits FROM h ORDER BY hits DESC LIMIT 1 OFFSET ${n} - 1)
            SELECT m.call_id, m.position, m.turn, m.at, m.role, m.content, m.removed_by,
                r.score, m.user_id
            FROM (
                SELECT h.id, h.at, (h.hits + ts_rank_cd(h.tsv, {query}, 32))::float8 AS score
                FROM h, w WHERE h.hits >= COALESCE((SELECT hits FROM t), 0)
                ORDER BY score DESC, h.at DESC, h.id DESC LIMIT ${n}
            ) r JOIN messages m ON m.id = r.id
            ORDER BY r.score DESC, m.at DESC, m.id DESC"""
        return (sql, *args)

    async def forgotten_at(self, user_id: str) -> float | None:
        """When ``user_id`` was last forgotten (the tombstone's time), or ``None``."""
        check_user_id(user_id)
        rows = await self._fetch(
            "SELECT at FROM forgotten WHERE user_hash = $1", user_hash(user_id)
        )
        return float(rows[0]["at"]) if rows else None

    async def caller_memory(self, user_id: str, *, max_calls: int = 5) -> CallerMemory:
        """The caller's current pinned facts and their latest calls' summaries."""
        check_user_id(user_id)
        max_calls = check_count("max_calls", max_calls)
        async with await self._acquire() as conn:
            # the caller's current state of each key (kept by every write)
            fact_rows = await conn.fetch(
                "SELECT key, action, text, fact_kind, source, at, seq FROM caller_facts "
                "WHERE user_id = $1",
                user_id,
            )
            rows = await conn.fetch(
                "SELECT COALESCE(ended_at, started_at), COALESCE(summary, (SELECT c.summary "
                "FROM compactions c WHERE c.call_id = calls.call_id AND c.ok "
                "ORDER BY attempt DESC LIMIT 1)), resumed FROM calls WHERE user_id = $1 "
                "ORDER BY started_at DESC LIMIT $2",
                user_id,
                int(max_calls),
            )
        ordered = sorted(fact_rows, key=lambda r: (r["at"], r["seq"]))
        facts = [
            {"key": r["key"], "text": r["text"], "kind": r["fact_kind"], "source": r["source"]}
            for r in ordered
            if r["action"] != "unpinned"
        ]
        summaries = [(r[0], r[1], bool(r[2])) for r in rows if r[1]]
        return CallerMemory(user_id, facts, summaries, len(rows))

    async def forget(self, user_id: str) -> int:
        """Delete every record of ``user_id`` in every table, and leave a tombstone (a hash
        of the id, and the time) so that no session of theirs that started before now writes
        anything again, in this process or another. Then ``VACUUM`` the tables it touched,
        after the commit: deleted rows are dead tuples, holding the words, until a vacuum
        reclaims them (PostgreSQL's WAL archive and backups keep them until they rotate)."""
        if not isinstance(user_id, str) or not user_id:
            raise ValueError("forget needs a non-empty user_id")
        self._refuse_write()
        self._forgotten_now(user_id)  # a live call of this process stops at once
        n = 0
        key = user_hash(user_id)
        async with await self._acquire() as conn:
            async with conn.transaction():
                # exclusive: waits for the writes under way for this caller, holds new ones
                await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key)
                for table in ("messages", "compactions", "facts"):
                    status = await conn.execute(
                        f"DELETE FROM {table} WHERE user_id = $1 OR call_id IN "
                        "(SELECT call_id FROM calls WHERE user_id = $1)",
                        user_id,
                    )
                    n += int(status.split()[-1])
                status = await conn.execute("DELETE FROM calls WHERE user_id = $1", user_id)
                n += int(status.split()[-1])
                await conn.execute("DELETE FROM caller_facts WHERE user_id = $1", user_id)
                await conn.execute(
                    "INSERT INTO forgotten VALUES ($1, $2) ON CONFLICT(user_hash) "
                    "DO UPDATE SET at = excluded.at",
                    key,
                    time.time(),
                )
            # outside the transaction (VACUUM cannot run in one)
            await conn.execute("VACUUM messages, compactions, facts, calls, caller_facts")
        return n

    async def purge_older_than(self, days: float) -> int:
        """Delete records older than ``days`` days."""
        if isinstance(days, bool) or not days >= 0:
            raise ValueError("days must be a non-negative number")
        self._refuse_write()
        async with await self._acquire() as conn:
            return await self._purge(conn, days)

    @staticmethod
    async def _purge(conn, days: float) -> int:
        cutoff = time.time() - days * 86400
        n = 0
        async with conn.transaction():
            for table in ("messages", "compactions", "facts"):
                status = await conn.execute(f"DELETE FROM {table} WHERE at < $1", cutoff)
                n += int(status.split()[-1])
            status = await conn.execute(
                "DELETE FROM calls WHERE COALESCE(ended_at, started_at) < $1", cutoff
            )
            n += int(status.split()[-1])
            await conn.execute("DELETE FROM caller_facts WHERE at < $1", cutoff)
        return n

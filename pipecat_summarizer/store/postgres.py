"""``PostgresMemoryStore``: the fleet backend, on asyncpg with a connection pool.

Many workers on many machines can write for the same caller: every record has a natural
key and is written with an upsert, and the schema migration takes a transaction-level
advisory lock, so concurrent first uses migrate once. Archived messages carry a generated
``tsvector`` column (GIN-indexed) for ranked full-text search in the configured language.
Install with ``pip install 'pipecat-summarizer[postgres]'``.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import re
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from loguru import logger

from pipecat_summarizer._text.text_caches import empty_text_caches
from pipecat_summarizer._validation import check_number
from pipecat_summarizer.store import _postgres_pool, _postgres_search, _postgres_writes
from pipecat_summarizer.store._dsn import mask_dsn
from pipecat_summarizer.store._postgres_pool import (
    MESSAGES_AT,
    TOMBSTONE,
    TOMBSTONES,
    Lease,
    LeaseBook,
    asyncpg_error,
    create_pool,
    lost,
    read_tombstone,
    run_on,
    terminate,
    warm,
)
from pipecat_summarizer.store._postgres_schema import (
    check_read_only,
    migrate,
    quoted_schema,
    session_key,
    store_schema,
)
from pipecat_summarizer.store._postgres_search import HIT_SHAPES, MAX_SEARCH_LIMIT, search_sql
from pipecat_summarizer.store._rows import (
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

_CONFIG = re.compile(r"^[a-z_]+$")
#: SQL: the session a ``call_id`` argument (``$1``) names.
_SESSION = session_key(1)
T = TypeVar("T")
#: The connection a search holds: its statements go there (see ``_fetch``).
_HELD: contextvars.ContextVar[Any] = contextvars.ContextVar("pcs_search_conn", default=None)


#: Every bucket's removals summed (schema v8): grows with every committed transaction that
#: deletes messages (a fold keeps it); read to learn of other processes' deletes.
_REMOVALS_SUM = "SELECT COALESCE(sum(n), 0) FROM removals"
#: The pools a forked child found open, its parent's (see ``_pool_left_behind``).
_PARENTS_POOLS: list[Any] = []


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
        self._pool_pid = os.getpid()  # the process that opened the pool
        self._pool_loop: asyncio.AbstractEventLoop | None = None  # the loop it belongs to
        self._lock = asyncio.Lock()
        # the leases in use (close waits for them) and the cancelled ones' connections
        self._leases = LeaseBook()
        self._settling = self._leases.settling
        self._closing = False
        self._close_task: asyncio.Task | None = None
        # common words' counts in callers' word indexes, reused for a minute (see
        # _postgres_search.caller_search_sql)
        self._df: _postgres_search.WordCounts = {}
        # the server pids of the connections that have the functions (search, tombstone)
        self._functions: set[int] = set()
        # the schema the store lives in, found as it opens (every connection pinned to it)
        self._schema: str | None = None
        # the reads a close cuts rather than waits for: the removals timer's (see _removals),
        # the searches their callers left (see _postgres_pool.run_on)
        self._cut_at_close: set[asyncio.Task] = set()

    def __repr__(self) -> str:
        """The DSN without its password."""
        return f"PostgresMemoryStore({mask_dsn(self.dsn)!r})"

    async def open(self) -> None:
        """Create the pool and migrate the schema (idempotent)."""
        self._pool_left_behind()
        if self._pool is not None:
            return
        async with self._lock:
            if self._pool is not None:
                return
            self._schema = await self._store_schema()
            pool = await create_pool(
                self.dsn,
                min_size=self.min_size,
                max_size=self.max_size,
                timeout=self.connect_timeout_s,
                read_only=self.read_only,
                init=self._init_connection,
                search_path=quoted_schema(self._schema),
            )
            try:
                async with pool.acquire() as conn:
                    if self.read_only:
                        await check_read_only(conn, f"database {self._database()!r}")
                    else:
                        await migrate(conn, self.text_search_config)
                    if self.retention_days and not self.read_only:
                        await _postgres_writes.purge(conn, self.retention_days)
                    await self._init_connection(conn)  # now that the schema is there
                    await self._removals_baseline(conn)
            except BaseException:
                await pool.close()
                raise
            self._pool, self._pool_pid = pool, os.getpid()
            self._pool_loop = asyncio.get_running_loop()
        self._watch_deletes()  # the removals timer (see MemoryStore._watch_deletes)

    async def _store_schema(self) -> str:
        """The schema the store lives in (``_postgres_schema.store_schema``), read on a
        connection of its own before the pool opens, so that every pool connection is
        pinned to it from its start."""
        import asyncpg

        conn = await asyncpg.connect(self.dsn, timeout=self.connect_timeout_s)
        try:
            return await store_schema(conn, f"database {self._database()!r}")
        finally:
            await conn.close()

    def _is_open(self) -> bool:
        """Whether the pool is there and not closing: see ``MemoryStore._is_open``."""
        return self._pool is not None and self._pool_pid == os.getpid() and not self._closing

    async def _init_connection(self, conn) -> None:
        """A new connection's warm-up (see ``warm``); a read-only store creates nothing.
        Whether it has the search function is known per connection (by its backend's pid,
        forgotten when it closes)."""
        if await warm(conn, self.text_search_config, not self.read_only):
            pid = conn.get_server_pid()
            self._functions.add(pid)
            conn.add_termination_listener(lambda _conn: self._functions.discard(pid))

    def _database(self) -> str:
        """The database's name (for messages: no host, user or password)."""
        return urllib.parse.urlsplit(self.dsn).path.lstrip("/") or "(default)"

    async def close(self) -> None:
        """Close the pool, once the uses in flight end (at most 5 s); a use that starts
        meanwhile raises ``StoreError("store closed")``. A close while one runs waits for
        it; a cancelled close still closes. A later use opens it again."""
        self._stop_deletes()
        self._cut_reads()
        self._pool_left_behind()
        task = self._close_task
        if task is None:
            if self._pool is None:
                return
            task = self._close_task = asyncio.ensure_future(self._close())
        # shielded: the pool closes even when the closer is cancelled (the next use or
        # close waits for it rather than finding it half closed)
        await asyncio.shield(task)

    async def _close(self) -> None:
        self._closing = True
        try:
            await self._leases.drained(5)
            pool, self._pool = self._pool, None
            try:
                await asyncio.wait_for(pool.close(), 5)
            except (TimeoutError, OSError):
                pool.terminate()
        finally:
            self._closing = False
            self._close_task = None

    def _pool_left_behind(self) -> None:
        """A pool this process cannot use is left behind; a use opens another. In a forked
        child, the parent's pool is left alone (S15-S-3): its connections are
        the parent's sockets (a statement sent here is answered to whichever process reads
        first; closing it here would end the parent's sessions), and its futures belong to
        the parent's loop. The child opens a pool of its own; the parent's is kept
        referenced, never closed nor collected here."""
        if self._pool is None:
            return
        if self._pool_pid == os.getpid():
            self._left_by_loop()
            return
        _PARENTS_POOLS.append(self._pool)
        self._forget_pool()

    def _left_by_loop(self) -> None:
        """A pool of a loop that has ended (``asyncio.run(store.open())`` at start-up, then
        the application's own loop; S16-A-2) can never be used or closed again: its
        connections' futures belong to that loop. Its sockets are dropped and a pool of the
        running loop is opened at the next use. So is a pool of a loop that no longer runs
        and was never closed (``loop.run_until_complete(store.open())`` at start-up, the loop
        then left alone; S17-A-4): it is not the running loop, and nothing runs its
        callbacks. A pool of another loop that still runs (a store shared across threads'
        loops) is left as it is: that is the caller's to own."""
        loop = self._pool_loop
        if loop is None or loop.is_running():
            return  # (the running loop's own pool, or another thread's loop that runs)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is running:
            return
        pool = self._pool
        logger.info("memory store: the PostgreSQL pool's event loop has ended; opening a new one")
        try:
            pool.terminate()
        except Exception as e:  # its transports' loop is closed: the sockets go with them
            logger.debug(f"memory store: the ended loop's pool left as it was ({type(e).__name__})")
        self._forget_pool()

    def _forget_pool(self) -> None:
        """Drop the pool and the state bound to its loop (a lock, the leases)."""
        self._pool, self._pool_loop, self._close_task, self._closing = None, None, None, False
        self._lock, self._leases, self._functions = asyncio.Lock(), LeaseBook(), set()
        self._settling = self._leases.settling
        self._cut_at_close = set()  # (reads on the old pool: never this loop's to cancel)

    async def _acquire(self) -> Lease:
        self._pool_left_behind()
        if not self._closing:
            await self.open()
        if self._closing or self._pool is None:
            raise StoreError("store closed")
        return Lease(self._pool, self._leases)

    async def write(self, records: Sequence[Record]) -> None:
        """Write ``records`` in one transaction."""
        self._refuse_write()
        records = list(records)
        for r in records:
            if not isinstance(r, (ArchivedMessage, CompactionRecord, FactEvent, CallRecord)):
                raise TypeError(f"not a store record: {type(r).__name__}")
        if not records:
            return
        async with await self._acquire() as conn:
            await _postgres_writes.write(conn, records)

    async def _fetch(self, query: str, *args) -> list:
        held = _HELD.get()
        if held is not None:  # a search's statement, on the connection it chose it for
            return await held.fetch(query, *args)
        return await self._read(lambda conn: conn.fetch(query, *args))

    async def _read(self, use: Callable[[Any], Awaitable[T]]) -> T:
        """``use(conn)`` on a leased connection: a read, run again on another connection
        if its own was found lost (see ``_postgres_pool.lost``), up to ``max_size`` times
        more: each try terminates the connection it found lost."""
        for tries in range(self.max_size, -1, -1):
            try:
                async with await self._acquire() as conn:
                    return await use(conn)
            except Exception as e:
                if not tries or not lost(e):
                    raise
                logger.warning(f"PostgreSQL read retried on another connection ({e!r})")
        raise AssertionError("unreachable")

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
            f"SELECT {CALL_COLS} FROM calls WHERE call_id = {_SESSION}", call_id
        )
        return to_call(tuple(rows[0])) if rows else None

    async def compactions(self, call_id: str) -> list[CompactionRecord]:
        """A call's summary attempts, in order."""
        rows = await self._fetch(
            f"SELECT {COMPACTION_COLS} FROM compactions WHERE call_id = {_SESSION} "
            "ORDER BY attempt",
            call_id,
        )
        return [to_compaction(tuple(r)) for r in rows]

    async def messages(
        self, call_id: str, *, compaction: int | None = None
    ) -> list[ArchivedMessage]:
        """A call's archived messages in order (those of one compaction if given)."""
        if compaction is None:
            rows = await self._fetch(
                f"SELECT {MESSAGE_COLS} FROM messages WHERE call_id = {_SESSION} ORDER BY position",
                call_id,
            )
        else:
            rows = await self._fetch(
                f"SELECT {MESSAGE_COLS} FROM messages WHERE call_id = {_SESSION} "
                "AND compaction = $2 ORDER BY position",
                call_id,
                compaction,
            )
        return [to_message(tuple(r)) for r in rows]

    async def message(self, call_id: str, position: int) -> ArchivedMessage | None:
        """One archived message, or ``None``."""
        rows = await self._fetch(
            f"SELECT {MESSAGE_COLS} FROM messages WHERE call_id = {_SESSION} AND position = $2",
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
            MESSAGES_AT,
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
        column, value = (_SESSION, call_id) if call_id is not None else ("$1", user_id)
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
        _replies: int = 0,
    ) -> list[SearchHit]:
        """``tsvector`` search of archived messages, ranked by ``ts_rank_cd``.

        ``limit`` is at most ``MAX_COUNT`` (a ``ValueError`` past it); past
        ``MAX_SEARCH_LIMIT`` it reads every match, as that does. A search whose connection
        was found lost runs again on another (see ``_read``).

        ``_replies`` is recall's (see ``search.reads_replies``, as on SQLite): the message
        that followed each of the first ``_replies`` hits comes back as the list's
        ``replies`` (``{(call_id, position): (role, content)}``, of those hits that have
        one): a search by caller reads them in its own statement
        (``_postgres_search.caller_statement``), another with ``messages_at`` after it; the
        message before each of the first ``BEFORE_HITS`` as its ``befores`` (see ``Hits``)."""
        limit = min(check_count("limit", limit), MAX_SEARCH_LIMIT)
        words: dict[str, Any] = {
            "user_id": user_id,
            "call_id": call_id,
            "limit": limit,
            "any_word": any_word,
            "replies": _replies,
        }
        hits, _ = await self._search(query, words, None)
        return hits

    async def _search(
        self, query: str, words: dict[str, Any], tombstone: str | None
    ) -> tuple[list[SearchHit], float | None]:
        """:meth:`search` (its arguments in ``words``), and the tombstone of the caller whose
        ``user_hash`` is ``tombstone`` (its time or ``None``; not read when ``tombstone``
        is ``None``) read in the search's statement (see ``_searched``)."""
        _replies = words["replies"]
        if not query_words(query) or words["limit"] <= 0:
            at = None
            if tombstone is not None:  # nothing to search: the watch's read alone
                key, functions, read_only = tombstone, self._functions, self.read_only
                at = await self._read(lambda c: read_tombstone(c, key, functions, read_only))
            return (Hits() if _replies else []), at  # as search_sql: nothing to search
        # a search its caller stops waiting for runs on to its end: no cancel request
        rows, statement, at = await run_on(
            self._read(lambda conn: self._searched(conn, query, words, tombstone)),
            self._cut_at_close,
        )
        _postgres_search.remember_counts(self._df, statement, rows)
        hits = [SearchHit(*tuple(r)[:9]) for r in rows]
        if not _replies:
            return hits, at
        replies = _postgres_search.replies_of(rows, _replies)
        if replies is None:  # not read with the search: the caller's own, read after it
            user_id = words["user_id"]
            return await _postgres_search.read_around(self, hits, _replies, user_id), at
        return Hits(hits, replies, _postgres_search.befores_of(rows, _replies)), at

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
        in one statement: the caller's tombstone read (waiting for a forget of theirs
        under way, as ``forgotten_at``) joined to the search's rows (see ``_searched``);
        see ``MemoryStore.search_noticing``. ``_replies`` as :meth:`search`'s. While the
        call's baseline read is under way, or with ``search`` overridden (a subclass's), the
        two calls side by side."""
        check_user_id(user_id)
        apart = await self._noticing_apart(
            query, user_id=user_id, since=since, limit=limit, any_word=any_word, replies=_replies
        )
        if apart is not None:
            return apart
        words: dict[str, Any] = {
            "user_id": user_id,
            "call_id": None,
            "limit": min(check_count("limit", limit), MAX_SEARCH_LIMIT),
            "any_word": any_word,
            "replies": _replies,
        }
        hits, at = await self._search(query, words, user_hash(user_id))
        return hits, await self._noticed_at(user_id, since, at)

    search_noticing.one_trip = True  # type: ignore[attr-defined]

    # the one search that takes ``_replies``: an override of ``search`` (a test's slow
    # store) or a wrapper (``PrefetchingArchive``) does not have this mark
    search.reads_replies = True  # type: ignore[attr-defined]

    async def _searched(
        self, conn, query: str, words: dict[str, Any], tombstone: str | None = None
    ) -> tuple[list, tuple, float | None]:
        """A search's rows on ``conn``, the statement that read them, and the tombstone
        of the caller whose ``user_hash`` is ``tombstone`` (``None`` when not asked):
        through the connection's search function if it has one (see ``warm``), else (or
        once it turns out gone: a pooler's or a server's session reset) the statement
        itself. The tombstone is read in the search function's statement
        (``_postgres_search.with_tombstone``), else by ``read_tombstone`` on the same
        connection before the search."""
        function = conn.get_server_pid() in self._functions
        held = _HELD.set(conn)
        try:
            while True:
                cfg, counts = self.text_search_config, self._df
                statement = search_sql(cfg, query, counts=counts, function=function, **words)
                assert statement is not None
                sent = statement
                joined = tombstone is not None and _postgres_search.calls_function(statement)
                if tombstone is not None and joined:
                    sent = _postgres_search.with_tombstone(statement, tombstone, TOMBSTONE)
                try:
                    at = None
                    if tombstone is not None and not joined:
                        at = await read_tombstone(conn, tombstone, self._functions, self.read_only)
                    rows = await self._fetch(*sent)
                except asyncpg_error() as e:
                    if getattr(e, "sqlstate", None) != "42883" or not function:
                        raise
                    self._functions.discard(conn.get_server_pid())
                    function = False
                    continue
                if joined:
                    rows, at = _postgres_search.tombstone_of(rows)
                if rows and tuple(rows[0].keys())[: len(HIT_SHAPES[1])] not in HIT_SHAPES:
                    # never another statement's rows as hits: that connection is not trusted
                    terminate(conn)
                    columns = list(rows[0].keys())
                    raise StoreError(f"search read another statement's rows: {columns}")
                return rows, statement, at
        finally:
            _HELD.reset(held)

    async def forgotten_at(self, user_id: str) -> float | None:
        """When ``user_id`` was last forgotten (the tombstone's time), or ``None``; a forget of
        the caller under way in another process (deletes not committed) is waited for, at
        most ``TOMBSTONE_WAIT_S`` (see ``_postgres_pool.read_tombstone``).

        Raises:
            StoreError: If it is still under way then (not known in time).
        """
        check_user_id(user_id)
        key = user_hash(user_id)
        return await self._read(
            lambda conn: read_tombstone(conn, key, self._functions, self.read_only)
        )

    async def _removals_baseline(self, conn) -> None:
        """The baseline of other processes' deletes (``MemoryStore._check_deletes``), read
        as the store opens; a refusal (a role without SELECT on ``removals``) opens all the
        same, and the first check reads it then."""
        try:
            async with conn.transaction():  # a savepoint inside a caller's transaction
                # bounded as the warm-up's statements (a lock held on removals, S17-B-1)
                value = await conn.fetchval(_REMOVALS_SUM, timeout=_postgres_pool.WARM_STATEMENT_S)
        except Exception as e:
            # 42501: a role without SELECT on removals; a timeout: a lock held on it
            state = getattr(e, "sqlstate", None)
            if state != "42501" and not isinstance(e, TimeoutError):
                raise
            logger.debug(f"the store's removals not read at its opening ({state or 'timeout'})")
            return
        self._removals_read(None if value is None else int(value))

    async def _removals(self) -> int | None:
        """The sum of every bucket's removals (it grows with every committed transaction
        that deletes messages; a fold keeps it): a read of the whole table, a row or two per
        bucket deletes touched since its last fold (4,096 buckets at most), run at most
        every ``_forgets.DELETES_CHECK_S`` per store object."""
        if not self._is_open():
            return None  # never opens a closed store again (a timer's read, a late check)
        # a task of its own, which a close cancels (S16-A-7(b)): a read waiting for a lock on
        # removals (LOCK TABLE, VACUUM FULL, a migration's ALTER) held the close ~10 s (the
        # leases' drain, then the pool's close, then terminate), and its backend waited on
        read = asyncio.ensure_future(self._read(lambda conn: conn.fetchval(_REMOVALS_SUM)))
        reads = self._cut_at_close
        reads.add(read)
        read.add_done_callback(reads.discard)
        try:
            await asyncio.wait({read})
        except asyncio.CancelledError:
            read.cancel()  # whoever awaited it went: the read goes too
            raise
        if read.cancelled():
            return None  # cut by a close: nothing read (no outage to log)
        value = read.result()
        return None if value is None else int(value)

    def _cut_reads(self) -> None:
        """Cancel the reads nobody waits for (the store closes): the removals timer's, the
        searches their callers left; asyncpg cancels their statements on the server, and
        their leases go back at once."""
        for read in list(self._cut_at_close):
            if not read.get_loop().is_closed():  # (an ended loop's: nothing to cancel there)
                read.cancel()

    async def tombstones(self, user_hashes: Sequence[str]) -> dict[str, float]:
        """The forget tombstones among ``user_hashes``: their times, by hash (one read of
        the tombstones' primary key). A closed store answers ``{}`` (never opened again).

        Unlike :meth:`forgotten_at` it never waits for a forget under way: the vector
        cache's sweep of many callers would queue behind every forget of the fleet, and its
        next sweep finds a tombstone it missed (a live call's watch reads ``forgotten_at``);
        a call's baseline read before a forget commits makes that forget count during the
        call (its recording stops: the safe side)."""
        keys = list(dict.fromkeys(k for k in user_hashes if isinstance(k, str)))
        if not keys or self._pool is None or self._closing:
            return {}
        rows = await self._fetch(TOMBSTONES, keys)
        return {str(r["user_hash"]): float(r["at"]) for r in rows}

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
            calls = await conn.fetch(caller_summaries_sql("$"), user_id, int(max_calls))
        ordered = sorted(fact_rows, key=lambda r: (r["at"], r["seq"]))
        facts = [(r["key"], r["action"], r["text"], r["fact_kind"], r["source"]) for r in ordered]
        return caller_memory_of(user_id, facts, calls)

    async def forget(self, user_id: str) -> int:
        """Delete every record of ``user_id`` in every table but those of their sessions that
        started after now (as on SQLite), and leave a tombstone (a hash of the id, and the
        time) so that no session of theirs that started before now writes anything again, in
        this process or another. Then ``VACUUM`` the tables it touched,
        after the commit: deleted rows are dead tuples, holding the words, until a vacuum
        reclaims them; the caller's word index (``message_words``) and the tables' indexes
        are vacuumed too. A vacuum frees the space but does not erase it: the forgotten
        words' bytes stay in PostgreSQL's data files until their pages are reused or the
        tables rewritten (``VACUUM FULL``, ``CLUSTER``, pg_repack); PostgreSQL's WAL archive
        and backups keep them until they rotate. The VACUUM is best-effort: one that fails
        or takes over ``_postgres_writes.VACUUM_TIMEOUT_S`` (a lock it cannot get) is logged
        (a WARNING) and the forget, committed, still returns its count.

        Once committed, and before the VACUUM: the process's caches keyed by conversation
        text are emptied (``_text.text_caches``), and the caller's bucket of ``removals``
        is folded (``_postgres_writes.fold_after_forget``: never waits, never fails the
        forget), so a fleet that never purges keeps few rows there."""
        if not isinstance(user_id, str) or not user_id:
            raise ValueError("forget needs a non-empty user_id")
        self._refuse_write()
        at = self._forgotten_now(user_id)  # a live call of this process stops at once
        # until the deletes commit, a search reads the rows still there: it must not pass
        # for one made after the forget (counted again once they are gone)
        committed = self._forget_running(user_id)
        n: int | None = None
        try:
            # their words, kept as counts' keys (counted again anyway once the deletes commit)
            _postgres_search.forget_counts(self._df, user_id)
            async with await self._acquire() as conn:
                n = await _postgres_writes.forget(conn, user_id, at)
                committed()
                # what this process holds of their words outside the store (see text_caches)
                empty_text_caches()
                # their bucket's removals folded without a purge (S13-B-2); never raises
                await _postgres_writes.fold_after_forget(conn, user_id)
                await _postgres_writes.vacuum_forgotten(conn)
        except Exception as e:
            if n is None:
                raise  # not committed: the forget failed
            # the error's type only (no caller, no server text): the forget happened
            logger.warning(f"PostgreSQL VACUUM after a forget failed ({type(e).__name__})")
        finally:
            committed()
        assert n is not None  # set whenever nothing was raised
        return n

    async def purge_older_than(self, days: float) -> int:
        """Delete records older than ``days`` days."""
        check_purge_days(days)
        self._refuse_write()
        # the counts of what went are counted again (see _postgres_search.caller_search_sql)
        async with await self._acquire() as conn:
            return await _postgres_writes.purge(conn, days)

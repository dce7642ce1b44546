"""The PostgreSQL store's pool connections: leases and a new connection's warm-up.

A connection whose use lost its backend or hit an asyncpg protocol or interface error
may still hold a server's error or an operation in flight: handed to the next use, asyncpg
refuses it ("another operation is in progress") or, worse, that use could read the rows
meant for another statement. Such a connection is terminated; the pool opens a new one.
So is a connection whose session was reset under it (``DISCARD ALL`` or ``DEALLOCATE ALL``:
a pooler's reset query, an operator): asyncpg's statement cache still names the prepared
statements the server dropped, and every cached statement fails on it for good (SQLSTATE
26000); a read that finds it so runs again on a new connection.
A cancelled use (a late recall search) goes back through asyncpg's release, which waits
for the cancellation to end before the connection is reused: terminating it made the next
search open and warm a connection (~25-40 ms instead of ~1.3 ms here).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from loguru import logger

from pipecat_summarizer.store._postgres_search import function_sql, search_sql
from pipecat_summarizer.store._rows import MESSAGE_COLS
from pipecat_summarizer.store.base import StoreError

#: SQL: archived messages by (call_id, position) pairs.
MESSAGES_AT = (
    f"SELECT {MESSAGE_COLS} FROM messages m JOIN unnest($1::text[], $2::int[]) "
    "AS k(c, p) ON m.call_id = k.c AND m.position = k.p"
)
FORGOTTEN_AT = "SELECT at FROM forgotten WHERE user_hash = $1"
#: SQL: the tombstones among a batch of callers' hashes (never waits: see ``tombstones``).
TOMBSTONES = "SELECT user_hash, at FROM forgotten WHERE user_hash = ANY($1::text[])"
#: How long a tombstone read waits for a forget of the caller under way (another
#: connection holds the caller's advisory lock, its deletes not committed), seconds: a turn's
#: watch gives up at its own deadline, long before; this bounds how long the read holds a
#: pooled connection. Past it the read fails (lock_not_available: "not known in time").
TOMBSTONE_WAIT_S = 1.0
#: The tombstone read of a connection that has :func:`tombstone_function_sql`'s function.
TOMBSTONE = "pg_temp.pcs_forgotten_at"
TOMBSTONE_AT = f"SELECT {TOMBSTONE}($1) AS at"
#: Without that function: the wait for a forget under way as a statement of its own.
WAIT_FOR_FORGET = "SELECT pg_advisory_xact_lock_shared(hashtextextended($1, 0))"
#: The numbers of distinct words whose caller search a new connection prepares (see warm).
WARM_WORDS = range(1, 9)


def tombstone_function_sql() -> str:
    """The statement creating :data:`TOMBSTONE` on a connection (a temporary function):
    the caller's advisory lock taken shared (a forget holds it exclusively until its
    deletes commit; writers share it), then the tombstone read. One statement for the
    turn: in READ COMMITTED each statement inside a VOLATILE function takes a new snapshot,
    so the read after the lock sees the forget just committed. The wait is bounded by
    ``lock_timeout`` (the function's own, restored on exit), :data:`TOMBSTONE_WAIT_S`."""
    wait_ms = max(1, round(TOMBSTONE_WAIT_S * 1000))
    return f"""
        CREATE OR REPLACE FUNCTION {TOMBSTONE}(h text) RETURNS float8
        LANGUAGE plpgsql VOLATILE SET lock_timeout = '{wait_ms}ms' AS $body$
        BEGIN
            PERFORM pg_advisory_xact_lock_shared(hashtextextended(h, 0));
            RETURN (SELECT f.at FROM forgotten f WHERE f.user_hash = h);
        END $body$"""


#: How long a search its caller stopped waiting for runs on before it is cancelled on the
#: server after all (see :func:`run_on`): a search ends in a few ms; one still running then is
#: held (a lock on ``removals``) or pathological, and gives its connection back.
CANCEL_AFTER_S = 1.0

T = TypeVar("T")


async def run_on(work: Awaitable[T], running: set[asyncio.Task]) -> T:
    """``work`` (a search's use of a pooled connection) in a task of its own, which its
    caller's cancellation leaves running to its end: asyncpg cancels a statement by opening
    a connection of its own to send the cancel request, for which the server forks a
    process: at 100,000 archived messages ~0.6 ms of the loop's CPU and ~2.6 ms of the
    server's per cancel, against the ~2-5 ms of search it would save, on the CPUs the turn's
    own search and the event loop share (a recall search let go, an early search
    superseded). The lease goes back when the statement ends; one still running
    :data:`CANCEL_AFTER_S` later is cancelled after all. Once left, the task is in
    ``running`` until it ends: the store's close cancels it (a close waits for the searches
    their callers await, never for one nobody awaits).
    """
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            running.add(task)
            task.add_done_callback(running.discard)
            late = asyncio.get_running_loop().call_later(CANCEL_AFTER_S, task.cancel)
            task.add_done_callback(lambda _: late.cancel())
            task.add_done_callback(_retrieved)
        raise


def _retrieved(task: asyncio.Task) -> None:
    """Mark a task nobody awaits as read (its error, if any, was its caller's, who left)."""
    if not task.cancelled():
        task.exception()


async def _keep_session(conn: Any) -> None:
    """The pool's reset: nothing to undo (see :func:`create_pool`)."""


async def create_pool(
    dsn: str,
    *,
    min_size: int,
    max_size: int,
    timeout: float,
    read_only: bool,
    init: Any,
    search_path: str | None = None,
) -> Any:
    """The store's asyncpg pool; ``init`` runs on each new connection (see :func:`warm`).
    ``search_path``: every connection's, sent as it connects (a startup parameter: a
    ``RESET ALL`` or ``DISCARD ALL`` puts it back, never the server's default)."""
    import asyncpg

    return await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        timeout=timeout,
        command_timeout=30,
        server_settings={
            # small per-turn queries: starting parallel workers costs more than it saves
            "max_parallel_workers_per_gather": "0",
            # a search planned with its own words (their statistics, the tsquery folded to
            # a constant), never a cached generic plan: ~0.3 ms to plan, where a generic
            # plan ran the search 1.5-2.5x slower
            "plan_cache_mode": "force_custom_plan",
            **({"default_transaction_read_only": "on"} if read_only else {}),
            **({"search_path": search_path} if search_path is not None else {}),
        },
        # the store leaves no session state (no SET, LISTEN, cursor or session lock), so a
        # released connection needs no RESET ALL round trip; asyncpg still rolls back a
        # transaction left open
        reset=_keep_session,
        init=init,
    )


async def read_tombstone(conn: Any, key: str, functions: set[int], read_only: bool) -> float | None:
    """The tombstone of the caller whose :func:`~pipecat_summarizer.store.records.user_hash`
    is ``key`` (its time, or ``None``), read once any forget of theirs under way on another
    connection has ended: through the connection's function when its backend's pid is in
    ``functions`` (one statement), else with the wait as a statement of its own (its lock
    goes as it ends), bounded by asyncpg's timeout; a read-only store (``inspect``) reads
    no live call's tombstone: no wait. A function found gone (a session reset) leaves
    ``functions``.

    Raises:
        StoreError: If a forget is still under way after :data:`TOMBSTONE_WAIT_S` (the
            connection serves on: nothing is left running or held on it).
    """
    pid = conn.get_server_pid()
    try:
        if pid in functions:
            try:
                rows = await conn.fetch(TOMBSTONE_AT, key)
            except asyncpg_error() as e:
                if getattr(e, "sqlstate", None) != "42883":
                    raise
                functions.discard(pid)
            else:
                at = rows[0]["at"]
                return None if at is None else float(at)
        if not read_only:
            await conn.execute(WAIT_FOR_FORGET, key, timeout=TOMBSTONE_WAIT_S)
    except (TimeoutError, asyncpg_error()) as e:
        if isinstance(e, TimeoutError) or getattr(e, "sqlstate", None) == "55P03":
            waited = TOMBSTONE_WAIT_S  # the function's lock_timeout, or asyncpg's
            raise StoreError(f"a forget of the caller still under way after {waited:g} s") from None
        raise
    rows = await conn.fetch(FORGOTTEN_AT, key)
    return float(rows[0]["at"]) if rows else None


def asyncpg_error() -> type[Exception]:
    """asyncpg's base error (imported when used: the extra may be missing)."""
    import asyncpg

    return asyncpg.PostgresError


#: SQLSTATE invalid_sql_statement_name: a prepared statement asyncpg cached is gone from
#: the server (its session reset: ``DISCARD ALL``, ``DEALLOCATE ALL``).
STATEMENTS_GONE = "26000"


def _reset(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection's session was reset under it (see
    :data:`STATEMENTS_GONE`)."""
    return getattr(exc, "sqlstate", None) == STATEMENTS_GONE


def broken(exc: BaseException) -> bool:
    """Whether ``exc``, raised while a connection was in use, leaves the connection unfit
    for another use: a lost backend, an asyncpg protocol or interface error, a session
    reset under it (its cached statements gone). A statement's own error (the server
    answered and is ready), an argument asyncpg refused before sending (``DataError``),
    an error of the store's own code leave it whole, and so does a cancellation or a
    timeout (asyncpg's release waits for the statement's cancel)."""
    import asyncpg
    from asyncpg.exceptions import _base

    if isinstance(exc, TimeoutError):
        return False  # an OSError since Python 3.11: it was terminated as a lost backend
    if isinstance(exc, OSError) or _reset(exc):
        return True
    if isinstance(exc, asyncpg.PostgresConnectionError | _base.InternalClientError):
        return True
    if isinstance(exc, asyncpg.InterfaceError):
        return not isinstance(exc, asyncpg.DataError)
    return False


def lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection was found lost: its backend gone, or asyncpg's
    "another operation is in progress" (a killed backend's error reached an idle pooled
    connection, which the pool does not see until its socket is read closed: the next use
    fails before sending anything), or its session found reset (its cached statements
    gone: the statement never ran). A read can run again on another connection; a timeout
    (the statement may still run) or a server refusing new connections is not this."""
    import asyncpg
    from asyncpg.exceptions import _base

    if isinstance(exc, asyncpg.ConnectionDoesNotExistError | _base.InternalClientError):
        return True
    if _reset(exc):
        return True
    return isinstance(exc, asyncpg.InterfaceError) and not isinstance(exc, asyncpg.DataError)


class LeaseBook:
    """A store's leases: how many are in use (``close`` waits for them), and the uses
    cancelled while their connection was being acquired, whose connection goes back."""

    def __init__(self) -> None:
        self.in_use = 0
        self.settling: set[asyncio.Future] = set()

    async def drained(self, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until no lease is in use; whether none is."""
        deadline = time.monotonic() + timeout_s
        while self.in_use and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        return not self.in_use


class Lease:
    """One use of a pool connection (``async with``). The wait for it may be cancelled (a
    recall search the frame no longer waits for, the call's end), but a connection being
    opened is never cancelled half-way: asyncpg would leave a failed future nobody reads
    ("Future exception was never retrieved"); it opens in full and goes back to the pool.
    A use that ends with a :func:`broken` error terminates its connection instead. While
    the pool closes, asyncpg's errors are a :class:`StoreError` ("store closed")."""

    def __init__(self, pool: Any, book: LeaseBook):
        self._pool = pool
        self._book = book
        self._conn: Any = None

    async def __aenter__(self) -> Any:
        self._book.in_use += 1
        acquiring = asyncio.ensure_future(self._pool.acquire())
        try:
            self._conn = await asyncio.shield(acquiring)
        except asyncio.CancelledError:
            self._book.in_use -= 1
            acquiring.add_done_callback(self._give_back)
            raise
        except BaseException as e:
            self._book.in_use -= 1
            self._closed_error(e)
            raise
        return self._conn

    async def __aexit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        try:
            if exc is not None and broken(exc):
                terminate(self._conn)
            else:
                await self._pool.release(self._conn)
        finally:
            self._book.in_use -= 1
        if exc is not None:
            self._closed_error(exc)

    def _closed_error(self, exc: BaseException) -> None:
        """Raise ``StoreError("store closed")`` for asyncpg's error of a closing pool."""
        if self._pool.is_closing() and type(exc).__module__.startswith("asyncpg"):
            raise StoreError("store closed") from exc

    def _give_back(self, acquiring: asyncio.Future) -> None:
        if acquiring.cancelled() or acquiring.exception() is not None:
            return  # nothing was acquired (the exception is read: never reported)
        release = asyncio.ensure_future(self._pool.release(acquiring.result()))
        self._book.settling.add(release)  # held until done: a task only weakly held may vanish
        release.add_done_callback(self._settled)

    def _settled(self, release: asyncio.Future) -> None:
        self._book.settling.discard(release)
        if not release.cancelled():
            release.exception()


def terminate(conn: Any) -> None:
    """Close a leased connection at once (its holder goes back to the pool, empty)."""
    import asyncpg

    try:
        conn.terminate()
    except asyncpg.InterfaceError:
        pass  # already given back: its backend was lost and asyncpg released it


#: The longest one statement of a new connection's warm-up runs (seconds): past it (a lock
#: held on a table it reads) the warm-up stops, and the connection serves unwarmed.
WARM_STATEMENT_S = 1.0


async def warm(conn: Any, config: str, function: bool) -> bool:
    """Run a recall turn's statements once on a new connection (a search, the tombstone's
    read, the batched read of the hits' next messages), for a caller that has none: the
    first use of each on a connection costs 10-30 ms (asyncpg's type introspection of the
    arrays, the server's first reads of the tables' and indexes' definitions), which a
    turn's 10 ms budget would otherwise pay. Before the schema exists this runs nothing.

    With ``function`` it first creates the connection's search function
    (``_postgres_search.function_sql``: a temporary one, nothing written to the database),
    so that its statement is planned here, and the tombstone read's function
    (:func:`tombstone_function_sql`); returns whether the connection has them (a role
    without the TEMP privilege cannot create them: searches then send their statements).

    Raises:
        asyncpg.PostgresConnectionError: and asyncpg's other connection-level errors: the
            connection is unfit (the pool closes it), never kept half-warmed.
    """
    if function:
        try:
            # both or neither (one simple query, one transaction): the store knows per
            # connection whether it has "the functions"
            await conn.execute(f"{function_sql(config)};{tombstone_function_sql()}")
        except asyncpg_error() as e:
            if broken(e):
                raise
            logger.warning(
                f"PostgreSQL functions not created ({e}): each search is planned, and a "
                "tombstone read waits for a forget under way in a statement of its own"
            )
            function = False
    nobody = "pcs-warm-up"  # no rows: such a caller would only be read, never changed
    statements: list[tuple] = [
        (TOMBSTONE_AT if function else FORGOTTEN_AT, nobody),
        (MESSAGES_AT, [nobody], [0]),
    ]
    # the caller's search has one statement text per number of distinct words (one read of
    # the word index each) past SLOTS, or the function's: those of up to WARM_WORDS words;
    # the call's search has one
    queries = [(" ".join(f"warm{i}" for i in range(n)), nobody, None) for n in WARM_WORDS]
    for query, user_id, call_id in [*queries, ("warm up", None, nobody)]:
        found = search_sql(
            config,
            query,
            user_id=user_id,
            call_id=call_id,
            limit=10,
            any_word=True,
            function=function,
        )
        if found is not None and found not in statements:
            statements.append(found)
    for sql, *args in statements:
        try:
            # bounded: a lock held on a table it reads (an operator's LOCK TABLE on
            # removals) held the store's opening, or a turn's new connection, for the 30 s
            # command timeout (S17-B-1); asyncpg cancels the statement on the server
            await conn.fetch(sql, *args, timeout=WARM_STATEMENT_S)
        except Exception as e:
            if broken(e):
                raise
            break  # no schema yet (a new database: migrate first), or a lock held
    return function

"""Attacks on "a kept word count stands while the database's removals are unchanged" (schema
v8: ``_sqlite_search.word_counts``, ``_postgres_search.caller_statement``).

Every transaction that deletes archived messages bumps the removals (a trigger: SQLite one
count for the file, PostgreSQL one per bucket of callers); a worker's store object keeps its
searches' counts of common words with the removals they were counted at. The attacks: a
purge that deletes nothing, two processes purging at once, a forget rolled back, a forget or a purge
committed while a search is under way, and an archive of the previous schema. The worker
must always find what a fresh store finds (the reference), on both backends.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from pipecat_summarizer.store import (
    SQLiteMemoryStore,
    _postgres_writes,
    _sqlite_schema,
    _sqlite_writes,
    open_store,
)
from pipecat_summarizer.store._postgres_schema import EVERYONE, REMOVALS_OF
from pipecat_summarizer.store._postgres_search import KEEP_MATCHES
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord

MANY = KEEP_MATCHES + 50  # a word in more of the caller's messages than a search ranks
ROOT = Path(__file__).resolve().parents[2]
DAY = 86400.0


def _msg(call: str, i: int, text: str, at: float, user: str = "al") -> ArchivedMessage:
    return ArchivedMessage(
        call_id=call,
        position=i,
        role="user",
        content=text,
        message_json=json.dumps({"role": "user", "content": text}),
        turn=i // 2,
        at=at,
        user_id=user,
    )


def _pg(target: str) -> bool:
    return target.startswith("postgres")


async def _removals(target: str, user: str = "al") -> int:
    """The removals a search by ``user`` compares its kept counts with (a count that only
    grows: SQLite's of the file's deleted messages, PostgreSQL's of the statements that
    deleted ``user``'s)."""
    if _pg(target):
        import asyncpg

        conn = await asyncpg.connect(target)
        try:
            return await conn.fetchval(
                "SELECT COALESCE(sum(n), 0) FROM removals "
                f"WHERE bucket IN ({REMOVALS_OF.format(user='$1')}, $2)",
                user,
                EVERYONE,
            )
        finally:
            await conn.close()
    with closing(sqlite3.connect(target)) as conn:
        return conn.execute("SELECT n FROM removals").fetchone()[0]


def _kept(store, word: str, user: str = "al") -> tuple | None:
    """The worker's kept count of ``word`` (its cache entry), or ``None``."""
    if isinstance(store, SQLiteMemoryStore):
        scope = _sqlite_schema.scope_range(_sqlite_schema.scope_of(user, ""))
        return store._df.get((scope, word))
    return store._df.get((user, word))


def _keys(hits) -> list[tuple[str, int]]:
    return sorted((h.call_id, h.position) for h in hits)


async def _both(worker, fresh, query: str = "card zebra", user: str = "al"):
    want = await fresh.search(query, user_id=user, any_word=True, limit=20)
    got = await worker.search(query, user_id=user, any_word=True, limit=20)
    return _keys(want), _keys(got)


async def _backfilled(store, now: float) -> None:
    """al: 100 recent "card" messages, then an import of MANY older ones (90 days back,
    written after: the newest ids), and 500 of 45 days back."""
    await store.write(
        [_msg(f"recent-{i // 50}", i % 50, f"card {i}", now - 3600 + i) for i in range(100)]
    )
    await store.write(
        [_msg(f"import-{i // 500}", i % 500, f"card {i}", now - 90 * DAY + i) for i in range(MANY)]
    )
    await store.write(
        [_msg(f"mid-{i // 250}", i % 250, f"card {i}", now - 45 * DAY + i) for i in range(500)]
    )


async def _al_says_zebra(store, now: float) -> None:
    await store.write(
        [_msg("new", 0, "zebra card", now + 1), _msg("new", 1, "card zebra card", now + 2)]
    )


async def test_store_a_purge_that_deletes_nothing_bumps_nothing(store_target):
    # chosen: a purge that deletes no message leaves the removals as they are, and so every
    # kept count (a fleet whose workers purge as they open, retention_days, would count every
    # common word again at each worker's start); one that deletes a message bumps them
    worker, admin = open_store(store_target), open_store(store_target)
    now = time.time()
    try:
        await worker.write(
            [_msg(f"c-{i // 500}", i % 500, f"card {i}", now - DAY + i) for i in range(MANY)]
        )
        assert await worker.search("card zebra", user_id="al", any_word=True)
        counted = _kept(worker, "card")
        assert counted is not None
        before = await _removals(store_target)
        assert await admin.purge_older_than(30) == 0
        opened = open_store(store_target, retention_days=30)  # its purge as it opens
        await opened.open()
        await opened.close()
        assert await _removals(store_target) == before
        await worker.search("card zebra", user_id="al", any_word=True)
        assert _kept(worker, "card") == counted  # reused: the same entry, the same time
        # one old message goes: the count is counted again
        await admin.write([_msg("old", 0, "card", now - 60 * DAY)])
        assert await admin.purge_older_than(30) >= 1
        assert await _removals(store_target) > before
        await worker.search("card zebra", user_id="al", any_word=True)
        again = _kept(worker, "card")
        assert again is not None and again[2] > counted[2]
    finally:
        for store in (worker, admin):
            await store.close()


_PURGE = """
import asyncio, sys
from pipecat_summarizer.store import open_store

async def main(target, days):
    store = open_store(target)
    await store.open()
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    print(await store.purge_older_than(float(days)), flush=True)
    await store.close()

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_store_two_processes_purging_at_once(store_target):
    # two worker processes purge at the same moment (60 and 30 days): their deletes
    # overlap (the 90-day import); each that deleted something bumps the removals in its own
    # transaction, none is lost, neither fails or waits for ever, and the worker that
    # counted "card" (the backfilled import included) finds what a fresh store finds
    worker, admin, fresh = (open_store(store_target) for _ in range(3))
    now = time.time()
    procs = []
    try:
        await _backfilled(worker, now)
        assert await worker.search("card zebra", user_id="al", any_word=True)
        before = await _removals(store_target)
        for days in ("60", "30"):
            procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-c",
                    _PURGE,
                    store_target,
                    days,
                    cwd=ROOT,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                )
            )
        for proc in procs:
            assert proc.stdout is not None
            assert await asyncio.wait_for(proc.stdout.readline(), 60) == b"ready\n"
        for proc in procs:  # both at once
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
        outs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 120)
        deleted = [int(out.split()[0]) for out, _ in outs]
        assert [p.returncode for p in procs] == [0, 0], [err[-500:] for _, err in outs]
        assert sum(deleted) == MANY + 500  # every old message once, by one or the other
        assert await _removals(store_target) > before
        await _al_says_zebra(admin, now)
        want, got = await _both(worker, fresh)
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        for store in (worker, admin, fresh):
            await store.close()
    assert len(want) == 20 and ("new", 1) in want
    assert got == want


async def _delete_uncommitted(target: str, user: str):
    """A connection in a transaction that deleted ``user``'s messages (not committed) and
    a function rolling it back."""
    if _pg(target):
        import asyncpg

        conn = await asyncpg.connect(target)
        tr = conn.transaction()
        await tr.start()
        assert await _postgres_writes.forget(conn, user, time.time()) > 0

        async def pg_rollback() -> None:
            await tr.rollback()
            await conn.close()

        return pg_rollback
    raw = sqlite3.connect(target, isolation_level=None)
    raw.execute("BEGIN IMMEDIATE")
    assert raw.execute("DELETE FROM messages WHERE user_id = ?", (user,)).rowcount > 0

    async def sqlite_rollback() -> None:
        raw.execute("ROLLBACK")
        raw.close()

    return sqlite_rollback


async def test_store_a_forget_rolled_back(store_target):
    # another process's forget deletes al's messages and rolls back (it failed): the
    # worker's search during it counts the rows its snapshot still has; after the rollback
    # the removals are what they were (its bump went with it) and what the worker keeps
    # agrees with a fresh store's, then and once al is forgotten for good
    worker, admin, fresh = (open_store(store_target) for _ in range(3))
    now = time.time()
    try:
        await worker.write(
            [_msg(f"o-{i // 500}", i % 500, f"card {i}", now - DAY + i) for i in range(MANY)]
        )
        await worker.write([_msg("z", 0, "zebra stripes", now - DAY + MANY)])
        before = await _removals(store_target)
        rollback = await _delete_uncommitted(store_target, "al")
        try:
            during = _keys(await worker.search("card zebra", user_id="al", any_word=True))
            assert await _removals(store_target) == before  # not committed: not seen
        finally:
            await rollback()
        assert await _removals(store_target) == before
        want, got = await _both(worker, fresh)
        assert got == want and ("z", 0) in want
        assert during == _keys(
            await worker.search("card zebra", user_id="al", any_word=True)
        )  # the rows are back: the same hits
        await admin.forget("al")
        back = time.time() + 1
        await admin.write(
            [
                CallRecord("back", user_id="al", started_at=back),
                _msg("back", 0, "card declined", back),
                _msg("back", 1, "a zebra card", back + 1),
            ]
        )
        want, got = await _both(worker, fresh)
    finally:
        for store in (worker, admin, fresh):
            await store.close()
    assert want == [("back", 0), ("back", 1)] and got == want


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_store_sqlite_a_purge_commits_while_a_search_counts(store_target):
    # another process's purge commits while the worker's search is counting "card" (in the
    # middle of its count's statement): the search counts what its snapshot holds (the
    # import still there) and must keep it with the removals of that snapshot, so that the
    # next search counts again. A search that read the removals after counting kept the
    # import's count with the purge's removals: "card" left out for good (checked: it fails
    # with word_counts reading the removals itself, after its counts)
    worker, admin, fresh = (SQLiteMemoryStore(store_target) for _ in range(3))
    now = time.time()
    # used on the store's thread, inside its search
    purger = sqlite3.connect(store_target, isolation_level=None, check_same_thread=False)
    state = {"counting": False, "purged": 0}

    def trace(sql: str) -> None:
        if not sql.startswith("--"):  # not FTS5's own statements
            state["counting"] = sql.startswith("SELECT count(*)")

    def progress() -> int:
        if state["counting"] and not state["purged"]:
            cutoff = time.time() - 30 * DAY
            state["purged"] = purger.execute(
                "DELETE FROM messages WHERE at < ?", (cutoff,)
            ).rowcount
        return 0

    def hook(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(trace)
        conn.set_progress_handler(progress, 50)

    def unhook(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(None)
        conn.set_progress_handler(None, 0)

    try:
        await _backfilled(worker, now)
        await worker._run(hook)
        during = await worker.search("card zebra", user_id="al", any_word=True, limit=20)
        await worker._run(unhook)
        assert state["purged"] == MANY + 500  # committed while the search counted
        assert len(during) == 20  # the search's own snapshot: the import still there
        await _al_says_zebra(admin, now)
        want, got = await _both(worker, fresh)
    finally:
        purger.close()
        for store in (worker, admin, fresh):
            await store.close()
    assert len(want) == 20 and ("new", 1) in want
    assert got == want


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_store_postgres_a_forget_commits_while_a_search_waits(store_target):
    # another process's forget commits while the worker's search is under way: the search
    # waits for a lock the forget holds (an operator's LOCK on the removals), its snapshot
    # taken before the commit (the search function's). It reads al's rows and the removals
    # of that one snapshot; once al is back, the worker finds what a fresh store finds
    asyncpg = pytest.importorskip("asyncpg")
    worker, admin, fresh = (open_store(store_target) for _ in range(3))
    now = time.time()
    conn = await asyncpg.connect(store_target)
    watch = await asyncpg.connect(store_target)
    search = None
    try:
        await worker.write(
            [_msg(f"o-{i // 500}", i % 500, f"card {i}", now - DAY + i) for i in range(MANY)]
        )
        await worker.write([_msg("z", 0, "zebra", now, "bo")])
        assert await worker.search("zebra", user_id="bo", any_word=True)  # the pool warm
        forgetting = conn.transaction()
        await forgetting.start()
        await conn.execute("LOCK TABLE removals IN ACCESS EXCLUSIVE MODE")
        assert await _postgres_writes.forget(conn, "al", time.time()) >= MANY
        search = asyncio.ensure_future(
            worker.search("card zebra", user_id="al", any_word=True, limit=20)
        )
        for _ in range(400):  # until the search waits for the lock
            waiting = await watch.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            )
            if waiting or search.done():
                break
            await asyncio.sleep(0.025)
        assert waiting and not search.done()
        await forgetting.commit()
        during = await asyncio.wait_for(search, 30)
        back = time.time() + 1
        await admin.write(
            [
                CallRecord("back", user_id="al", started_at=back),
                _msg("back", 0, "card declined", back),
                _msg("back", 1, "a zebra card", back + 1),
            ]
        )
        want, got = await _both(worker, fresh)
    finally:
        if search is not None and not search.done():
            search.cancel()
        await conn.close()
        await watch.close()
        for store in (worker, admin, fresh):
            await store.close()
    assert len(during) in (0, 20)  # before the forget, or after it: never a mix
    assert want == [("back", 0), ("back", 1)] and got == want


async def _make_v7(target: str, records: list[ArchivedMessage]) -> None:
    """An archive as the v7 code left it: its schema and its writes."""
    if _pg(target):
        import asyncpg

        from pipecat_summarizer.store._postgres_schema import migrations

        conn = await asyncpg.connect(target)
        try:
            await conn.execute("CREATE TABLE schema_version(version INTEGER NOT NULL)")
            for version in range(1, 8):
                for statement in migrations("english")[version]:
                    await conn.execute(statement)
                await conn.execute("INSERT INTO schema_version VALUES ($1)", version)
            await _postgres_writes.write(conn, records)
        finally:
            await conn.close()
        return
    with closing(sqlite3.connect(target, isolation_level=None)) as conn:
        conn.create_function("pcs_scope", 2, _sqlite_schema.scope_of, deterministic=True)
        conn.execute("CREATE TABLE schema_version(version INTEGER NOT NULL)")
        for version in range(1, 8):
            for statement in _sqlite_schema.MIGRATIONS[version]:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version VALUES (?)", (version,))
        _sqlite_writes.write(conn, list(records))


async def test_store_a_v7_archive_opens_and_its_removals_count_from_then(store_target):
    # an archive of the previous schema (no removals) opens: migrated once, by whichever
    # store opens it first (two at once here); its old messages' deletes bump the removals
    now = time.time()
    await _make_v7(
        store_target,
        [_msg(f"o-{i // 500}", i % 500, f"card {i}", now - 90 * DAY + i) for i in range(MANY)]
        + [_msg("r", i, f"card {i}", now - 3600 + i) for i in range(100)],
    )
    worker, admin, fresh = (open_store(store_target) for _ in range(3))
    try:
        await asyncio.gather(worker.open(), admin.open())
        assert await _removals(store_target) == 0
        assert await worker.search("card zebra", user_id="al", any_word=True)
        assert await admin.purge_older_than(30) >= MANY
        assert await _removals(store_target) > 0
        await _al_says_zebra(admin, now)
        want, got = await _both(worker, fresh)
    finally:
        for store in (worker, admin, fresh):
            await store.close()
    assert len(want) == 20 and ("new", 1) in want
    assert got == want


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_store_postgres_removals_rows_are_added_then_folded_by_a_purge(store_target):
    # PostgreSQL's removals are only added to (a row per deleting statement and bucket): a
    # forget of al held open (never committed) holds no row that a purge of another caller
    # of al's bucket needs (an update of the bucket's one row made the purge wait: S13-A-3),
    # and the purge folds each bucket's committed rows into one, their sums unchanged (no
    # kept count is counted again for it); the held forget's row, once committed, counts
    asyncpg = pytest.importorskip("asyncpg")
    twin = "al-twin-4325"  # in al's bucket: left(md5(id), 3) is 972 for both
    store = open_store(store_target)
    conn = await asyncpg.connect(store_target)
    now = time.time()
    forgetting = None
    try:
        same = f"SELECT {REMOVALS_OF.format(user='$1')} = {REMOVALS_OF.format(user='$2')}"
        assert await conn.fetchval(same, "al", twin)
        await store.write([_msg("al-new", i, f"card {i}", now - DAY + i) for i in range(5)])
        for user in (twin, "bo"):
            await store.write(
                [_msg(f"{user}-old", i, f"card {i}", now - 60 * DAY + i, user) for i in range(5)]
                + [_msg(f"{user}-new", i, f"card {i}", now - DAY + i, user) for i in range(5)]
                + [_msg(f"{user}-x", 0, "card", now, user), _msg(f"{user}-y", 0, "card", now, user)]
            )
            for call in (f"{user}-x", f"{user}-y"):  # two deletes: two rows
                await conn.execute("DELETE FROM messages WHERE call_id = $1", call)
        assert await conn.fetchval("SELECT count(*) FROM removals") == 4
        assert (await _removals(store_target, "al"), await _removals(store_target, "bo")) == (2, 2)
        forgetting = conn.transaction()
        await forgetting.start()
        assert await _postgres_writes.forget(conn, "al", time.time()) == 5  # held
        # the purge deletes the twin's and bo's old messages, none of al's: it waits for nothing
        assert await asyncio.wait_for(store.purge_older_than(30), 30) == 10
        rows = await store._fetch("SELECT bucket, n FROM removals ORDER BY bucket")
        assert [tuple(r) for r in rows] == [("972", 3), ("ad7", 3)]  # folded: 2 + its own 1
        await forgetting.commit()
        forgetting = None
        assert (await _removals(store_target, "al"), await _removals(store_target, "bo")) == (4, 3)
    finally:
        if forgetting is not None:
            await forgetting.rollback()
        await conn.close()
        await store.close()

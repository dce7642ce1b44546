"""Attacks on the removal counts' locks (schema v8, 4e5b3cd): on PostgreSQL a transaction
that deletes a caller's messages now also holds that caller's ``removals`` row (SQLite: the
file's one row) until it ends. A forget that never commits (held open by another connection)
must hold up nothing it did not hold up before; purges and forgets run at once by several
store objects must neither deadlock nor lose a bump; and the workers then find what a fresh
store finds, on both backends.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time

import pytest

from pipecat_summarizer.store import _postgres_writes, open_store
from pipecat_summarizer.store._postgres_schema import EVERYONE, REMOVALS_OF
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord

DAY = 86400.0
#: A hang detector, far past any wait the operation could have by design.
HANG_S = 60.0


def _msg(call: str, i: int, text: str, at: float, user: str) -> ArchivedMessage:
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


def _keys(hits) -> list[tuple[str, int]]:
    return sorted((h.call_id, h.position) for h in hits)


async def _callers(store, now: float, users: list[str], old_days: float = 90.0) -> None:
    """Each caller: an old call (``old_days`` back) and a recent one, both saying "card"."""
    for user in users:
        old, new = now - old_days * DAY, now - DAY
        await store.write(
            [
                CallRecord(f"{user}-old", user_id=user, started_at=old, ended_at=old + 60),
                *(_msg(f"{user}-old", i, f"card {user} {i}", old + i, user) for i in range(40)),
                CallRecord(f"{user}-new", user_id=user, started_at=new, ended_at=new + 60),
                *(_msg(f"{user}-new", i, f"card zebra {i}", new + i, user) for i in range(10)),
            ]
        )


async def _removals(target: str) -> dict[str, int]:
    """The removals rows (PostgreSQL: by bucket of callers; SQLite: the file's, as 'file')."""
    if _pg(target):
        import asyncpg

        conn = await asyncpg.connect(target)
        try:
            rows = await conn.fetch("SELECT bucket AS s, n FROM removals")
        finally:
            await conn.close()
        return {r["s"]: r["n"] for r in rows}
    conn = sqlite3.connect(target)
    try:
        return {"file": conn.execute("SELECT n FROM removals").fetchone()[0]}
    finally:
        conn.close()


async def _bucket(target: str, user: str) -> str:
    """``user``'s row of the removals (PostgreSQL)."""
    import asyncpg

    conn = await asyncpg.connect(target)
    try:
        return await conn.fetchval(f"SELECT {REMOVALS_OF.format(user='$1')}", user)
    finally:
        await conn.close()


async def _held_forget(target: str, user: str):
    """Another connection's forget of ``user``: done, never committed. Returns its end
    (``commit`` True: committed; else rolled back)."""
    if _pg(target):
        import asyncpg

        conn = await asyncpg.connect(target)
        tr = conn.transaction()
        await tr.start()
        await _postgres_writes.forget(conn, user, time.time())  # a savepoint inside tr

        async def pg_end(commit: bool) -> None:
            await (tr.commit() if commit else tr.rollback())
            await conn.close()

        return pg_end
    raw = sqlite3.connect(target, isolation_level=None)
    raw.execute("BEGIN IMMEDIATE")
    raw.execute("DELETE FROM messages WHERE user_id = ?", (user,))

    async def sqlite_end(commit: bool) -> None:
        raw.execute("COMMIT" if commit else "ROLLBACK")
        raw.close()

    return sqlite_end


@pytest.mark.parametrize("commit", [False, True], ids=["rolled back", "committed"])
async def test_removals_a_held_forget_holds_up_no_read_nor_another_callers_purge(
    store_target, commit
):
    # another connection's forget of al, never committed (al's removals row held on
    # PostgreSQL, the file's write lock on SQLite). Meanwhile a worker's reads of al and bo
    # go on (searches that count "card", their memory, their calls), and on PostgreSQL bo's
    # writes and a new worker's retention purge as it opens (bo's old call: al's rows are a
    # day old, so the purge touches nothing the forget holds) end without waiting for it.
    # Then the worker finds what a fresh store finds
    worker, fresh = open_store(store_target), open_store(store_target)
    now = time.time()
    end = None
    try:
        await _callers(worker, now, ["bo"])
        await _callers(worker, now, ["al"], old_days=1.5)
        for who in ("al", "bo"):
            assert await worker.search("card zebra", user_id=who, any_word=True)
        end = await _held_forget(store_target, "al")
        during = {}
        for who in ("al", "bo"):
            during[who] = _keys(
                await asyncio.wait_for(
                    worker.search("card zebra", user_id=who, any_word=True, limit=50), HANG_S
                )
            )
            await asyncio.wait_for(worker.caller_memory(who), HANG_S)
            await asyncio.wait_for(worker.calls(who), HANG_S)
        if _pg(store_target):
            await asyncio.wait_for(worker.write([_msg("bo-new", 99, "zebra", now, "bo")]), HANG_S)
            opened = open_store(store_target, retention_days=30)
            try:
                await asyncio.wait_for(opened.open(), HANG_S)  # purges bo's old call
            finally:
                await opened.close()
            assert await fresh.calls("bo") and len(await fresh.calls("bo")) == 1
        await end(commit)
        end = None
        after = {}
        for who in ("al", "bo"):
            want = await fresh.search("card zebra", user_id=who, any_word=True, limit=50)
            got = await worker.search("card zebra", user_id=who, any_word=True, limit=50)
            after[who] = (_keys(want), _keys(got))
    finally:
        if end is not None:
            await end(False)
        for store in (worker, fresh):
            await store.close()
    assert len(during["al"]) == 50  # al's rows still there for every other connection
    for who, (want, got) in after.items():
        assert got == want, who
    assert (after["al"][0] == []) == commit


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_removals_a_purge_waits_for_a_held_forget_then_bumps_once(store_target):
    # al's forget held open; a purge of everyone's old calls (al's too) waits for it, as it
    # did before schema v8 (it deletes al's old rows, which the forget holds). Once the
    # forget commits the purge ends: no deadlock, al's removals bumped by the forget only
    # (the purge found al's rows gone), bo's by the purge
    admin, fresh = open_store(store_target), open_store(store_target)
    now = time.time()
    end = None
    try:
        await _callers(admin, now, ["al", "bo"])
        al, bo = await _bucket(store_target, "al"), await _bucket(store_target, "bo")
        before = await _removals(store_target)
        end = await _held_forget(store_target, "al")
        purge = asyncio.ensure_future(admin.purge_older_than(30))
        await asyncio.sleep(0.5)
        waited = not purge.done()
        await end(True)
        end = None
        purged = await asyncio.wait_for(purge, HANG_S)
        removals = await _removals(store_target)
        hits = await fresh.search("card zebra", user_id="bo", any_word=True, limit=50)
    finally:
        if end is not None:
            await end(False)
        for store in (admin, fresh):
            await store.close()
    assert waited  # noted, not new: the forget holds al's old rows
    assert purged > 40  # bo's old call and messages
    assert removals[al] == before.get(al, 0) + 1 and removals[bo] == before.get(bo, 0) + 1
    assert EVERYONE not in removals
    assert len(hits) == 10


async def _at_once(*ops) -> list:
    """Run ``ops`` (coroutine functions) at the same moment; their results or errors."""
    gate = asyncio.Event()

    async def run(op):
        await gate.wait()
        return await op()

    tasks = [asyncio.ensure_future(run(op)) for op in ops]
    await asyncio.sleep(0)
    gate.set()
    return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), HANG_S * 2)


ROUNDS = 4
USERS = [f"u{i:02d}" for i in range(12)]


async def test_removals_two_purges_at_once_from_two_stores(store_target):
    # two workers' purges (60 and 30 days) over twelve callers' old calls, at the same moment,
    # four rounds: neither fails (PostgreSQL: no deadlock between their triggers' bumps,
    # which lock each caller's row in md5 order), every old row goes once, and each caller's
    # removals grow by the purges that deleted their rows
    one, two, fresh = (open_store(store_target) for _ in range(3))
    errors: list[BaseException] = []
    try:
        for r in range(ROUNDS):
            now = time.time() + r  # each round's calls new
            users = [f"{u}r{r}" for u in USERS]
            await _callers(one, now, users)
            before = await _removals(store_target)
            results = await _at_once(
                lambda: one.purge_older_than(60), lambda: two.purge_older_than(30)
            )
            errors += [e for e in results if isinstance(e, BaseException)]
            deleted = [n for n in results if isinstance(n, int)]
            assert sum(deleted) >= len(users) * 41, results  # each old call and its messages
            after = await _removals(store_target)
            if _pg(store_target):
                for user in users:
                    bucket = await _bucket(store_target, user)
                    assert 1 <= after[bucket] - before.get(bucket, 0) <= 2
            else:
                assert after["file"] - before["file"] == len(users) * 40  # one per row
        found = []
        for store in (fresh, one, two):
            found.append([_keys(await store.search("card", user_id=u, limit=50)) for u in users])
    finally:
        for store in (one, two, fresh):
            await store.close()
    assert errors == []
    assert found[0][0] == [(f"{users[0]}-new", i) for i in range(10)]
    assert found[1] == found[0] and found[2] == found[0]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_removals_forgets_and_purges_at_once(store_target):
    # one worker forgets callers while another purges everyone's old calls, at the same
    # moment, four rounds (a caller who asks to be forgotten as the nightly purge runs).
    # SQLite serializes them (PostgreSQL deadlocked: S13-A-2, the test below). Every forget
    # and every purge must end without an error and leave nothing of the forgotten callers
    one, two, fresh = (open_store(store_target) for _ in range(3))
    errors: list[BaseException] = []
    try:
        for r in range(ROUNDS):
            now = time.time() + r
            users = [f"{u}f{r}" for u in USERS[:6]]
            await _callers(one, now, users)
            ops = [lambda: two.purge_older_than(30)]
            ops += [(lambda u=u: one.forget(u)) for u in users[::2]]
            results = await _at_once(*ops)
            errors += [e for e in results if isinstance(e, BaseException)]
        left = [
            len(await fresh.calls(u))
            for r in range(ROUNDS)
            for u in [f"{u}f{r}" for u in USERS[:6]][::2]
        ]
        kept = [
            len(await fresh.calls(u))
            for r in range(ROUNDS)
            for u in [f"{u}f{r}" for u in USERS[:6]][1::2]
        ]
    finally:
        for store in (one, two, fresh):
            await store.close()
    assert [type(e).__name__ + str(e)[:200] for e in errors] == []
    assert left == [0] * len(left)
    assert kept == [1] * len(kept)  # their recent call, the old one purged


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_removals_a_forget_meets_a_purge_half_done(store_target):
    # the race above, made certain: a purge (another process's, its statements run one by
    # one) has deleted al's old call; the store's forget of al deletes al's messages and
    # waits for that call's row; the purge then deletes the old messages, al's among them.
    # Both must end (one waiting for the other), the forget without an error
    import asyncpg

    from pipecat_summarizer.store._statements import purge_cutoff, purge_statements

    store, fresh = open_store(store_target), open_store(store_target)
    purger = await asyncpg.connect(store_target)
    watch = await asyncpg.connect(store_target)
    now = time.time()
    forget = None
    outcome: dict[str, object] = {}
    try:
        await _callers(store, now, ["al", "bo"])
        statements = [sql for sql, _ in purge_statements("$")]
        calls_at = next(i for i, sql in enumerate(statements) if "FROM calls" in sql)
        cutoff = purge_cutoff(30)
        tr = purger.transaction()
        await tr.start()
        for sql in statements[: calls_at + 1]:
            await purger.execute(sql, cutoff)
        forget = asyncio.ensure_future(store.forget("al"))
        for _ in range(2000):  # until the forget waits for the call's row
            if forget.done() or await watch.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            ):
                break
            await asyncio.sleep(0.01)
        try:
            for sql in statements[calls_at + 1 :]:
                await purger.execute(sql, cutoff)
            await tr.commit()
            outcome["purge"] = "done"
        except asyncpg.PostgresError as e:
            outcome["purge"] = type(e).__name__
            await tr.rollback()
        try:
            outcome["forget"] = await asyncio.wait_for(forget, HANG_S)
        except asyncpg.PostgresError as e:
            outcome["forget"] = type(e).__name__
        forget = None
        outcome["al"] = await fresh.calls("al")
    finally:
        if forget is not None:
            forget.cancel()
        await purger.close()
        await watch.close()
        for s in (store, fresh):
            await s.close()
    assert outcome["purge"] == "done"
    assert isinstance(outcome["forget"], int) and outcome["al"] == []


#: A caller in al's bucket of removals on PostgreSQL (md5 972...), and one in another.
AL_TWIN = "al-twin-4325"


@pytest.mark.parametrize(
    "other",
    [
        "bo",
        AL_TWIN,  # S13-A-3: once held up by the forget (buckets updated in place, 6a866ff)
    ],
)
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_removals_a_held_forget_holds_up_no_purge_of_another_caller(store_target, other):
    # al's forget held open (al's rows a day old: nothing of his is purged); a new worker's
    # retention purge as it opens deletes another caller's old call. It must not wait for
    # al's forget (it did not before schema v8, nor with removals keyed by caller): a caller
    # in al's bucket of removals (6a866ff) makes it wait on al's bucket row
    import asyncpg

    worker = open_store(store_target)
    watch = await asyncpg.connect(store_target)
    now = time.time()
    end = None
    opening = None
    opened = open_store(store_target, retention_days=30)
    try:
        await _callers(worker, now, [other])
        await _callers(worker, now, ["al"], old_days=1.5)
        end = await _held_forget(store_target, "al")
        opening = asyncio.ensure_future(opened.open())
        waiting = 0
        for _ in range(300):  # until it opened, or waits for a lock
            waiting = await watch.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            )
            if waiting or opening.done():
                break
            await asyncio.sleep(0.02)
        await end(False)
        end = None
        await asyncio.wait_for(opening, HANG_S)
        calls = await worker.calls(other)
    finally:
        if end is not None:
            await end(False)
        if opening is not None and not opening.done():
            opening.cancel()
        await watch.close()
        for store in (worker, opened):
            await store.close()
    assert waiting == 0  # the purge never waited for al's forget
    assert len(calls) == 1  # the old call purged, the new kept


#: A caller in bo's bucket of removals on PostgreSQL (md5 ad7...).
BO_TWIN = "bo-twin-9794"


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_removals_two_batch_deletes_of_different_callers(store_target):
    # two operators' batch jobs (a retention script by caller, a GDPR export-then-delete),
    # each deleting several callers' messages in one transaction, one statement per caller:
    # job one al then bo, job two bo's twin then al's twin. They share no message, no caller
    # (before schema v8 neither waited for the other), but each statement's trigger locks its
    # caller's bucket of removals until the job commits: al's and bo's buckets in opposite
    # orders. Both jobs must commit
    import asyncpg

    admin = open_store(store_target)
    now = time.time()
    jobs = [await asyncpg.connect(store_target) for _ in range(2)]
    try:
        for user in ("al", "bo", AL_TWIN, BO_TWIN):
            await admin.write([_msg(f"{user}-c", i, f"card {i}", now + i, user) for i in range(3)])
        orders = [("al", "bo"), (BO_TWIN, AL_TWIN)]
        trs = [job.transaction() for job in jobs]
        for tr in trs:
            await tr.start()
        delete = "DELETE FROM messages WHERE user_id = $1"
        for job, order in zip(jobs, orders, strict=True):
            await job.execute(delete, order[0])

        async def finish(job, tr, user) -> str:
            try:
                await job.execute(delete, user)
                await tr.commit()
                return "committed"
            except asyncpg.PostgresError as e:
                await tr.rollback()
                return type(e).__name__

        ends = await asyncio.wait_for(
            asyncio.gather(
                *(
                    finish(job, tr, order[1])
                    for job, tr, order in zip(jobs, trs, orders, strict=True)
                )
            ),
            HANG_S,
        )
    finally:
        for job in jobs:
            await job.close()
        await admin.close()
    assert ends == ["committed", "committed"]

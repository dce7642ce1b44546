"""Attacks on a kept word count after removals elsewhere: first on "it stands only while the
oldest row it counted does" (1a92e4e, 5bcac9a), which S12-B-1 and S12-B-2 broke; since
session 13 on "it stands while the database's removals are unchanged" (schema v8:
``_sqlite_search.word_counts``, ``_postgres_search.caller_statement``).

A worker's store object keeps its searches' counts of common words; another store object
(another process) forgets, purges or writes. The worker's search must find what a fresh
store finds: a stale count keeps a word out of the search (its rarer neighbours fill
``KEEP_MATCHES``/``RANK_MATCHES``). Each case runs on both backends; a fresh store is the
reference.
"""

from __future__ import annotations

import json
import time

import pytest

from pipecat_summarizer.store import (
    PostgresMemoryStore,
    SQLiteMemoryStore,
    _postgres_pool,
    _postgres_writes,
    open_store,
)
from pipecat_summarizer.store._postgres_search import KEEP_MATCHES
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord

MANY = KEEP_MATCHES + 50  # a word in more of the caller's messages than a search ranks


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


def _keys(hits) -> list[tuple[str, int]]:
    return sorted((h.call_id, h.position) for h in hits)


async def _both(worker, fresh, query: str, user: str = "al"):
    want = await fresh.search(query, user_id=user, any_word=True, limit=20)
    got = await worker.search(query, user_id=user, any_word=True, limit=20)
    return _keys(want), _keys(got)


async def test_a_forget_elsewhere_with_several_common_words(store_target):
    # three common words kept, then al is forgotten elsewhere and says them all again
    worker, admin, fresh = (open_store(store_target) for _ in range(3))
    old = time.time() - 86400
    words = ["card", "order", "refund"]
    try:
        await worker.write(
            [
                _msg(
                    f"old-{i // 500}", i % 500, f"{words[i % 3]} {words[(i + 1) % 3]} {i}", old + i
                )
                for i in range(MANY)
            ]
        )
        assert await worker.search("card order refund zebra", user_id="al", any_word=True)
        await admin.forget("al")
        back = time.time() + 1
        await admin.write(
            [
                CallRecord("new", user_id="al", started_at=back),
                _msg("new", 0, "my card order", back),
                _msg("new", 1, "zebra print", back + 1),
                _msg("new", 2, "the refund again", back + 2),
            ]
        )
        want, got = await _both(worker, fresh, "card order refund zebra")
    finally:
        for store in (worker, admin, fresh):
            await store.close()
    assert want == [("new", 0), ("new", 1), ("new", 2)]
    assert got == want


async def test_a_word_counted_for_two_callers_one_forgotten(store_target):
    # al and bo both say "card" thousands of times; al is forgotten elsewhere: bo's kept
    # count stands (right), al's is counted again
    worker, admin, fresh = (open_store(store_target) for _ in range(3))
    old = time.time() - 86400
    try:
        for user in ("al", "bo"):
            await worker.write(
                [
                    _msg(f"{user}-{i // 500}", i % 500, f"card {i}", old + i, user)
                    for i in range(MANY)
                ]
            )
            assert await worker.search("card zebra", user_id=user, any_word=True)
        await admin.forget("al")
        now = time.time() + 1
        await admin.write(
            [
                CallRecord("al-new", user_id="al", started_at=now),
                _msg("al-new", 0, "card declined", now),
                _msg("al-new", 1, "zebra card", now + 1),
                _msg("bo-new", 0, "zebra stripes", now + 2, "bo"),
            ]
        )
        al_want, al_got = await _both(worker, fresh, "card zebra", "al")
        bo_want, bo_got = await _both(worker, fresh, "card zebra", "bo")
    finally:
        for store in (worker, admin, fresh):
            await store.close()
    assert al_want == [("al-new", 0), ("al-new", 1)] and al_got == al_want
    assert ("bo-new", 0) in bo_want and bo_got == bo_want


async def test_a_count_kept_by_a_call_scoped_search_then_a_caller_search(store_target):
    # the worker first searches one call of al's (call-scoped), then by caller; al is
    # forgotten elsewhere in between and comes back
    worker, admin, fresh = (open_store(store_target) for _ in range(3))
    old = time.time() - 86400
    try:
        await worker.write([_msg("old-0", i, f"card {i}", old + i) for i in range(MANY)])
        await worker.search("card zebra", user_id="al", call_id="old-0", any_word=True)
        await worker.search("card zebra", user_id="al", any_word=True)
        await admin.forget("al")
        now = time.time() + 1
        await admin.write(
            [
                CallRecord("old-0", user_id="al", started_at=now),
                _msg("old-0", 0, "card declined", now),
                _msg("old-0", 1, "zebra card", now + 1),
            ]
        )
        want = _keys(await fresh.search("card zebra", user_id="al", call_id="old-0", any_word=True))
        got = _keys(await worker.search("card zebra", user_id="al", call_id="old-0", any_word=True))
        caller_want, caller_got = await _both(worker, fresh, "card zebra")
    finally:
        for store in (worker, admin, fresh):
            await store.close()
    assert want == [("old-0", 0), ("old-0", 1)] and got == want
    assert caller_got == caller_want == want


async def test_a_purge_of_the_oldest_rows_only(store_target):
    # the 100 oldest of al's "card" messages are past retention, the rest not: the kept
    # count's oldest row goes, so it is counted again (3,050 -> 2,950: "card" searched)
    worker, admin, fresh = (open_store(store_target) for _ in range(3))
    now = time.time()
    try:
        await worker.write(
            [_msg("old", i, f"card {i}", now - 60 * 86400 + i) for i in range(100)]
            + [
                _msg(f"mid-{i // 500}", i % 500, f"card {i}", now - 86400 + i)
                for i in range(MANY - 100)
            ]
        )
        assert await worker.search("card zebra", user_id="al", any_word=True)
        assert await admin.purge_older_than(30) >= 100
        await admin.write(
            [_msg("new", 0, "zebra card", now + 1), _msg("new", 1, "card zebra card", now + 2)]
        )
        want, got = await _both(worker, fresh, "card zebra")
    finally:
        for store in (worker, admin, fresh):
            await store.close()
    assert ("new", 0) in want and ("new", 1) in want
    assert got == want


async def test_a_purge_of_a_backfilled_import(store_target):
    # al says "card" in 100 recent messages; then an import of his old history (times 90
    # days back, written after: the newest ids/rowids) adds 3,000 "card" messages. The
    # worker counts "card" (over KEEP_MATCHES), another process purges by time: the import
    # goes, the recent messages stay, among them the row the kept count checked (the oldest
    # by id on both backends), so the count of 3,100 stood where 102 remain and "card" was
    # left out of al's search: only the "zebra" hit, where a fresh store finds al's "card"
    # messages too (S12-B-1, fixed by the removals).
    worker, admin, fresh = (open_store(store_target) for _ in range(3))
    now = time.time()
    try:
        await worker.write(
            [_msg(f"recent-{i // 50}", i % 50, f"card {i}", now - 3600 + i) for i in range(100)]
        )
        await worker.write(
            [
                _msg(f"import-{i // 500}", i % 500, f"card {i}", now - 90 * 86400 + i)
                for i in range(KEEP_MATCHES)
            ]
        )
        assert await worker.search("card zebra", user_id="al", any_word=True)
        assert await admin.purge_older_than(30) >= KEEP_MATCHES
        await admin.write(
            [_msg("new", 0, "zebra card", now + 1), _msg("new", 1, "card zebra card", now + 2)]
        )
        want, got = await _both(worker, fresh, "card zebra")
    finally:
        for store in (worker, admin, fresh):
            await store.close()
    assert len(want) == 20 and ("new", 1) in want
    assert got == want


@pytest.mark.parametrize("skew", [0.0, 7200.0])
async def test_sqlite_a_reused_rowid_with_the_very_same_time(tmp_path, skew):
    # SQLite reuses a deleted row's id (al's rows were the last); al's archive is forgotten
    # elsewhere, and his first new message has the very time of his old oldest one: id and
    # time both matched the kept count's anchor (S12-B-2, fixed by the removals: the
    # forget bumped them). With times in the past (a re-import) the
    # forget's tombstone refuses the write; with a clock two hours ahead (skew) the archive's
    # times are after the forget's and the write goes through
    path = str(tmp_path / "m.db")
    worker, admin, fresh = (SQLiteMemoryStore(path) for _ in range(3))
    old = time.time() - 86400 + skew + (86400 if skew else 0)
    try:
        await worker.write(
            [_msg(f"old-{i // 500}", i % 500, f"card {i}", old + i) for i in range(MANY)]
        )
        assert await worker.search("card zebra", user_id="al", any_word=True)
        await admin.forget("al")
        await admin.write(
            [
                CallRecord("re", user_id="al", started_at=old),
                _msg("re", 0, "card declined", old),
                _msg("re", 1, "zebra card", old + 1),
            ]
        )
        want, got = await _both(worker, fresh, "card zebra")
    finally:
        for store in (worker, admin, fresh):
            await store.close()
    assert want == ([("re", 0), ("re", 1)] if skew else [])
    assert got == want


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_postgres_the_edge_check_sends_no_extra_statement(store_target, monkeypatch):
    # every statement a pool connection runs is logged (asyncpg's query logger): a search
    # by caller whose common word's count is kept, whose kept count's row went (a forget
    # elsewhere), or that counts afresh, sends one statement each
    sent: list[str] = []
    logged: set[int] = set()
    enter = _postgres_pool.Lease.__aenter__

    async def logging_enter(self):
        conn = await enter(self)
        raw = conn._con if hasattr(conn, "_con") else conn
        if id(raw) not in logged:
            logged.add(id(raw))
            conn.add_query_logger(lambda q: sent.append(q.query))
        return conn

    monkeypatch.setattr(_postgres_pool.Lease, "__aenter__", logging_enter)
    worker, admin = PostgresMemoryStore(store_target), PostgresMemoryStore(store_target)
    old = time.time() - 86400
    try:
        await worker.write(
            [_msg(f"o-{i // 500}", i % 500, f"card {i}", old + i) for i in range(MANY)]
        )
        await worker.write([_msg("z", 0, "zebra", old + MANY, "bo")])
        per_search = []
        for _ in range(3):  # counted, then kept (twice)
            sent.clear()
            assert await worker.search("card zebra", user_id="al", any_word=True)
            per_search.append(len(sent))
        await admin.forget("al")
        back = time.time() + 1
        await admin.write(
            [CallRecord("n", user_id="al", started_at=back), _msg("n", 0, "card zebra", back)]
        )
        sent.clear()
        hits = await worker.search("card zebra", user_id="al", any_word=True)
        per_search.append(len(sent))
    finally:
        for store in (worker, admin):
            await store.close()
    assert sent  # the logger saw the statements
    assert [(h.call_id, h.position) for h in hits] == [("n", 0)]
    print(f"statements per search (counted, kept, kept, edge gone): {per_search}")
    assert per_search == [1, 1, 1, 1], sent


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_postgres_a_forget_under_way_in_another_process_then_committed(store_target):
    # another process's forget has deleted al's rows but not committed: the worker still
    # sees them (its count kept, its hits the old ones); once committed and al back, the
    # worker finds what a fresh store finds
    asyncpg = pytest.importorskip("asyncpg")
    worker, admin, fresh = (PostgresMemoryStore(store_target) for _ in range(3))
    old = time.time() - 86400
    conn = await asyncpg.connect(store_target)
    try:
        await worker.write(
            [_msg(f"o-{i // 500}", i % 500, f"card {i}", old + i) for i in range(MANY)]
        )
        await worker.write([_msg("z", 0, "zebra stripes", old + MANY)])
        before = _keys(await worker.search("card zebra", user_id="al", any_word=True, limit=20))
        forgetting = conn.transaction()
        await forgetting.start()
        assert await _postgres_writes.forget(conn, "al", time.time()) > MANY
        during = _keys(await worker.search("card zebra", user_id="al", any_word=True, limit=20))
        await forgetting.commit()
        gone = await worker.search("card zebra", user_id="al", any_word=True, limit=20)
        back = time.time() + 1
        await admin.write(
            [
                CallRecord("new", user_id="al", started_at=back),
                _msg("new", 0, "card declined", back),
                _msg("new", 1, "a zebra card", back + 1),
            ]
        )
        want, got = await _both(worker, fresh, "card zebra")
    finally:
        await conn.close()
        for store in (worker, admin, fresh):
            await store.close()
    assert ("z", 0) in before and during == before
    assert gone == []
    assert want == [("new", 0), ("new", 1)] and got == want

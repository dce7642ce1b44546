"""An UPDATE of what a search counts bumps the removals (S13-A-1); the store's own writes do
not: a message written again (its removal and compaction changed, as the recorder does when
an evicted message is summarized later) leaves a kept count standing, on both backends.
On PostgreSQL an operator's move of a caller's messages to another caller makes a worker
that kept the first caller's count count again.
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import closing

import pytest

from pipecat_summarizer.store import open_store
from pipecat_summarizer.store._postgres_search import KEEP_MATCHES
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord

MANY = KEEP_MATCHES + 50  # a word in more of the caller's messages than a search ranks
DAY = 86400.0


def _msg(call: str, i: int, text: str, at: float, **kw) -> ArchivedMessage:
    return ArchivedMessage(
        call_id=call,
        position=i,
        role="user",
        content=text,
        message_json=json.dumps({"role": "user", "content": text}),
        turn=i // 2,
        at=at,
        user_id=kw.pop("user_id", "al"),
        **kw,
    )


async def _sql(target: str, sql: str) -> object:
    """One statement by an operator's own connection (autocommit): its first value."""
    if target.startswith("postgres"):
        import asyncpg

        conn = await asyncpg.connect(target)
        try:
            return await conn.fetchval(sql)
        finally:
            await conn.close()
    with closing(sqlite3.connect(target, isolation_level=None)) as conn:
        row = conn.execute(sql).fetchone()
        return row[0] if row else None


async def _removals(target: str) -> object:
    if target.startswith("postgres"):
        return await _sql(target, "SELECT (count(*), COALESCE(sum(n), 0))::text FROM removals")
    return await _sql(target, "SELECT n FROM removals")


async def test_store2_the_stores_own_rewrites_bump_no_removal(store_target):
    store = open_store(store_target)
    now = time.time()
    try:
        batch = [_msg("c", i, f"card {i}", now - DAY + i, removed_by="evicted") for i in range(50)]
        await store.write([CallRecord("c", user_id="al", started_at=now - DAY), *batch])
        before = await _removals(store_target)
        # written again: summarized now (the upsert sets removed_by and compaction)
        await store.write(
            [_msg("c", i, f"card {i}", now - DAY + i, compaction=1) for i in range(50)]
        )
        # an operator's UPDATE of a column no search reads
        await _sql(store_target, "UPDATE messages SET removed_by = 'cleared' WHERE position < 5")
        after = await _removals(store_target)
        # an UPDATE of content that changes nothing (SQLite compares; PostgreSQL bumps
        # for any statement setting content, user_id or at)
        await _sql(store_target, "UPDATE messages SET content = content WHERE position < 5")
        same = await _removals(store_target)
        await _sql(store_target, "UPDATE messages SET content = 'redacted' WHERE position < 5")
        redacted = await _removals(store_target)
    finally:
        await store.close()
    assert after == before
    assert (same == before) == (not store_target.startswith("postgres"))
    assert redacted != same


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_store2_an_operator_moves_messages_to_another_caller(store_target):
    # al's MANY old "card" messages moved to bo (a merge of accounts gone wrong, a fix of a
    # wrong caller id): "card" is now rare for al; the worker that kept al's count must
    # count it again and rank al's new card messages as a fresh store does
    worker, fresh = open_store(store_target), open_store(store_target)
    now = time.time()
    try:
        await worker.write(
            [_msg(f"o-{i // 500}", i % 500, f"card {i}", now - DAY + i) for i in range(MANY)]
        )
        assert await worker.search("card zebra", user_id="al", any_word=True)
        await _sql(store_target, "UPDATE messages SET user_id = 'bo' WHERE call_id LIKE 'o-%'")
        started = time.time()
        await worker.write(
            [
                CallRecord("new", user_id="al", started_at=started),
                _msg("new", 0, "zebra card", started + 1),
                _msg("new", 1, "card zebra card", started + 2),
                _msg("new", 2, "my card again", started + 3),
            ]
        )
        want = await fresh.search("card zebra", user_id="al", any_word=True, limit=20)
        got = await worker.search("card zebra", user_id="al", any_word=True, limit=20)
    finally:
        for store in (worker, fresh):
            await store.close()
    want_keys = sorted((h.call_id, h.position) for h in want)
    assert want_keys == [("new", 0), ("new", 1), ("new", 2)]
    assert sorted((h.call_id, h.position) for h in got) == want_keys

"""Parity of the two backends under the removal counts (schema v8, 4e5b3cd, 6a866ff): the
same archive on SQLite and on PostgreSQL, a worker on each that kept al's common words'
counts, then what the other attacks do one after another: a forget of a caller of al's
bucket of removals, a caller with the EVERYONE row's text forgotten, a purge of the old
messages, al's messages deleted one by one (each its own transaction, to none). After each
step the two workers and a fresh store on each find the same hits (the searches return
every match: no ranking difference between BM25 and ts_rank_cd can hide one).
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import closing

from pipecat_summarizer.store import SQLiteMemoryStore, open_store
from pipecat_summarizer.store._postgres_schema import EVERYONE
from pipecat_summarizer.store._postgres_search import KEEP_MATCHES
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord

DAY = 86400.0
MANY = KEEP_MATCHES + 50
AL_TWIN = "al-twin-4325"  # al's bucket of removals on PostgreSQL (md5 972...)
QUERIES = ("card zebra", "zebra", "card")


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


async def _archive(store, now: float) -> None:
    """al: MANY old "card" messages (90 days) and five recent ones (two with "zebra");
    al's bucket twin and EVERYONE's text: 300 recent "card" each."""
    await store.write(
        [_msg(f"o-{i // 500}", i % 500, f"card {i}", now - 90 * DAY + i, "al") for i in range(MANY)]
    )
    recent = ["zebra card", "my card", "a zebra", "card again", "the card"]
    await store.write(
        [
            CallRecord("r", user_id="al", started_at=now - 3600),
            *(_msg("r", i, t, now - 3600 + i, "al") for i, t in enumerate(recent)),
        ]
    )
    for user in (AL_TWIN, EVERYONE):
        await store.write(
            [_msg(f"{user}-c", i, f"card {i}", now - 60 + i, user) for i in range(300)]
        )


async def _found(stores: dict) -> dict:
    """Each store's hits for al, for each query (every match: limit past their number)."""
    out = {}
    for name, store in stores.items():
        out[name] = {
            q: sorted(
                (h.call_id, h.position)
                for h in await store.search(q, user_id="al", any_word=True, limit=MANY + 20)
            )
            for q in QUERIES
        }
    return out


async def _sql(sqlite_path: str, dsn: str, sql: str, *args) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql.replace("?", "$1"), *args)
    finally:
        await conn.close()
    with closing(sqlite3.connect(sqlite_path, isolation_level=None)) as lite:
        lite.execute(sql, args)


async def test_removals_both_backends_find_the_same_after_each_attack(tmp_path, pg_server):
    path = str(tmp_path / "m.db")
    dsn = pg_server.create_database(f"s13_removals_parity_{time.monotonic_ns()}")
    now = time.time()
    workers = {"sqlite": SQLiteMemoryStore(path), "postgres": open_store(dsn)}
    steps: dict[str, dict] = {}
    try:
        for store in workers.values():
            await _archive(store, now)

        async def step(name: str) -> None:
            fresh = {"sqlite fresh": SQLiteMemoryStore(path), "postgres fresh": open_store(dsn)}
            try:
                steps[name] = await _found({**workers, **fresh})
            finally:
                for store in fresh.values():
                    await store.close()

        await step("kept")
        for store in workers.values():
            await store.forget(AL_TWIN)
        await step("twin forgotten")
        for store in workers.values():
            await store.forget(EVERYONE)
        await step("EVERYONE's text forgotten")
        for store in workers.values():
            await store.purge_older_than(30)
        await step("purged")
        for position in range(5):
            await _sql(
                path, dsn, "DELETE FROM messages WHERE call_id = 'r' AND position = ?", position
            )
            await step(f"al's message {position} deleted")
    finally:
        for store in workers.values():
            await store.close()
    differ = {
        name: found
        for name, found in steps.items()
        if any(found[store] != found["sqlite"] for store in found)
    }
    assert differ == {}
    assert steps["kept"]["sqlite"]["zebra"] == [("r", 0), ("r", 2)]
    assert len(steps["kept"]["sqlite"]["card zebra"]) == 2  # "card" left unranked
    assert steps["purged"]["sqlite"]["card zebra"] == [("r", i) for i in range(5)]
    assert steps["al's message 2 deleted"]["sqlite"]["card zebra"] == [("r", 3), ("r", 4)]
    assert steps["al's message 4 deleted"]["sqlite"] == {q: [] for q in QUERIES}

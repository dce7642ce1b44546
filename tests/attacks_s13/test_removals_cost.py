"""What a hostile caller can make others' searches cost through the removal counts (schema
v8, 4e5b3cd, 6a866ff): messages deleted one by one, each in its own transaction (a caller
who asks again and again to be forgotten, a script deleting a caller's messages row by
row). Each delete bumps the removals: on SQLite the file's (every kept count of every
caller is counted again at the next search), on PostgreSQL the deleted caller's bucket of
callers (4,096: a caller of al's bucket makes al count again; another's does not).

Checked (not timed): which deletes make al's worker count his kept words again, and that
it always finds what a fresh store finds. Printed (``-s``): al's search times with his
counts kept and with a delete before each search; never asserted (a noisy machine).
``PCS_REMOVALS_COST_SEARCHES`` sets the searches per mode (default 12).
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import time

from pipecat_summarizer.store import SQLiteMemoryStore, _sqlite_schema, open_store
from pipecat_summarizer.store.records import ArchivedMessage

SEARCHES = int(os.environ.get("PCS_REMOVALS_COST_SEARCHES", "12"))
#: al's messages: "card" in all (past RANK_MATCHES), "flight" in 1 of 5, "hotel" in 1 of 10
AL_MESSAGES = 8000
QUERY = "card flight hotel zebra"
#: A caller in al's bucket of removals on PostgreSQL (md5 972...), and one in another.
AL_TWIN = "al-twin-4325"


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


def _text(i: int) -> str:
    words = ["card", f"n{i}"]
    words += ["flight"] if i % 5 == 0 else []
    words += ["hotel"] if i % 10 == 0 else []
    return " ".join(words)


def _keys(hits) -> list[tuple[str, int]]:
    return sorted((h.call_id, h.position) for h in hits)


def _kept(store) -> dict:
    """The worker's kept counts (al's words) and when each was counted."""
    if isinstance(store, SQLiteMemoryStore):
        scope = _sqlite_schema.scope_range(_sqlite_schema.scope_of("al", ""))
        return {w: v[2] for (s, w), v in store._df.items() if s == scope}
    return {w: v[2] for (u, w), v in store._df.items() if u == "al"}


class _Deleter:
    """Deletes one message of ``user`` per call, each in its own transaction (autocommit)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.conn = None

    async def __call__(self, user: str) -> None:
        sql = "DELETE FROM messages WHERE id = (SELECT min(id) FROM messages WHERE user_id = {m})"
        if self.target.startswith("postgres"):
            import asyncpg

            if self.conn is None:
                self.conn = await asyncpg.connect(self.target)
            assert await self.conn.execute(sql.format(m="$1"), user) == "DELETE 1"
            return
        if self.conn is None:
            self.conn = sqlite3.connect(self.target, isolation_level=None)
        assert self.conn.execute(sql.format(m="?"), (user,)).rowcount == 1

    async def close(self) -> None:
        if self.conn is None:
            return
        if self.target.startswith("postgres"):
            await self.conn.close()
        else:
            self.conn.close()


async def test_removals_deletes_one_by_one_cost_and_recounts(store_target):
    pg = store_target.startswith("postgres")
    worker, fresh = open_store(store_target), open_store(store_target)
    delete = _Deleter(store_target)
    now = time.time() - 3600
    figures: dict[str, list[float]] = {}
    recounted: dict[str, int] = {}
    parity: dict[str, bool] = {}
    try:
        for start in range(0, AL_MESSAGES, 2000):
            await worker.write(
                [
                    _msg(f"al-{i // 500}", i % 500, _text(i), now + i * 0.01, "al")
                    for i in range(start, start + 2000)
                ]
            )
        await worker.write([_msg("al-z", 0, "zebra card", now + 100, "al")])
        for user in (AL_TWIN, "bo"):
            await worker.write(
                [_msg(f"{user}-c", i, f"card {i}", now + i, user) for i in range(SEARCHES * 4)]
            )
        await worker.search(QUERY, user_id="al", any_word=True)  # counted, kept
        assert set(_kept(worker)) >= {"flight", "hotel"}
        modes = ["kept", "a twin's delete", "another's delete"]
        for mode in modes:
            figures[mode], recounted[mode] = [], 0
        for _ in range(SEARCHES):
            for mode in modes:
                if mode == "a twin's delete":
                    await delete(AL_TWIN)
                elif mode == "another's delete":
                    await delete("bo")
                was = _kept(worker)
                t0 = time.perf_counter()
                await worker.search(QUERY, user_id="al", any_word=True, limit=10)
                figures[mode].append((time.perf_counter() - t0) * 1000)
                recounted[mode] += _kept(worker) != was
        for mode, user in (("a twin's delete", AL_TWIN), ("another's delete", "bo")):
            await delete(user)
            want = _keys(await fresh.search(QUERY, user_id="al", any_word=True, limit=10))
            got = _keys(await worker.search(QUERY, user_id="al", any_word=True, limit=10))
            parity[mode] = got == want
    finally:
        await delete.close()
        for store in (worker, fresh):
            await store.close()
    backend = "postgres" if pg else "sqlite"
    for mode, times in figures.items():
        times.sort()
        print(
            f"\n{backend} al's search ({AL_MESSAGES} messages, {len(times)} searches), {mode}: "
            f"median {statistics.median(times):.2f} ms, max {times[-1]:.2f} ms, "
            f"recounted {recounted[mode]}"
        )
    assert recounted["kept"] == 0
    assert recounted["a twin's delete"] == SEARCHES  # every delete in al's bucket (file)
    assert recounted["another's delete"] == (0 if pg else SEARCHES)
    assert parity == {"a twin's delete": True, "another's delete": True}

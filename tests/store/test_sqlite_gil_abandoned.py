"""A read the caller stopped waiting for (a recall search the frame gave up on: the
gathered words' second search, the corrected values' search, the call's end) is interrupted
on the SQLite store's thread, never left to run for nobody: it would hold up the next
turn's search queued behind it, and take the interpreter's lock from the event loop row
after row while the loop finishes the frame."""

from __future__ import annotations

import asyncio

from pipecat_summarizer.store import ArchivedMessage, SQLiteMemoryStore

#: A statement that runs for tens of seconds unless interrupted (SQLite counts to 2e8).
ENDLESS = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000000) "
    "SELECT max(x) FROM c"
)


class EndlessReads(SQLiteMemoryStore):
    """A real store with one more read: a query that runs for long unless interrupted."""

    async def endless(self) -> int:
        return await self._run(lambda conn: conn.execute(ENDLESS).fetchone()[0], read=True)


def _message(i: int) -> ArchivedMessage:
    text = f"The Marquis hotel room is {400 + i}."
    return ArchivedMessage("c1", i, "user", text, "{}", turn=i, at=1.7e9 + i, user_id="alice")


async def test_a_read_nobody_waits_for_is_interrupted_and_the_next_one_runs(tmp_path):
    store = EndlessReads(tmp_path / "memory.db")
    try:
        await store.write([_message(i) for i in range(3)])
        abandoned = asyncio.ensure_future(store.endless())
        await asyncio.sleep(0.05)  # running on the store's thread by now
        abandoned.cancel()
        # the thread is free: a search queued behind it answers at once (not a timing: left
        # to run, the first read holds the thread for tens of seconds)
        hits = await asyncio.wait_for(store.search("Marquis room", user_id="alice"), 5)
        assert len(hits) == 3
        assert abandoned.cancelled()
    finally:
        await store.close()


async def test_a_cancelled_search_leaves_the_store_serving(tmp_path):
    store = SQLiteMemoryStore(tmp_path / "memory.db")
    try:
        await store.write([_message(i) for i in range(3)])
        for steps in range(6):  # cancelled queued, running, or just ended
            search = asyncio.ensure_future(store.search("Marquis", user_id="alice"))
            for _ in range(steps):
                await asyncio.sleep(0)
            search.cancel()
            await asyncio.gather(search, return_exceptions=True)
            assert len(await store.search("Marquis hotel", user_id="alice")) == 3
    finally:
        await store.close()

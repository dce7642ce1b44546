"""A recall search abandoned mid-way (the frame's budget ran out, the call ended) leaves
nothing behind on PostgreSQL: a search cancelled while the store's pool opens a new
connection never cancels that connect half-way (asyncpg then leaves a failed future nobody
reads: "Future exception was never retrieved ... unexpected connection_lost() call"), and
the connection it opens goes back to the pool."""

from __future__ import annotations

import asyncio
import gc

import pytest

from pipecat_summarizer.store import open_store

pytest.importorskip("asyncpg")


async def test_a_search_cancelled_while_the_pool_connects_leaves_no_stray_error(pg_server):
    dsn = pg_server.create_database("frame_teardown")
    errors: list[dict] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    store = open_store(dsn)
    try:
        await store.search("warm", user_id="caller", limit=1, any_word=True)  # the pool is up
        for steps in range(40):  # cancelled at each step of a new connection's opening
            busy = asyncio.ensure_future(store.search("one", user_id="caller", any_word=True))
            more = asyncio.ensure_future(store.search("two", user_id="caller", any_word=True))
            for _ in range(steps):
                await asyncio.sleep(0)
            more.cancel()
            await asyncio.gather(busy, more, return_exceptions=True)
        await asyncio.sleep(0.05)  # what a connect left running settles
        # the pool still serves: every connection opened meanwhile went back to it
        assert await store.search("three", user_id="caller", any_word=True) == []
    finally:
        await store.close()
    del busy, more
    gc.collect()  # an unread future's exception is reported when it is collected
    await asyncio.sleep(0)
    assert [c.get("message") for c in errors] == []

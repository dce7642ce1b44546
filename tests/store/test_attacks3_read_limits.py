"""Attack on the store's read limits (``calls(limit=)``, ``caller_memory(max_calls=)``):
past a signed 64-bit integer neither database takes the number (SQLite's OverflowError,
asyncpg's DataError, neither naming the argument): a clear ValueError instead. Both
backends."""

from __future__ import annotations

import pytest

from pipecat_summarizer.store import ArchivedMessage, open_store


async def test_a_read_limit_no_database_takes_is_a_clear_error(store_target):
    store = open_store(store_target)
    try:
        for read in (
            lambda: store.calls("al", limit=2**63),
            lambda: store.caller_memory("al", max_calls=10**20),
        ):
            with pytest.raises(ValueError, match="must be at most"):
                await read()
        assert await store.calls("al", limit=2**63 - 1) == []  # the largest still reads
    finally:
        await store.close()


async def test_a_search_limit_no_database_takes_is_a_clear_error(store_target):
    store = open_store(store_target)
    try:
        await store.write([ArchivedMessage("c1", 0, "user", "my dog Rex", "{}", user_id="al")])
        with pytest.raises(ValueError, match="limit must be at most"):
            await store.search("Rex", user_id="al", limit=2**63)
    finally:
        await store.close()

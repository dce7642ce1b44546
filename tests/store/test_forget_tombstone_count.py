"""A forget counts once in the process that ran it: reading its own tombstone back (as recall
does beside each search) must not count it a second time, on both backends; a tombstone
another process wrote counts once."""

from __future__ import annotations

import time

from pipecat_summarizer.store import open_store


async def test_own_forget_read_back_counts_once(store_target):
    store = open_store(store_target)
    other = open_store(store_target)  # another process's store object on the same database
    try:
        since = time.time() - 1
        await store.forget("al")
        assert store.forget_generation("al") == 1
        assert await store.noticed_forget("al", since) is False  # its own tombstone
        assert store.forget_generation("al") == 1
        # the other object never counted it: the tombstone counts once there
        assert await other.noticed_forget("al", since) is True
        assert await other.noticed_forget("al", since) is False
        assert other.forget_generation("al") == 1
    finally:
        await store.close()
        await other.close()

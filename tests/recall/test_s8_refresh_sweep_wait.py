"""A refresh never waits on a hung tombstone read: a store that takes no weak reference has
no sweep timer and is swept by each refresh, so the refresh itself makes the read. The call's
next words must still be indexed while that read hangs."""

from __future__ import annotations

import asyncio

from pipecat_summarizer._recall.semantic import SemanticIndex
from pipecat_summarizer._recall.vector_cache import cached_vectors
from pipecat_summarizer.store import open_store
from tests.recall.test_attacks2_vectors import _archive, _messages
from tests.recall.test_s8_attack_sweep import _Model, _semantic, _until
from tests.recall.test_s8_forget_elsewhere import _tag


class _NoWeakref:
    """An application's archive wrapper without ``__weakref__``: its tombstone read hangs
    until ``gate`` is set (a locked table, a stalling service)."""

    __slots__ = ("_store", "gate", "reads")

    def __init__(self, store):
        self._store, self.gate, self.reads = store, asyncio.Event(), 0

    def __getattr__(self, name):
        return getattr(self._store, name)

    async def tombstones(self, user_hashes):
        self.reads += 1
        await self.gate.wait()
        return await self._store.tombstones(user_hashes)


async def test_a_refresh_whose_own_sweep_hangs_still_lets_the_call_be_indexed(tmp_path):
    store = open_store(str(tmp_path / "m.db"))
    await store.open()
    archive = _NoWeakref(store)
    al = _tag("al")
    index = SemanticIndex(_semantic(_Model()), call_id="c2", user_id=al)
    try:
        cached_vectors(_Model(), ["warm"], _tag("bo"))  # a caller cached: the sweep reads
        await _archive(store, al, "c1", ["I keep bees on the roof.", "Bees, noted."])
        index.kick(archive)
        assert await _until(lambda: index.size == 2 and archive.reads > 0)
        await store.write(_messages("c2", al, ["My hive swarmed today.", "Oh no."]))
        for _ in range(3):  # the call's next turns kick again
            index.kick(archive)
            await asyncio.sleep(0.05)
        assert await _until(lambda: index.size == 4, 0.4), "the call's new words never indexed"
    finally:
        archive.gate.set()
        await index.close()
        await store.close()

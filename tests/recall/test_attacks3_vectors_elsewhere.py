"""Attack on the forget's reach into the process's vector cache: the caller's call here is
over (its index closed), then ANOTHER process forgets them (an admin tool, another worker).
Nothing of theirs is live here and ``on_forget`` hears only this process's forgets: the
vectors of their words stayed in this process's cache while other callers' calls went on.
Another call's refresh now reads the store's tombstones (``sweep_tombstones``, at most every
``TOMBSTONE_CHECK_S``: set to 0 here, so the next refresh reads them)."""

from __future__ import annotations

import time

from pipecat_summarizer._recall import vector_cache
from pipecat_summarizer._recall.semantic import SemanticIndex
from pipecat_summarizer.store import open_store
from tests.recall.test_attacks2_vectors import (
    PET,
    _archive,
    _cached,
    _forget_elsewhere,
    _unique,
    semantic,  # noqa: F401 - the module's fixture
)


async def test_another_processs_forget_after_the_call_ended_reaches_the_cache(
    tmp_path,
    semantic,  # noqa: F811
    monkeypatch,
):
    monkeypatch.setattr(vector_cache, "TOMBSTONE_CHECK_S", 0.0)
    target = str(tmp_path / "m.db")
    pet = _unique(PET, "elsewhere-ended")
    store = open_store(target)
    await store.open()
    try:
        await _archive(store, "al", "a1", [pet])
        await _archive(store, "bo", "b1", ["I collect stamps from Iceland."])
        index = SemanticIndex(semantic, call_id="a2", user_id="al")
        await index.refresh(store)
        await index.close()  # Al's call here is over
        assert _cached(semantic, pet)
        assert await _forget_elsewhere(target, "al") > 0
        # another caller's call goes on here: their turns search the same store
        since = time.time() - 3600
        bos = SemanticIndex(semantic, call_id="b2", user_id="bo")
        await bos.refresh(store)
        await store.search("stamps", user_id="bo")
        assert not await store.noticed_forget("bo", since)
        await bos.close()
        assert not _cached(semantic, pet)
    finally:
        await store.close()

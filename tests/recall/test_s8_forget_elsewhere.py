"""Attacks on the reach of another process's forget into this process's vector cache
(``vector_cache.sweep_tombstones``): both backends, a forget in a real subprocess, clocks
that disagree, many cached callers, several stores, a wrapper, a failing store, a chunk put
back after the drop.

"Another process" is mostly a tombstone written with plain SQL on another connection (what
its forget leaves; this process's own forget tells the cache at once, so it would prove
nothing); one test runs a real forget in a subprocess on PostgreSQL (the SQLite one is in
test_attacks3_vectors_elsewhere)."""

from __future__ import annotations

import asyncio
import sqlite3
import time

import numpy as np
import pytest
from loguru import logger

from pipecat_summarizer._recall import vector_cache
from pipecat_summarizer._recall.prefetch import PrefetchingArchive
from pipecat_summarizer._recall.semantic import SemanticIndex
from pipecat_summarizer._recall.vector_cache import _text_key, cached_vectors, sweep_tombstones
from pipecat_summarizer.store import open_store
from pipecat_summarizer.store._statements import tombstone_statement
from pipecat_summarizer.store.base import MemoryStore
from pipecat_summarizer.store.records import user_hash
from tests.recall.test_attacks2_vectors import (
    PET,
    _archive,
    _cached,
    _forget_elsewhere,
    _unique,
    semantic,  # noqa: F401 - the module's fixture
)


class _Tiny:
    """A model of its own (so a cache of its own): 4 dimensions, instant."""

    def embed(self, texts):
        return np.ones((len(texts), 4), np.float32)


@pytest.fixture
def tiny():
    return _Tiny()


@pytest.fixture(autouse=True)
def _every_refresh_sweeps(monkeypatch):
    monkeypatch.setattr(vector_cache, "TOMBSTONE_CHECK_S", 0.0)


def _tag(name: str) -> str:
    return f"{name}-{time.monotonic_ns()}"  # the cache is the process's: names never shared


def _put(model, owner: str, n: int = 1) -> list[str]:
    texts = [f"{owner} says thing {i}" for i in range(n)]
    cached_vectors(model, texts, owner)
    return texts


def _in(model, text: str) -> bool:
    return _text_key(text) in vector_cache._CACHES[model].rows


async def _tombstone(target: str, user_id: str, at: float) -> None:
    """What another process's forget leaves (its clock's ``at``), on another connection."""
    if target.startswith("postgres"):
        import asyncpg

        conn = await asyncpg.connect(target)
        try:
            await conn.execute(tombstone_statement("$"), user_hash(user_id), at)
        finally:
            await conn.close()
        return
    with sqlite3.connect(target) as conn:
        conn.execute(tombstone_statement("?"), (user_hash(user_id), at))


async def test_tombstones_read_by_hash_on_both_backends(store_target):
    store = open_store(store_target)
    await store.open()
    try:
        al, bo = _tag("al"), _tag("bo")
        assert await store.tombstones([]) == {}
        assert await store.tombstones([user_hash(al)]) == {}
        await _tombstone(store_target, al, 123.5)
        found = await store.tombstones([user_hash(al), user_hash(bo), user_hash(al), "x" * 64])
        assert found == {user_hash(al): 123.5}
        await store.forget(bo)  # this process's own forget: the same table, the same hash
        assert set(await store.tombstones([user_hash(al), user_hash(bo)])) == {
            user_hash(al),
            user_hash(bo),
        }
    finally:
        await store.close()
    # a closed store answers nothing, and a sweep never opens it again
    assert await store.tombstones([user_hash(al)]) == {}
    assert await sweep_tombstones(store) == 0
    assert getattr(store, "_thread", None) is None and getattr(store, "_pool", None) is None
    reader = open_store(store_target, read_only=True)  # an admin's read-only store reads them
    await reader.open()
    try:
        assert user_hash(al) in await reader.tombstones([user_hash(al)])
    finally:
        await reader.close()


async def test_clocks_that_disagree_never_hide_a_forget(store_target, tiny, monkeypatch):
    """The forgetting processes' clocks are an hour behind, a day ahead, then behind again:
    each new tombstone drops the caller's vectors (compared by value, not by time)."""
    monkeypatch.setattr(vector_cache, "REDROP_S", 0.0)  # their next call's vectors stay
    al, bo = _tag("al"), _tag("bo")
    store = open_store(store_target)
    await store.open()
    try:
        a, b = _put(tiny, al), _put(tiny, bo)
        assert await sweep_tombstones(store) == 0 and _in(tiny, a[0])
        for at in (time.time() - 3600, time.time() + 86400, time.time() - 7200):
            a = _put(tiny, al)  # their next call here, after the last forget
            assert await sweep_tombstones(store) == 0 and _in(tiny, a[0])  # nothing new
            await _tombstone(store_target, al, at)
            assert await sweep_tombstones(store) >= 1
            assert not _in(tiny, a[0])
            assert _in(tiny, b[0])  # another caller's stay
    finally:
        await store.close()


async def test_a_real_forget_in_another_process_reaches_the_cache_postgres(
    pg_server,
    tmp_path,
    semantic,  # noqa: F811
):
    """PostgreSQL: Al's call here ended, a worker elsewhere forgets him, Bo's next refresh
    here drops Al's vectors (and only his)."""
    target = pg_server.create_database(f"s8_forget_{time.monotonic_ns()}")
    pet, bos = _unique(PET, "s8-pg"), _unique("I collect stamps from Iceland.", "s8-pg")
    store = open_store(target)
    await store.open()
    try:
        await _archive(store, "al", "a1", [pet])
        await _archive(store, "bo", "b1", [bos])
        index = SemanticIndex(semantic, call_id="a2", user_id="al")
        await index.refresh(store)
        await index.close()
        assert await _forget_elsewhere(target, "al") > 0
        assert _cached(semantic, pet)
        bob = SemanticIndex(semantic, call_id="b2", user_id="bo")
        await bob.refresh(PrefetchingArchive(store))  # a call's wrapper: the store's sweep
        await bob.close()
        assert not _cached(semantic, pet) and _cached(semantic, bos)
    finally:
        await store.close()


async def test_many_cached_callers_are_read_in_batches(tmp_path, tiny):
    """A fleet worker's cache: 1,200 callers, three of them forgotten elsewhere: a read of
    the tombstones' key per 500 callers, exactly those three dropped."""
    target = str(tmp_path / "m.db")
    callers = [_tag(f"c{i}") for i in range(1200)]
    texts = {c: _put(tiny, c)[0] for c in callers}
    store = open_store(target)
    await store.open()
    try:
        await sweep_tombstones(store)
        watch = vector_cache._WATCHES[store]
        reads = watch.reads
        assert reads >= 3  # 1,200 of this test's callers, 500 a read
        gone = [callers[0], callers[600], callers[-1]]
        for c in gone:
            await _tombstone(target, c, time.time())
        assert await sweep_tombstones(store) == 3
        assert watch.reads - reads >= 3
        assert [c for c in callers if not _in(tiny, texts[c])] == gone
    finally:
        await store.close()


async def test_a_sweep_waits_its_interval_per_store_and_each_store_has_its_own(
    tmp_path, tiny, monkeypatch
):
    monkeypatch.setattr(vector_cache, "TOMBSTONE_CHECK_S", 3600.0)
    one, two = str(tmp_path / "one.db"), str(tmp_path / "two.db")
    al = _tag("al")
    a = _put(tiny, al)
    first, second = open_store(one), open_store(two)
    await first.open()
    await second.open()
    try:
        assert await sweep_tombstones(first) == 0  # read now; not again for an hour
        await _tombstone(one, al, time.time())
        await _tombstone(two, al, time.time())
        assert await sweep_tombstones(first) == 0 and _in(tiny, a[0])  # not due
        # the other store's sweep is its own, and its tombstone is as good as any
        assert await sweep_tombstones(second) == 1 and not _in(tiny, a[0])
    finally:
        await first.close()
        await second.close()


async def test_a_chunk_put_back_after_the_drop_is_dropped_again(tmp_path, tiny):
    """A call here that has not seen the forget embeds a chunk it read before it: the
    vectors come back after the sweep dropped them; the next sweeps drop them again."""
    target = str(tmp_path / "m.db")
    al = _tag("al")
    _put(tiny, al)
    store = open_store(target)
    await store.open()
    try:
        await _tombstone(target, al, time.time())
        assert await sweep_tombstones(store) == 1
        late = _put(tiny, al, 2)
        assert await sweep_tombstones(store) == 1 and not _in(tiny, late[1])
    finally:
        await store.close()


class _Failing(MemoryStore):
    """A store whose tombstones cannot be read (the database is down), then can again."""

    down = True

    async def tombstones(self, user_hashes):
        if self.down:
            raise ConnectionRefusedError("refused: Al said 'my secret'")
        return {}

    async def open(self): ...
    async def close(self): ...
    async def write(self, records): ...
    async def calls(self, user_id=None, *, limit=50):
        return []

    async def call(self, call_id): ...
    async def compactions(self, call_id):
        return []

    async def messages(self, call_id, *, compaction=None):
        return []

    async def message(self, call_id, position): ...
    async def fact_history(self, *, call_id=None, user_id=None):
        return []

    async def search(self, query, **kwargs):
        return []

    async def caller_memory(self, user_id, *, max_calls=5): ...
    async def forget(self, user_id):
        return 0

    async def purge_older_than(self, days):
        return 0


async def test_a_failing_store_costs_the_sweep_only_one_warning_no_text(tiny, semantic):  # noqa: F811
    _put(tiny, _tag("al"))
    store = _Failing()
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m), level="INFO", format="{level} {message}")
    try:
        index = SemanticIndex(semantic, call_id="x1", user_id=_tag("al"))
        assert await index.refresh(store) == 0  # the refresh itself goes on
        assert await sweep_tombstones(store) == 0
        store.down = False
        assert await sweep_tombstones(store) == 0
    finally:
        logger.remove(sink)
    warnings = [line for line in lines if line.startswith("WARNING")]
    assert len(warnings) == 1 and "connection refused" in warnings[0]
    assert not any("secret" in line for line in lines)
    assert any("read again" in line for line in lines)
    # a store without tombstones (the base class's), and an archive without the method
    assert await MemoryStore.tombstones(store, [user_hash("al")]) == {}
    assert await sweep_tombstones(object()) == 0


class _Stalled:
    """A call's archive whose reads of calls hang (a long first refresh)."""

    def __init__(self, store):
        self.store = store

    def __getattr__(self, name):
        return getattr(self.store, name)

    async def calls(self, *args, **kwargs):
        await asyncio.Event().wait()


async def test_a_turns_kick_sweeps_beside_a_long_refresh(tmp_path, tiny, semantic):  # noqa: F811
    """A call whose first refresh has not ended (a returning caller's big archive): its
    turns' kicks still sweep, in a task of their own."""
    target = str(tmp_path / "m.db")
    al = _tag("al")
    a = _put(tiny, al)
    store = open_store(target)
    await store.open()
    try:
        await _tombstone(target, al, time.time())
        index = SemanticIndex(semantic, call_id="b2", user_id=_tag("bo"))
        index.kick(_Stalled(store))  # the refresh hangs
        for _ in range(50):
            await asyncio.sleep(0.01)
            if not _in(tiny, a[0]):
                break
        assert not _in(tiny, a[0])
        assert not index._task.done()
        await index.close()
    finally:
        await store.close()


async def test_an_open_call_without_turns_still_sweeps_on_a_timer_until_it_closes(
    tmp_path,
    tiny,
    semantic,  # noqa: F811
    monkeypatch,
):
    """Bo's call is on here but says nothing (no turn, no refresh after its start): a
    forget elsewhere still leaves the cache within the interval; once his call ends, the
    timer stops."""
    monkeypatch.setattr(vector_cache, "TOMBSTONE_CHECK_S", 0.05)
    target = str(tmp_path / "m.db")
    al = _tag("al")
    a = _put(tiny, al)
    store = open_store(target)
    await store.open()
    try:
        index = SemanticIndex(semantic, call_id="b2", user_id=_tag("bo"))
        index.kick(store)  # the call's start
        await asyncio.sleep(0.08)
        watch = vector_cache._WATCHES[store]
        assert _in(tiny, a[0]) and watch.reads >= 1
        await _tombstone(target, al, time.time())
        for _ in range(80):
            await asyncio.sleep(0.02)
            if not _in(tiny, a[0]):
                break
        assert not _in(tiny, a[0])
        await index.close()
        await asyncio.sleep(0.12)  # the timer set before the close fires once more at most
        reads = watch.reads
        await asyncio.sleep(0.15)
        assert watch.reads == reads and not vector_cache._timer_set(watch)
    finally:
        await store.close()


async def test_a_hung_store_is_never_read_by_two_sweeps_at_once(tiny):
    _put(tiny, _tag("al"))
    store, reads, release = _Failing(), [], asyncio.Event()

    async def hang(user_hashes):
        reads.append(len(user_hashes))
        await release.wait()
        return {}

    store.tombstones = hang  # type: ignore[method-assign]
    first = asyncio.ensure_future(sweep_tombstones(store))
    await asyncio.sleep(0.01)
    assert reads and await sweep_tombstones(store) == 0 and len(reads) == 1
    release.set()
    assert await first == 0
    await sweep_tombstones(store)  # the hung one ended: the next reads again
    assert len(reads) >= 2

"""Attacks on the tombstone sweep (``_recall/vector_cache.py``): a hung or cancelled read,
many indexes opening and closing on one store, callers with odd ids on both backends, a store
closed under the timer, a caller forgotten elsewhere who calls again at once. Tombstones are
written as another process's forget leaves them (plain SQL on another connection)."""

from __future__ import annotations

import asyncio
import gc
import time
import warnings

import numpy as np
import pytest

from pipecat_summarizer._recall import vector_cache
from pipecat_summarizer._recall.semantic import SemanticIndex
from pipecat_summarizer._recall.vector_cache import cached_vectors, sweep_tombstones
from pipecat_summarizer.params import SemanticRecallParams
from pipecat_summarizer.store import open_store
from pipecat_summarizer.store._forgets import Forgets
from pipecat_summarizer.store.records import user_hash
from tests.recall.test_attacks2_vectors import _archive, _messages
from tests.recall.test_s8_forget_elsewhere import _in, _tag, _tombstone


class _Model:
    """A model of its own (a cache of its own), instant: 4 dimensions from the text."""

    def embed(self, texts):
        return np.array([[len(t), t.count(" ") + 1, 1.0, 2.0] for t in texts], np.float32)


@pytest.fixture
def model():
    return _Model()


def _semantic(model) -> SemanticRecallParams:
    return SemanticRecallParams(embedder=model, min_similarity=0.0)


async def _until(check, seconds: float = 2.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        await asyncio.sleep(0.01)
    return check()


def _slow_tombstones(store, gate: asyncio.Event, reads: list):
    real = store.tombstones

    async def tombstones(user_hashes):
        reads.append(len(user_hashes))
        await gate.wait()
        return await real(user_hashes)

    store.tombstones = tombstones  # type: ignore[method-assign]


class _SlowModel(_Model):
    """A returning caller's archive: its embedding outlasts the time left to the next sweep."""

    def embed(self, texts):
        time.sleep(0.15)
        return super().embed(texts)


async def test_a_hung_tombstone_read_never_stops_the_call_being_indexed(tmp_path, monkeypatch):
    """A call starts shortly after the store's last sweep (a busy worker: the call before
    just ended), so its kick starts no sweep and no timer; its first refresh ends after the
    next sweep is due and reads the tombstones itself. That read hangs (the store answers
    everything but its tombstones: a lock on that table; PostgreSQL's command timeout is
    30 s). The call's next words must still be indexed."""
    monkeypatch.setattr(vector_cache, "TOMBSTONE_CHECK_S", 0.1)
    model = _SlowModel()
    store = open_store(str(tmp_path / "m.db"))
    await store.open()
    gate, reads = asyncio.Event(), []
    al = _tag("al")
    index = SemanticIndex(_semantic(model), call_id="c2", user_id=al)
    try:
        warm = _Model()  # another caller cached (the model kept alive): the sweep reads
        cached_vectors(warm, ["warm"], _tag("bo"))
        await _archive(store, al, "c1", ["I keep bees on the roof.", "Bees, noted."])
        assert await sweep_tombstones(store) == 0  # the last call's sweep, just now
        _slow_tombstones(store, gate, reads)
        index.kick(store)  # the call's start: the sweep is not due, no timer is set
        assert await _until(lambda: index.size == 2 and bool(reads))
        await store.write(_messages("c2", al, ["My hive swarmed today.", "Oh no."]))
        for _ in range(3):  # the call's next turns kick again
            index.kick(store)
            await asyncio.sleep(0.05)
        assert await _until(lambda: index.size == 4, 0.4), "the call's new words never indexed"
    finally:
        gate.set()
        await index.close()
        await store.close()


async def test_a_sweep_cancelled_mid_read_leaves_the_store_readable(tmp_path, model, monkeypatch):
    monkeypatch.setattr(vector_cache, "TOMBSTONE_CHECK_S", 0.0)
    target = str(tmp_path / "m.db")
    store = open_store(target)
    await store.open()
    gate, reads = asyncio.Event(), []
    try:
        al = _tag("al")
        texts = [f"{al} says {i}" for i in range(3)]
        cached_vectors(model, texts, al)
        _slow_tombstones(store, gate, reads)
        first = asyncio.ensure_future(sweep_tombstones(store))
        assert await _until(lambda: bool(reads))
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert not vector_cache._WATCHES[store].busy
        await _tombstone(target, al, time.time())
        gate.set()
        assert await sweep_tombstones(store) == 1 and not _in(model, texts[0])
    finally:
        gate.set()
        await store.close()


async def test_many_indexes_opening_and_closing_leave_no_timer_and_no_task(
    tmp_path, model, monkeypatch
):
    """A busy worker: 40 calls start and end on one store, some kicked many times, one store
    closed while its timer is set: no sweep keeps running, no task is left pending."""
    monkeypatch.setattr(vector_cache, "TOMBSTONE_CHECK_S", 0.02)
    cached_vectors(model, ["someone"], _tag("someone"))
    stores = [open_store(str(tmp_path / f"m{i}.db")) for i in range(2)]
    for s in stores:
        await s.open()
    try:
        indexes = []
        for i in range(40):
            index = SemanticIndex(_semantic(model), call_id=f"c{i}", user_id=_tag("u"))
            for _ in range(1 + i % 3):
                index.kick(stores[i % 2])
            indexes.append(index)
            if i % 8 == 7:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.06)  # the timers run
        watches = [vector_cache._WATCHES[s] for s in stores]
        assert all(w.reads >= 1 for w in watches)
        await stores[1].close()  # the application closes a store under its timer
        await asyncio.sleep(0.05)
        assert stores[1]._thread is None  # never opened again by a sweep
        for index in indexes:
            await index.close()
        await asyncio.sleep(0.06)  # a timer set before the last close fires once at most
        reads = [w.reads for w in watches]
        await asyncio.sleep(0.06)
        assert [w.reads for w in watches] == reads
        assert not any(vector_cache._timer_set(w) for w in watches)
        mine = asyncio.get_running_loop()
        assert not [t for t in vector_cache._SWEEPS if not t.done() and t.get_loop() is mine]
    finally:
        for s in stores:
            await s.close()


@pytest.mark.parametrize(
    "odd",
    ["", "x" * 20_000, "al\x00ice", "\ud800lone", "👩‍👩‍👧 'or 1=1;--", " al ", "%_*\\"],
    ids=["empty", "long", "nul", "surrogate", "emoji_sql", "spaces", "like"],
)
async def test_callers_with_odd_ids_are_swept_and_only_they(tmp_path, model, odd, monkeypatch):
    monkeypatch.setattr(vector_cache, "TOMBSTONE_CHECK_S", 0.0)
    target = str(tmp_path / "m.db")
    store = open_store(target)
    await store.open()
    try:
        odd_texts = [f"{_tag('odd')} text"]
        near = odd[:-1] if odd else " "  # a near neighbour's id
        near_texts = [f"{_tag('near')} text"]
        cached_vectors(model, odd_texts, odd)
        cached_vectors(model, near_texts, near)
        await sweep_tombstones(store)
        await _tombstone(target, odd, time.time())
        assert await sweep_tombstones(store) >= 1
        assert not _in(model, odd_texts[0]) and _in(model, near_texts[0])
    finally:
        vector_cache.forget_vectors(odd)
        vector_cache.forget_vectors(near)
        await store.close()


async def test_odd_ids_reach_postgres_tombstones(pg_server, model):
    target = pg_server.create_database(f"s8_attack_odd_{time.monotonic_ns()}")
    store = open_store(target)
    await store.open()
    try:
        odd = ["", "x" * 20_000, "\ud800lone", "👩‍👩‍👧 'or 1=1;--"]
        for o in odd:
            await _tombstone(target, o, 1.5)
        found = await store.tombstones([user_hash(o) for o in odd] + [user_hash("al")])
        assert found == {user_hash(o): 1.5 for o in odd}
    finally:
        await store.close()


async def test_a_caller_forgotten_elsewhere_who_calls_again_at_once(tmp_path, model, monkeypatch):
    """Al is forgotten by another process and calls here again before any sweep: his new
    call is indexed and ranked, its vectors survive nothing of the forget's redrop in the
    index itself, and the forgotten words' vectors leave the cache."""
    monkeypatch.setattr(vector_cache, "TOMBSTONE_CHECK_S", 0.0)
    target = str(tmp_path / "m.db")
    store = open_store(target)
    await store.open()
    al = _tag("al")
    old = [f"My locker code is 4411 ({al})", "Noted."]
    try:
        await _archive(store, al, "a1", old)
        first = SemanticIndex(_semantic(model), call_id="a2", user_id=al)
        await first.refresh(store)
        await first.close()
        assert _in(model, old[0])
        # the other process's forget: the rows go, the tombstone stays
        other = open_store(target)
        await other.open()
        monkeypatch.setattr(vector_cache, "forget_vectors", lambda owner: 0)  # not this process
        # another process: its own bookkeeping, whose forget tells none of this one's listeners
        monkeypatch.setattr(other, "_forget_book", Forgets(lambda user_id: None), raising=False)
        await other.forget(al)
        await other.close()
        monkeypatch.undo()
        monkeypatch.setattr(vector_cache, "TOMBSTONE_CHECK_S", 0.0)
        assert _in(model, old[0])  # this process has not heard of it yet
        await asyncio.sleep(0.01)  # the new call starts after the forget
        now = time.time()
        from pipecat_summarizer.store.records import CallRecord

        await store.write([CallRecord("a3", user_id=al, started_at=now)])
        await store.write(_messages("a3", al, [f"I moved to Lyon ({al})", "Lyon, noted."]))
        again = SemanticIndex(_semantic(model), call_id="a3", user_id=al)
        await again.refresh(store)  # the refresh's sweep hears of the forget
        assert not _in(model, old[0])
        assert again.size == 2
        assert all("4411" not in h.content for h in again.rank("locker code")[0])
        await again.refresh(store)  # a redrop sweep empties the cache of him: the index stays
        assert again.size == 2 and again.rank("Lyon")[0]
        await again.close()
    finally:
        await store.close()


def test_a_loop_ended_under_a_hung_sweep_reports_nothing(tmp_path):
    """A process whose loop ends while a sweep's read hangs (a call cut off, the store's
    tombstones never answering): asyncio's exception handler hears nothing (no 'Task was
    destroyed but it is pending', no exception never retrieved), and a new loop sweeps."""
    reported: list = []
    store = open_store(str(tmp_path / "m.db"))
    model = _Model()  # kept alive: a model's cache lives as long as the model

    async def main(hang: bool):
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: reported.append(ctx))
        await store.open()
        if hang:
            _slow_tombstones(store, asyncio.Event(), [])
        cached_vectors(model, ["x"], _tag("al"))
        index = SemanticIndex(_semantic(model), call_id="c", user_id=_tag("u"))
        index.kick(store)
        await asyncio.sleep(0.02)
        await index.close()
        await store.close()
        return vector_cache._WATCHES[store].reads

    assert asyncio.run(main(True)) == 0  # hung: cancelled with its loop
    assert not vector_cache._WATCHES[store].busy
    del store.tombstones
    vector_cache._WATCHES[store].due = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert asyncio.run(main(False)) >= 1
    gc.collect()
    assert reported == []


async def test_postgres_connections_killed_under_the_sweep(pg_server, model, monkeypatch):
    """The server drops every connection of the store (a restart, a failover) while sweeps
    run: at most one WARNING without text, and a forget made meanwhile is still heard once
    the store answers again."""
    import asyncpg
    from loguru import logger

    monkeypatch.setattr(vector_cache, "TOMBSTONE_CHECK_S", 0.0)
    target = pg_server.create_database(f"s8_attack_kill_{time.monotonic_ns()}")
    store = open_store(target)
    await store.open()
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="INFO", format="{level} {message}")
    try:
        al = _tag("al")
        texts = [f"{al} said something private"]
        cached_vectors(model, texts, al)
        assert await sweep_tombstones(store) == 0
        admin = await asyncpg.connect(target)
        try:
            sweeps = [asyncio.ensure_future(sweep_tombstones(store)) for _ in range(3)]
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            await asyncio.gather(*sweeps)
            await sweep_tombstones(store)  # right after the drop
            await _tombstone(target, al, time.time())
        finally:
            await admin.close()
        dropped = 0
        for _ in range(20):
            dropped += await sweep_tombstones(store)
            if dropped:
                break
            await asyncio.sleep(0.02)
        assert dropped == 1 and not _in(model, texts[0])
    finally:
        logger.remove(sink)
        await store.close()
    warnings = [line for line in lines if line.startswith("WARNING")]
    assert len(warnings) <= 1 and not any("private" in line for line in lines)


async def test_a_store_swapped_under_the_timer_is_never_opened_again(tmp_path, model, monkeypatch):
    """The application replaces a call's store (a failover) and closes the old one while the
    call's index is open: the old store's timer may still fire, but never opens it again,
    and the new store's sweeps hear a forget."""
    monkeypatch.setattr(vector_cache, "TOMBSTONE_CHECK_S", 0.02)
    old, new = str(tmp_path / "old.db"), str(tmp_path / "new.db")
    first, second = open_store(old), open_store(new)
    await first.open()
    await second.open()
    al = _tag("al")
    texts = [f"{al} said it"]
    cached_vectors(model, texts, al)
    index = SemanticIndex(_semantic(model), call_id="c", user_id=_tag("u"))
    try:
        index.kick(first)
        await asyncio.sleep(0.03)
        index.kick(second)  # the swap
        await first.close()
        await _tombstone(new, al, time.time())
        assert await _until(lambda: not _in(model, texts[0]), 1.0)
        await asyncio.sleep(0.05)  # the old store's timer fires meanwhile
        assert first._thread is None
    finally:
        await index.close()
        await second.close()


async def test_a_call_started_soon_after_a_sweep_still_sweeps_on_a_timer(
    tmp_path, model, monkeypatch
):
    """A busy worker: the last call's sweep ran a moment ago (then it ended, its timer
    stopped); Bo's call starts now and says nothing more. Its kick finds the sweep not due
    and starts neither a sweep nor a timer: a forget elsewhere must still leave the cache
    within the interval while his call is open."""
    monkeypatch.setattr(vector_cache, "TOMBSTONE_CHECK_S", 0.05)
    target = str(tmp_path / "m.db")
    al = _tag("al")
    texts = [f"{al} told a secret"]
    cached_vectors(model, texts, al)
    store = open_store(target)
    await store.open()
    index = SemanticIndex(_semantic(model), call_id="b2", user_id=_tag("bo"))
    try:
        await sweep_tombstones(store)  # the call before's last sweep, just now
        index.kick(store)  # Bo's call starts
        await asyncio.sleep(0.1)
        await _tombstone(target, al, time.time())
        assert await _until(lambda: not _in(model, texts[0]), 0.3), "never swept"
    finally:
        await index.close()
        await store.close()

"""Attack on ``on_forget`` (``store._forgets``, which each store's ``Forgets`` tells):
listeners that raise (an ``Exception``, a ``CancelledError``), that stop themselves or another
while told, added twice by two holders, equal but distinct listeners, many short-lived stores.
A real SQLite store's forget: the caller's rows must go whatever a listener does, and no
listener may be missed."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from dataclasses import dataclass, field

import pytest

from pipecat_summarizer.store import SQLiteMemoryStore, _forgets
from pipecat_summarizer.store.base import on_forget
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord


async def _archived(store: SQLiteMemoryStore, user_id: str) -> None:
    await store.write(
        [
            CallRecord("c1", user_id=user_id, started_at=time.time()),
            ArchivedMessage("c1", 0, "user", "my dog Rex", "{}", user_id=user_id),
        ]
    )


@dataclass
class _Holder:
    """A listener object that compares equal to another of the same name (a dataclass):
    two distinct holders, each with its own cache to clear."""

    name: str
    told: list[str] = field(default_factory=list, compare=False)

    def __call__(self, user_id: str) -> None:
        self.told.append(user_id)


async def test_a_listener_raising_cancelled_error_costs_the_forget_nothing(tmp_path):
    told: list[str] = []

    def cancelled(user_id: str) -> None:
        raise asyncio.CancelledError  # a BaseException: not caught as an Exception

    stops = [on_forget(cancelled), on_forget(told.append)]
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await _archived(store, "al")
        assert await store.forget("al") > 0  # the rows go, the forget is not cancelled
        assert told == ["al"]  # and the next listener is still told
        assert await store.search("Rex", user_id="al") == []
        assert await store.forgotten_at("al") is not None
    finally:
        for stop in stops:
            stop()
        await store.close()


async def test_equal_but_distinct_listeners_are_each_told_and_stopped_alone(tmp_path):
    first, second = _Holder("cache"), _Holder("cache")
    assert first == second and first is not second
    stop_first, stop_second = on_forget(first), on_forget(second)
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await _archived(store, "al")
        await store.forget("al")
        assert (first.told, second.told) == (["al"], ["al"])
        stop_first()  # stops the first holder's calls, not the second's
        await _archived(store, "bo")
        await store.forget("bo")
        assert (first.told, second.told) == (["al"], ["al", "bo"])
    finally:
        stop_first()
        stop_second()
        await store.close()


async def test_a_listener_added_by_two_holders_stays_until_both_stop(tmp_path):
    told: list[str] = []

    def listener(user_id: str) -> None:
        told.append(user_id)

    stop_a, stop_b = on_forget(listener), on_forget(listener)
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await _archived(store, "al")
        await store.forget("al")
        assert told == ["al"]  # told once however often it was added
        stop_a()
        stop_a()  # a stop called twice stops only its own addition
        await _archived(store, "bo")
        await store.forget("bo")
        assert told == ["al", "bo"]  # the other holder still listens
        stop_b()
        await _archived(store, "cy")
        await store.forget("cy")
        assert told == ["al", "bo"]
    finally:
        stop_a()
        stop_b()
        await store.close()


async def test_listeners_stopping_themselves_or_another_while_told_miss_nobody(tmp_path):
    told: list[str] = []
    stops: dict[str, object] = {}

    def first(user_id: str) -> None:
        told.append(f"first {user_id}")
        stops["first"]()  # stops itself

    def second(user_id: str) -> None:
        told.append(f"second {user_id}")
        stops["third"]()  # stops the one after it: it is still told this forget

    def third(user_id: str) -> None:
        told.append(f"third {user_id}")

    def fourth(user_id: str) -> None:
        told.append(f"fourth {user_id}")

    for name, listener in (("first", first), ("second", second), ("third", third)):
        stops[name] = on_forget(listener)
    stops["fourth"] = on_forget(fourth)
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await _archived(store, "al")
        await store.forget("al")
        assert told == ["first al", "second al", "third al", "fourth al"]
        await _archived(store, "bo")
        await store.forget("bo")
        assert told[4:] == ["second bo", "fourth bo"]
    finally:
        for stop in stops.values():
            stop()  # type: ignore[operator]
        await store.close()


async def test_many_stores_forgetting_add_no_listener_and_are_collected(tmp_path):
    before = len(_forgets._FORGET_LISTENERS)
    refs = []
    for i in range(20):
        store = SQLiteMemoryStore(tmp_path / f"m{i}.db")
        await _archived(store, "al")
        await store.forget("al")
        await store.close()
        refs.append(weakref.ref(store))
        del store
    gc.collect()
    assert len(_forgets._FORGET_LISTENERS) == before
    assert all(r() is None for r in refs)  # no registry holds a store


def test_a_listener_that_cannot_be_called_is_refused_when_added():
    # it was taken, then failed (a WARNING) at every forget, far from the mistake
    with pytest.raises(TypeError, match="callable"):
        on_forget("forget_vectors")  # type: ignore[arg-type]
    assert all(callable(listener) for _, listener in _forgets._FORGET_LISTENERS)

"""The SQLite store starts its removals timer once per opening and loop (its first call
answered there), not after every call: before, each call's return on the loop checked the
timer again (``_watch_deletes``, the timer's state and the store's). The timer is still
started again where it must be: after a close and a new opening, on a new loop (the first one
gone), in a forked child (tests/store/test_s15_fork.py); its reads themselves:
tests/store/test_s15_deletes_timer.py. Counted, never timed."""

from __future__ import annotations

import asyncio

import pytest

from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.store.base import MemoryStore
from tests.recall.test_attacks_dates import archived, utc

CALLS = 20


@pytest.fixture
def checks(monkeypatch) -> list[MemoryStore]:
    """Every check of a store's timer (``_watch_deletes``), by the store checked."""
    seen: list[MemoryStore] = []
    original = MemoryStore._watch_deletes

    def counted(self: MemoryStore) -> None:
        seen.append(self)
        original(self)

    monkeypatch.setattr(MemoryStore, "_watch_deletes", counted)
    return seen


async def _use(store: SQLiteMemoryStore, n: int = CALLS) -> None:
    for _ in range(n):
        await store.calls("alice")
        await store.search("Porto", user_id="alice")


def test_the_timer_is_started_once_per_opening_and_loop(tmp_path, checks):
    store = SQLiteMemoryStore(tmp_path / "memory.db")

    async def first() -> None:
        await store.write(
            archived(["Marta lives in Porto.", "Noted."], call_id="a1", at=utc(2026, 4, 1))
        )
        await _use(store)
        assert store._deletes.watching
        assert len(checks) == 1  # 41 calls, one check
        await store.close()
        assert not store._deletes.watching
        await _use(store)  # opened again
        assert store._deletes.watching
        assert len(checks) == 2

    async def second() -> None:
        assert not store._deletes.watching  # the first loop is closed
        await _use(store)
        assert store._deletes.watching  # started on this loop
        assert len(checks) == 3
        await store.close()

    asyncio.run(first())
    asyncio.run(second())

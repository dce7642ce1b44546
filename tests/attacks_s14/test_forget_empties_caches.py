"""A forget empties the process's caches keyed by conversation text (``_text.text_caches``):
through a real pipeline with recall, alice's earlier call holds an unusual word (her kayak's
name), recalled into her call (the selection, the stems, the values read it, and cache it);
then she is forgotten, and no registered cache may still hold anything: by this process's
forget (after the pipeline), or by another process's forget, which alice's live call notices
at its next turn (the forget watch, ``noticed_forget``), on both backends.

A registered cache is an ``lru_cache``: its keys cannot be listed, so the check is that every
one is empty (``currsize == 0``) right after the forget or at the moment the watch noticed it,
and that a probe of the word's stem misses after the call (``search_stem``'s hit count).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

from pipecat_summarizer import RecallPrefetch
from pipecat_summarizer._recall.gather import MAX_HIT_CHARS, clip
from pipecat_summarizer._text.text_caches import text_caches
from pipecat_summarizer._text.vocabulary import search_stem
from pipecat_summarizer.store import PostgresMemoryStore, SQLiteMemoryStore, _forgets
from pipecat_summarizer.store.base import MemoryStore
from tests.recall.test_attacks_dates import archived, utc
from tests.support.early_search import (
    RECALL,
    Forget,
    Forgetter,
    Watched,
    desk,
    end_turn,
    prefetch_pipeline,
    recall_blocks,
    speech,
)
from tests.support.openai_server import Reply
from tests.support.settle import Gap, run_settling

ROOT = Path(__file__).resolve().parents[2]
#: Alice's kayak's name: a word no other text of the test holds.
WORD = "quillfeather"
KAYAK = [
    "My kayak is called the Quillfeather, moored at pier nine.",
    "Noted, the Quillfeather at pier nine.",
]
ASK = "What is my kayak called?"


def _sizes() -> dict[str, int]:
    """Each registered cache's entries, by its function's name."""
    return {
        f"{c.__wrapped__.__module__}.{c.__wrapped__.__qualname__}": c.cache_info().currsize
        for c in text_caches()
    }


def _stem_cached(word: str) -> bool:
    """Whether ``search_stem``'s cache holds ``word`` (a probe: a hit, or a miss that adds it)."""
    hits = search_stem.cache_info().hits
    search_stem(word)
    return search_stem.cache_info().hits == hits + 1


class _Noticing(Watched):
    """A store that records the caches' sizes whenever the forget watch notices a forget."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.at_notice: list[dict[str, int]] = []
        self.removals_reads = 0  # the database's removals read and answered
        self._answered = asyncio.Event()

    async def _removals(self) -> int | None:
        value = await super()._removals()
        self.removals_reads += 1
        self._answered.set()
        return value

    async def reads_past(self, n: int) -> None:
        """Wait until ``n`` reads of the removals have answered."""
        while self.removals_reads < n:
            self._answered.clear()
            await self._answered.wait()

    async def noticed_forget(self, user_id: str, since: float) -> bool:
        seen = await super().noticed_forget(user_id, since)
        if seen:
            self.at_notice.append(_sizes())
        return seen


class _NoticingSQLite(_Noticing, SQLiteMemoryStore):
    pass


class _NoticingPostgres(_Noticing, PostgresMemoryStore):
    pass


def _store(target: str) -> _Noticing:
    return _NoticingPostgres(target) if "://" in target else _NoticingSQLite(target)


class _OtherProcess:
    """An admin tool in another process: ``forget`` runs there, on its own store object.
    Before it, whether the word is cached here (the control)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.cached_before: list[bool] = []

    async def forget(self, user_id: str) -> int:
        self.cached_before.append(_stem_cached(WORD))
        code = (
            "import asyncio, sys\n"
            "from pipecat_summarizer.store import open_store\n"
            "async def main():\n"
            "    store = open_store(sys.argv[1])\n"
            "    try:\n"
            "        print(await store.forget(sys.argv[2]))\n"
            "    finally:\n"
            "        await store.close()\n"
            "asyncio.run(main())\n"
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            code,
            self.target,
            user_id,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()[-2000:]
        return int(out.split()[-1])


async def _call(server, store, frames: list, *extra, user: str = "alice") -> None:
    """``user``'s call on ``store`` (recall, ``RecallPrefetch``): ``frames``; "Sure." answers."""
    server.handler = lambda body: Reply("Sure.")
    context, summarizer, processor = desk(server, store, user_id=user, recall=RECALL)
    try:
        await run_settling(
            prefetch_pipeline(server, context, processor, RecallPrefetch(processor), *extra),
            frames_to_send=frames,
        )
    finally:
        await summarizer.aclose()


async def test_forget_empties_the_text_caches(openai_server, store_target):
    # alice's kayak recalled in her call; after the call this process forgets her: every
    # registered cache is empty, the word's stem is gone
    store = _store(store_target)
    try:
        await store.write(archived(KAYAK, call_id="a1", at=utc(2026, 5, 1), user_id="alice"))
        await _call(openai_server, store, [*speech(ASK), *end_turn()])
        blocks = recall_blocks(openai_server.chat_requests)
        assert len(blocks) == 1 and "Quillfeather" in blocks[0]
        assert _stem_cached(WORD)  # the control: recall's reading cached it
        assert sum(_sizes().values()) > 0
        assert await store.forget("alice") > 0
        assert _sizes() == dict.fromkeys(_sizes(), 0)
        assert not _stem_cached(WORD)
    finally:
        await store.close()


async def test_forget_by_another_process_empties_the_text_caches(openai_server, store_target):
    # alice's kayak recalled at her first turn; then an admin tool in another process forgets
    # her; at her next turn the forget watch notices it: every registered cache is empty at
    # that moment, and after the call the word's stem is not cached again
    store = _store(store_target)
    other = _OtherProcess(store_target)
    forgetter = Forgetter(other)
    try:
        await store.write(archived(KAYAK, call_id="a1", at=utc(2026, 5, 1), user_id="alice"))
        frames = [
            *speech(ASK),
            *end_turn(),
            Forget("alice"),
            Gap(sleep=30.0),  # ends once the forget returned (the Forgetter has settled)
            *speech("And where is it moored?"),
            *end_turn(),
        ]
        await _call(openai_server, store, frames, forgetter)
        assert forgetter.forgotten and forgetter.forgotten[0] > 0
        blocks = recall_blocks(openai_server.chat_requests)
        assert "Quillfeather" in blocks[0] and not any(WORD in b.lower() for b in blocks[1:])
        assert other.cached_before == [True]  # the control: cached before the forget
        assert store.at_notice, "the watch never noticed the other process's forget"
        assert store.at_notice[0] == dict.fromkeys(store.at_notice[0], 0)
        assert not _stem_cached(WORD)
    finally:
        await store.close()


async def test_forget_empties_the_pattern_cache(store_target):
    # recall clips a long hit around the query's words: it searches the hit for their first
    # letters with a pattern the ``re`` module caches (keyed by the pattern: "quil"); a forget
    # empties that cache too (``re.purge``)
    store = _store(store_target)
    try:
        await store.write(archived(KAYAK, call_id="a1", at=utc(2026, 5, 1), user_id="alice"))
        long = "Some words. " * (MAX_HIT_CHARS // 10) + KAYAK[0]
        assert "Quillfeather" in clip(long, [WORD])
        assert _patterns(WORD[:4])  # the control
        assert await store.forget("alice") > 0
        assert not _patterns(WORD[:4])
    finally:
        await store.close()


def _patterns(text: str) -> list:
    """The ``re`` module's cached patterns that are ``text`` (its cache is keyed by
    ``(type, pattern, flags)`` on CPython 3.11)."""
    return [k for k in re._cache if isinstance(k, tuple) and text in k]  # type: ignore[attr-defined]


async def test_forget_by_another_process_after_the_call_empties_the_text_caches(
    openai_server, store_target, monkeypatch
):
    # S14-S-1 (fixed in S15: the store's removals timer): alice's call ends; then another
    # process forgets her: no live call of hers watches, and no call here starts or takes a
    # turn; the store, open in this loop, reads the database's removals on its timer and
    # empties the caches (without the timer nothing here reads them: no read comes, the
    # wait below fails)
    monkeypatch.setattr(_forgets, "DELETES_CHECK_S", 0.2)  # the timer's period, shortened
    store = _store(store_target)
    try:
        await store.write(archived(KAYAK, call_id="a1", at=utc(2026, 5, 1), user_id="alice"))
        await _call(openai_server, store, [*speech(ASK), *end_turn()])
        other = _OtherProcess(store_target)
        assert await other.forget("alice") > 0
        assert other.cached_before == [True]  # the control: cached before the forget
        # two more answered reads: reads run one at a time, so the second started after the
        # forget returned (an event, not a duration: bounded only against a hang)
        await asyncio.wait_for(store.reads_past(store.removals_reads + 2), 60)
        assert not _stem_cached(WORD)
    finally:
        await store.close()


async def test_forget_by_another_process_reaches_the_caches_at_the_next_call(
    openai_server, store_target, monkeypatch
):
    # S14-S-1, what a next call here sees: alice's call ends; another process forgets her
    # (no call of hers is live here: no watch sees it); bob's call starts, and the store
    # reads the database's removals (the forget's deletes changed them): the caches empty
    monkeypatch.setattr(_forgets, "DELETES_CHECK_S", 0.0)  # read at every start and turn
    # without the store's timer (S15; the test above): what a call's start reads on its own
    monkeypatch.setattr(MemoryStore, "_watch_deletes", lambda self: None)
    store = _store(store_target)
    try:
        await store.write(archived(KAYAK, call_id="a1", at=utc(2026, 5, 1), user_id="alice"))
        await _call(openai_server, store, [*speech(ASK), *end_turn()])
        other = _OtherProcess(store_target)
        assert await other.forget("alice") > 0
        assert other.cached_before == [True]  # the control: cached before the forget
        assert _stem_cached(WORD)  # nothing here has noticed yet (no call)
        await _call(
            openai_server, store, [*speech("Is the shop open today?"), *end_turn()], user="bob"
        )
        await asyncio.gather(*store.__dict__["_deletes_seen"]._tasks)  # reads under way
        assert not _stem_cached(WORD)
    finally:
        await store.close()

"""The searches a turn's recall makes after its first one (the gathered names' second search,
the stated values' searches) started on the caller's words by ``RecallPrefetch``, and the
forget watch read beside the selection: the turn takes them ready, a forget between the early
work and the turn is honoured (this process and another), words that change between interim
and final never serve a stale follow-up, and a failing or slow follow-up never costs the turn.
Real pipelines (a real ``LLMContextAggregatorPair`` fed transcriptions, ``ContextSummarizer``,
Pipecat's OpenAI service against the local server) on SQLite files and the real PostgreSQL."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.support.early_search import (
    RECALL,
    SISTER_ASK,
    Forget,
    WatchedSQLite,
    early_call,
    recall_blocks,
    seed_sister,
    spoken_turn,
    watched_store,
)
from tests.support.openai_server import Reply


async def test_the_follow_up_searches_are_served_by_early_ones(openai_server, tmp_path):
    store = watched_store(str(tmp_path / "m.db"))
    try:
        await seed_sister(store)
        companion, _ = await early_call(openai_server, store, spoken_turn(SISTER_ASK))
    finally:
        await store.close()
    archive = companion.archive
    assert archive is not None
    words = [w for w, _ in store.searches]
    (block,) = recall_blocks(openai_server.chat_requests)
    assert "lives in Porto" in block and "flying in on Friday" in block  # gathered
    # the main search, the gathered names' and the values' searches: all started on the
    # words, all taken by the turn, none made at turn time
    assert "marta porto" in words and "Friday" in words
    assert archive.started == archive.served == 1 and archive.follow_ups_started >= 2
    assert archive.follow_ups_served == archive.follow_ups_started
    assert archive.started + archive.follow_ups_started == len(store.searches)


@pytest.mark.parametrize(
    ("backend", "by"),
    # another process on SQLite: the main search's case in test_recall_attacks_prefetch
    [("sqlite", "the call's store"), ("postgres", "another process")],
    indirect=["backend"],
)
async def test_a_forget_after_the_follow_ups_started_is_honoured(openai_server, store_target, by):
    store = watched_store(store_target)
    admin = store if by == "the call's store" else watched_store(store_target)
    try:
        await seed_sister(store)
        if admin is not store:
            # the other process's store is open before the call: its forget's connect (80+ ms
            # on a loaded machine) must not put the tombstone after the turn's watch
            await admin.open()
        companion, forgetter = await early_call(
            openai_server, store, spoken_turn(SISTER_ASK, between=[Forget("alice")]), admin=admin
        )
    finally:
        await store.close()
        if admin is not store:
            await admin.close()
    assert forgetter is not None and forgetter.forgotten and forgetter.forgotten[0] > 0
    archive = companion.archive
    assert archive is not None and archive.follow_ups_started >= 2  # before the forget
    assert recall_blocks(openai_server.chat_requests) == []
    sent = str(openai_server.chat_requests)
    assert "Marta" not in sent and "Porto" not in sent and "Friday" not in sent
    if by == "the call's store":  # nothing found before the forget is taken
        assert archive.served == archive.follow_ups_served == 0


async def test_words_that_change_after_the_interim_never_serve_its_follow_ups(
    openai_server, tmp_path
):
    store = watched_store(str(tmp_path / "m.db"))
    try:
        await seed_sister(store)
        frames = spoken_turn("What are all the cars I rented?", interim=SISTER_ASK)
        companion, _ = await early_call(openai_server, store, frames)
    finally:
        await store.close()
    (block,) = recall_blocks(openai_server.chat_requests)
    assert "red Fiat" in block
    assert "Marta" not in block and "Porto" not in block and "Friday" not in block
    words = [w for w, _ in store.searches]
    assert "marta porto" in words  # the interim's follow-up did run
    # and the final words' own follow-ups were ready: the turn searched nothing itself
    archive = companion.archive
    assert archive is not None and archive.follow_ups_served >= 1
    assert len(store.searches) == archive.started + archive.follow_ups_started


class _FollowUpsFail:
    """Fails (or stalls) every search after the first (the early follow-ups, the turn's own)."""

    stall = False

    async def search(self, query, **kwargs):
        if self.searches:
            self.delay_s = 2.0 if self.stall else 0.0
            self.fail = not self.stall
        return await super().search(query, **kwargs)


@pytest.mark.parametrize("how", ["failing", "slow"])
async def test_a_failing_or_slow_follow_up_never_costs_the_turn(
    openai_server, tmp_path, caplog, how
):

    class Store(_FollowUpsFail, WatchedSQLite):
        stall = how == "slow"

    store = Store(tmp_path / "m.db")
    try:
        await seed_sister(store)
        with caplog.at_level(logging.WARNING):
            companion, _ = await early_call(openai_server, store, spoken_turn(SISTER_ASK))
    finally:
        await store.close()
    (block,) = recall_blocks(openai_server.chat_requests)
    assert "lives in Porto" in block  # the first search's hits, placed
    assert openai_server.chat_requests[-1]["messages"][-1]["content"] == SISTER_ASK
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert companion.archive is not None and companion.archive.follow_ups_started >= 1
    words = [w for w, _ in store.searches]
    if how == "failing":
        # started early, failed; the turn asked the archive itself (and went without it)
        assert words.count("marta porto") == 2
    else:
        # started early and still running: the turn waited its budget, no longer
        assert words.count("marta porto") == 1 and "cancelled" in store.ended


async def test_the_forget_watch_runs_beside_the_selection(openai_server, tmp_path, monkeypatch):
    # the tombstone read is slow: the early search's hits go to the selection without
    # waiting for it (made early now, before the turn's watch starts); the block is placed
    # once it has answered (no forget)
    import pipecat_summarizer._recall.compose as step_module

    events: list[str] = []

    class Store(WatchedSQLite):
        async def forgotten_at(self, user_id):
            events.append("watch")
            await asyncio.sleep(0.1)
            found = await super().forgotten_at(user_id)
            events.append("watched")
            return found

    select = step_module.select_hits

    def selecting(*args, **kwargs):
        events.append("select")
        return select(*args, **kwargs)

    monkeypatch.setattr(step_module, "select_hits", selecting)
    store = Store(tmp_path / "m.db")
    try:
        await seed_sister(store)
        await early_call(openai_server, store, spoken_turn("Which car did I rent at the airport?"))
    finally:
        await store.close()
    (block,) = recall_blocks(openai_server.chat_requests)
    assert "red Fiat" in block
    assert events.count("watch") == events.count("watched") == 1
    assert events.index("select") < events.index("watched")


async def test_a_search_at_turn_time_goes_to_the_store_before_the_forget_watch(
    openai_server, tmp_path
):
    # no early search: the turn's own search is sent first, its tombstone read after it
    # (one store thread: a search queued behind the read would lose part of its budget)
    from tests.support.recall_calls import recall_call

    order: list[str] = []

    class Store(WatchedSQLite):
        async def search(self, query, **kwargs):
            order.append("search")
            return await super().search(query, **kwargs)

        async def forgotten_at(self, user_id):
            order.append("watch")
            return await super().forgotten_at(user_id)

    openai_server.handler = lambda body: Reply("Sure.")
    store = Store(tmp_path / "m.db")
    try:
        await seed_sister(store)
        await recall_call(
            openai_server,
            store,
            ["Which car did I rent at the airport?"],
            call_id="now",
            recall=RECALL,
            system="Hi.",
        )
    finally:
        await store.close()
    (block,) = recall_blocks(openai_server.chat_requests)
    assert "red Fiat" in block
    assert order[:2] == ["search", "watch"]

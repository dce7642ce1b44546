"""The durable memory store: the same behavioural suite on SQLite and on a real PostgreSQL.

Every test takes ``store_target`` (a SQLite file or a fresh PostgreSQL database, see
tests/support/store_fixtures.py) and runs once per backend.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._session.recorder import EARLIER_CALLS_HEADER
from pipecat_summarizer.params import MemoryParams, WriterParams
from pipecat_summarizer.store import open_store
from pipecat_summarizer.store.records import (
    ArchivedMessage,
    CallRecord,
    CompactionRecord,
    FactEvent,
    sha256_hex,
)
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import build, cfg, main_llm, texts_of, turns
from tests.support.settle import Gap, run_settling

FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)
SYSTEM = "You are a helpful voice assistant."


def _msg(call, pos, text, *, user="u1", removed_by="summarized", compaction=1, at=None):
    return ArchivedMessage(
        call_id=call,
        position=pos,
        role="user",
        content=text,
        message_json=json.dumps({"role": "user", "content": text}),
        removed_by=removed_by,
        compaction=compaction,
        turn=pos,
        at=time.time() if at is None else at,
        user_id=user,
    )


@pytest.fixture
async def store(store_target):
    s = open_store(store_target)
    yield s
    await s.close()


# -- round trips ---------------------------------------------------------------------------


async def test_every_record_kind_round_trips(store):
    call = CallRecord("c1", "u1", started_at=1000.0)
    tool_call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_7", "type": "function", "function": {"name": "book", "arguments": "{}"}}
        ],
    }
    evicted = ArchivedMessage(
        "c1",
        0,
        "assistant",
        "book({})",
        json.dumps(tool_call),
        ("call_7",),
        "evicted",
        None,
        turn=2,
        user_id="u1",
    )
    summarized = _msg("c1", 1, "My hotel is the Grand Budapest in Zubrowka.")
    compaction = CompactionRecord(
        call_id="c1",
        attempt=1,
        compaction=1,
        ok=True,
        reason="tokens",
        turn=3,
        messages_before=12,
        messages_after=5,
        messages_summarized=7,
        tokens_before=900,
        tokens_after=300,
        summary="FACTS:\n- hotel: Grand Budapest",
        summary_sha256=sha256_hex("FACTS:\n- hotel: Grand Budapest"),
        latency_s=0.25,
        model="cheap",
        user_id="u1",
    )
    failure = CompactionRecord(
        "c1", 2, None, False, "messages", turn=4, error="TimeoutError", user_id="u1"
    )
    fact = FactEvent(
        "c1",
        1,
        "allergy",
        "pinned",
        "allergic to peanuts",
        "constraint",
        "app",
        "app",
        turn=1,
        user_id="u1",
    )
    end = CallRecord(
        "c1",
        "u1",
        1000.0,
        ended_at=2000.0,
        ended_by="end",
        summary="S",
        facts=(
            {
                "key": "allergy",
                "text": "allergic to peanuts",
                "kind": "constraint",
                "source": "app",
            },
        ),
        messages_in_context=5,
        messages_archived=2,
        compactions=1,
        turns=4,
    )
    batch = [call, evicted, summarized, compaction, failure, fact, end]
    await store.write(batch)
    # the evicted message is summarized later: same row, now naming its compaction
    later = ArchivedMessage(**{**evicted.__dict__, "removed_by": "summarized", "compaction": 1})
    await store.write([later])
    await store.write(batch[1:3] + [later])  # a retried batch leaves one copy of each

    assert await store.call("c1") == end
    assert await store.calls("u1") == [end]
    assert await store.compactions("c1") == [compaction, failure]
    messages = await store.messages("c1")
    assert [m.position for m in messages] == [0, 1]
    # the row keeps the turn it was evicted at
    assert messages[0] == ArchivedMessage(**{**later.__dict__, "evicted_turn": 2})
    assert json.loads(messages[0].message_json) == tool_call
    assert messages[0].tool_call_ids == ("call_7",)
    assert messages[1] == summarized
    assert await store.messages("c1", compaction=1) == messages
    assert await store.message("c1", 1) == summarized
    assert await store.message("c1", 9) is None
    assert await store.fact_history(call_id="c1") == [fact]
    assert await store.fact_history(user_id="u1") == [fact]


async def test_search_is_ranked_filtered_and_takes_any_words_safely(store):
    await store.write(
        [
            _msg("c1", 0, "My hotel is the Grand Budapest, room 12."),
            _msg("c1", 1, "I like hotels near the station; this hotel has a hotel bar."),
            _msg("c2", 0, "The weather is nice today.", user="u2"),
            _msg("c2", 1, "A hotel in Vienna.", user="u2"),
        ]
    )
    hits = await store.search("hotel Budapest")
    assert [(h.call_id, h.position) for h in hits] == [("c1", 0)]  # all words by default
    assert hits[0].content == "My hotel is the Grand Budapest, room 12."
    assert hits[0].removed_by == "summarized" and hits[0].user_id == "u1" and hits[0].score > 0
    anyw = await store.search("hotel Budapest", any_word=True)
    assert (anyw[0].call_id, anyw[0].position) == ("c1", 0)  # both words rank first
    assert {(h.call_id, h.position) for h in anyw} == {("c1", 0), ("c1", 1), ("c2", 1)}
    assert [h.call_id for h in await store.search("hotel", user_id="u2")] == ["c2"]
    assert [h.position for h in await store.search("hotel", call_id="c1", limit=1)] != []
    assert len(await store.search("hotel", call_id="c1", limit=1)) == 1
    # query syntax from the caller is only words
    plain = await store.search('"budapest" ( * -- :')
    assert [(h.call_id, h.position) for h in plain] == [("c1", 0)]
    odd = await store.search('"budapest" NOT( AND -- OR * (', any_word=True)
    assert [(h.call_id, h.position) for h in odd] == [("c1", 0)]
    assert await store.search("!!! ???") == []


async def test_sqlite_any_word_search_ranks_the_rarest_words(tmp_path, monkeypatch):
    # a word in thousands of messages is left out of the ranked query once the rarer
    # words' matches reach RANK_MATCHES (here 3): scoring all its matches is the slow part
    from pipecat_summarizer.store import _sqlite_search, sqlite

    monkeypatch.setattr(_sqlite_search, "RANK_MATCHES", 3)
    store = sqlite.SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await store.write(
            [_msg("c1", i, f"The weather is fine, day {i}.") for i in range(4)]
            + [
                _msg("c1", 4, "Budapest weather was cold."),
                _msg("c1", 5, "We flew to Budapest."),
                _msg("c1", 6, "Vienna and Budapest by train."),
            ]
        )
        hits = await store.search("weather in Budapest, Vienna", any_word=True)
        both = await store.search("weather Budapest")  # all words: unchanged
        # "weather" alone matches 5 > 3: its latest 3 matches are ranked first
        latest = await store.search("weather", any_word=True, limit=2)
        # ... and all of them when the window holds too few of this caller's
        everyone = await store.search("weather", any_word=True, limit=5)
    finally:
        await store.close()
    # "vienna" (1) and "budapest" (3) are over 3 together: only the rarest is ranked
    assert [h.position for h in hits] == [6]
    assert [h.position for h in both] == [4]
    assert len(latest) == 2 and {h.position for h in latest} <= {2, 3, 4}
    assert {h.position for h in everyone} == {0, 1, 2, 3, 4}


# -- forget and retention ----------------------------------------------------------------


async def test_forget_deletes_everything_held_for_a_caller(store):
    for user, call in (("alice", "a1"), ("alice", "a2"), ("bob", "b1")):
        await store.write(
            [
                CallRecord(call, user),
                _msg(call, 0, f"secret words of {user}", user=user),
                CompactionRecord(call, 1, 1, True, "tokens", summary="s", user_id=user),
                FactEvent(call, 1, "k", "pinned", f"{user} fact", user_id=user),
                CallRecord(call, user, ended_at=time.time(), summary=f"{user} summary"),
            ]
        )
    deleted = await store.forget("alice")
    assert deleted == 8  # 2 messages, 2 compactions, 2 facts, 2 calls
    assert await store.calls("alice") == []
    for call in ("a1", "a2"):
        assert await store.call(call) is None
        assert await store.messages(call) == []
        assert await store.compactions(call) == []
        assert await store.fact_history(call_id=call) == []
    assert await store.search("secret") != [] and all(
        h.user_id == "bob" for h in await store.search("secret")
    )
    memory = await store.caller_memory("alice")
    assert memory.facts == [] and memory.summaries == [] and memory.calls == 0
    assert len(await store.calls("bob")) == 1 and len(await store.messages("b1")) == 1


async def test_retention_deletes_records_older_than_n_days(store, store_target):
    old = time.time() - 10 * 86400
    await store.write(
        [
            CallRecord("old", "u1", started_at=old),
            _msg("old", 0, "ancient apples", at=old),
            CompactionRecord("old", 1, 1, True, "tokens", at=old, user_id="u1"),
            FactEvent("old", 1, "k", "pinned", "old fact", at=old, user_id="u1"),
            CallRecord("new", "u1"),
            _msg("new", 0, "fresh apples"),
        ]
    )
    assert await store.purge_older_than(7) == 4
    assert [c.call_id for c in await store.calls("u1")] == ["new"]
    assert [h.call_id for h in await store.search("apples")] == ["new"]
    assert await store.compactions("old") == [] and await store.fact_history(call_id="old") == []
    # the option applies it when a store opens
    await store.write([_msg("new", 1, "stale pears", at=old)])
    await store.close()
    kept = open_store(store_target, retention_days=7)
    try:
        assert [h.content for h in await kept.search("pears")] == []
        assert [h.content for h in await kept.search("apples")] == ["fresh apples"]
    finally:
        await kept.close()


# -- through a real pipeline -----------------------------------------------------------------

HOTEL = "My name is Alice Smith and my hotel is the Grand Budapest, booking ID HB-4471."


def _summaries(body: dict) -> Reply:
    if is_summary_request(body):
        return Reply("FACTS:\n- caller name: Alice Smith\n- hotel: Grand Budapest")
    return Reply("Sure thing.")


async def _call(server, target, *, user_id, call_id, texts, memory=None, pins=(), gap=2.0):
    store = open_store(target)
    context = LLMContext(messages=[{"role": "system", "content": SYSTEM}])
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=6, keep=2),
        summarizer=OpenAISummarizer(base_url=server.base_url, model="cheap"),
        store=store,
        call_id=call_id,
        user_id=user_id,
        memory=memory or MemoryParams(writer=FAST),
    )
    for key, text in pins:
        processor.pin(key, text)
    processor.applied = []

    @processor.event_handler("on_context_compacted")
    async def _applied(_, event):
        processor.applied.append(event)

    try:
        await run_settling(
            build(context, processor, main_llm(server.base_url)),
            frames_to_send=[*turns(texts, gap=gap)],
        )
    finally:
        await store.close()
    return processor, context


async def test_a_call_is_recorded_and_a_returning_caller_is_remembered(openai_server, store_target):
    openai_server.handler = _summaries
    first = [HOTEL, *(f"question {i} about breakfast" for i in range(7))]
    processor, context = await _call(
        openai_server,
        store_target,
        user_id="alice",
        call_id="call-1",
        texts=first,
        pins=[("vip", "The caller is a VIP guest")],
    )
    assert processor.call_id == "call-1"
    store = open_store(store_target)
    try:
        compactions = await store.compactions("call-1")
        assert compactions and all(c.ok for c in compactions)
        c = compactions[0]
        assert c.compaction == 1 and c.model == "cheap" and c.reason == "messages"
        assert c.summary_sha256 == sha256_hex(c.summary) and c.summary
        # the store holds the same figures as the events
        assert [
            (
                x.compaction,
                x.reason,
                x.tokens_before,
                x.tokens_after,
                x.messages_before,
                x.messages_after,
                x.messages_summarized,
                x.summary_sha256[:12],
            )
            for x in compactions
        ] == [
            (
                e.compaction,
                e.reason,
                e.tokens_before,
                e.tokens_after,
                e.messages_before,
                e.messages_after,
                e.messages_summarized,
                e.summary_sha256,
            )
            for e in processor.applied
        ]
        dropped = await store.messages("call-1", compaction=1)
        assert len(dropped) == c.messages_summarized
        assert dropped[0].content == HOTEL and dropped[0].role == "user"
        assert json.loads(dropped[0].message_json) == {"role": "user", "content": HOTEL}
        archived = await store.messages("call-1")
        assert [m.position for m in archived] == list(range(len(archived)))
        # every archived message is gone from the context, and was said in the call
        assert HOTEL not in texts_of(context.messages)
        hits = await store.search("Grand Budapest booking", user_id="alice")
        session = (await store.call("call-1")).call_id  # the session's key; its label: call-1
        assert (hits[0].call_id, hits[0].position) == (session, 0)
        history = await store.fact_history(call_id="call-1")
        assert ("vip", "pinned", "app") in {(f.key, f.action, f.actor) for f in history}
        assert any(f.actor == "conversation" and "Grand Budapest" in f.text for f in history)
        call = await store.call("call-1")
        assert call.ended_by == "end" and call.summary == processor.summary_text
        assert call.turns == len(first) and call.compactions == len(compactions)
        assert call.messages_archived == len(archived)
        assert {f["key"] for f in call.facts} >= {"vip"}
    finally:
        await store.close()

    # the caller calls back: their memory joins as soon as it has loaded (a frame never
    # waits for the store: the first turn may go without it)
    openai_server.requests.clear()
    await _call(
        openai_server,
        store_target,
        user_id="alice",
        call_id="call-2",
        texts=["hi, it's me", "is my booking still on?"],
        # the memory loads while the first turn runs (no frame waits for it); the pause then
        # waits for the load (a 0.6 s cap ran out on PostgreSQL under load: no VIP fact)
        gap=3.0,
    )
    request = openai_server.chat_requests[-1]["messages"]
    assert request[0] == {"role": "system", "content": SYSTEM}
    text = texts_of(request)
    assert "The caller is a VIP guest" in text and EARLIER_CALLS_HEADER in text
    assert "Grand Budapest" in text
    earlier = next(m for m in request if EARLIER_CALLS_HEADER in str(m["content"]))
    assert earlier["role"] == "user"  # conversation-derived: quoted data, never system
    store = open_store(store_target)
    try:
        assert [c.label for c in await store.calls("alice")] == ["call-2", "call-1"]
        assert (await store.call("call-2")).resumed
        restored = await store.fact_history(call_id="call-2")
        assert restored and {f.action for f in restored} == {"restored"}
    finally:
        await store.close()

    # resume off, or another caller: nothing from earlier calls
    openai_server.requests.clear()
    await _call(
        openai_server,
        store_target,
        user_id="alice",
        call_id="call-3",
        texts=["hello"],
        memory=MemoryParams(resume=False, writer=FAST),
    )
    await _call(openai_server, store_target, user_id="bob", call_id="call-4", texts=["hello"])
    for body in openai_server.chat_requests:
        assert "Grand Budapest" not in texts_of(body["messages"])
        assert "VIP" not in texts_of(body["messages"])


# -- the database down -----------------------------------------------------------------------


class _Outage:
    """Makes the backend unavailable for real: an exclusive lock on the SQLite file, or the
    PostgreSQL server stopped."""

    def __init__(self, backend, target, request):
        self.backend, self.target = backend, target
        self.server = request.getfixturevalue("pg_server") if backend == "postgres" else None
        self._conn = None

    async def begin(self):
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)
        else:
            import sqlite3

            self._conn = sqlite3.connect(self.target, isolation_level=None)
            self._conn.execute("BEGIN EXCLUSIVE")

    async def end(self):
        if self.server is not None:
            await asyncio.to_thread(self.server.start)
        elif self._conn is not None:
            self._conn.execute("ROLLBACK")
            self._conn.close()


async def test_database_down_for_a_stretch_of_turns(
    openai_server, store_target, backend, request, logs
):
    openai_server.handler = _summaries
    prepared = open_store(store_target, **({"busy_timeout_s": 0.05} if backend == "sqlite" else {}))
    await prepared.open()  # the schema exists; then the database goes away
    await prepared.close()
    outage = _Outage(backend, store_target, request)
    texts = [HOTEL, *(f"turn {i} about dinner" for i in range(9))]
    store = open_store(store_target, **({"busy_timeout_s": 0.05} if backend == "sqlite" else {}))
    context = LLMContext(messages=[{"role": "system", "content": SYSTEM}])
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=6, keep=2),
        summarizer=OpenAISummarizer(base_url=openai_server.base_url, model="cheap"),
        store=store,
        call_id="down",
        user_id="carol",
        memory=MemoryParams(writer=FAST, flush_timeout_s=20),
    )

    async def recover_after_six_turns():
        while len(openai_server.chat_requests) < 6:
            await asyncio.sleep(0.02)
        await outage.end()

    await outage.begin()
    recovery = asyncio.create_task(recover_after_six_turns())
    try:
        await run_settling(
            build(context, processor, main_llm(openai_server.base_url)),
            frames_to_send=[*turns(texts, gap=0.15)],
        )
        await recovery
    finally:
        if not recovery.done():
            recovery.cancel()
            await outage.end()
    # the call went on: every turn reached the main LLM, the summaries were applied
    assert len(openai_server.chat_requests) == len(texts)
    assert processor.summary_text
    warnings = [r for r in logs if r["level"].name == "WARNING" and "write failed" in r["message"]]
    assert len(warnings) == 1  # one per outage
    assert not [r for r in logs if r["level"].name == "ERROR" and "memory store" in r["message"]]
    try:
        # nothing lost: every archived position, every compaction, the final state
        archived = await store.messages("down")
        assert archived and [m.position for m in archived] == list(range(len(archived)))
        assert archived[0].content == HOTEL
        call = await store.call("down")
        assert call.ended_by == "end" and call.messages_archived == len(archived)
        assert len([c for c in await store.compactions("down") if c.ok]) == call.compactions >= 1
    finally:
        await store.close()


# -- evicted, then summarized or replaced ---------------------------------------------------


def _said(n, prefix, pad=40):
    return [f"{prefix} {i}" + " filler" * pad for i in range(n)]


async def test_evicted_messages_keep_their_place_until_summarized_or_replaced(
    openai_server, store_target
):
    from pipecat.frames.frames import LLMMessagesTransformFrame, LLMMessagesUpdateFrame

    from pipecat_summarizer import SummarizerOptions

    healthy = False

    def handler(body):
        if is_summary_request(body):
            return Reply("FACTS:\n- talked") if healthy else Reply("down", status=500)
        return Reply("Sure thing.")

    def toggle(messages):
        nonlocal healthy
        healthy = not healthy
        return messages

    openai_server.handler = handler
    store = open_store(store_target)
    context = LLMContext(messages=[{"role": "system", "content": SYSTEM}])
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=6, keep=2),
        summarizer=OpenAISummarizer(base_url=openai_server.base_url, model="cheap"),
        options=SummarizerOptions(
            max_request_tokens=300,
            retry_backoff_s=0,
            pin_evicted_facts=False,
            pin_summary_facts=False,  # a pinned block hides the replacement (see report)
        ),
        store=store,
        call_id="evict",
        memory=MemoryParams(writer=FAST),
    )
    system = context.messages[0]
    frames = [
        *turns(_said(6, "FIRST-TOPIC"), 2.0),  # summarizer down: the ceiling evicts
        LLMMessagesTransformFrame(transform=toggle),  # up: the backlog is summarized
        *turns(_said(3, "SECOND-TOPIC"), 2.0),
        LLMMessagesTransformFrame(transform=toggle),  # down again: evictions wait...
        *turns(_said(6, "THIRD-TOPIC"), 2.0),
        LLMMessagesUpdateFrame(  # ...and the application replaces the context
            messages=[system, {"role": "user", "content": "a new conversation"}], run_llm=True
        ),
        Gap(sleep=2.0),
    ]
    try:
        # settled pauses with 2 s caps: full 0.1 s pauses (run_test) missed the backlog compaction
        # under load (1 in 10 on SQLite), and so did settled ones with 0.1 s caps on PostgreSQL
        await run_settling(
            build(context, processor, main_llm(openai_server.base_url)), frames_to_send=frames
        )
        archived = await store.messages("evict")
        compactions = await store.compactions("evict")
    finally:
        await store.close()
    assert [m.position for m in archived] == list(range(len(archived)))
    first = [m for m in archived if "FIRST-TOPIC" in m.content]
    third = [m for m in archived if "THIRD-TOPIC" in m.content]
    assert first and third
    # evicted while the summarizer was down, then summarized by the backlog compaction
    evicted = [m for m in first if m.evicted_turn is not None]
    assert len(evicted) >= 2
    assert all(m.removed_by == "summarized" and m.compaction for m in first)
    assert any(c.ok and c.reason == "backlog" for c in compactions)
    assert any(not c.ok for c in compactions)  # the failures are on record too
    # pending when the application replaced the context: archived as replaced, not lost
    replaced = [m for m in third if m.removed_by == "replaced"]
    assert replaced and all(m.compaction is None for m in replaced)
    assert any(m.evicted_turn for m in replaced)  # the pending queue's
    # what the replacement removed from the context is archived too, each message once
    assert len(third) == len({m.content for m in third}) == 6 == len(replaced)
    assert processor.pending_messages == []

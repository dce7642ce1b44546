"""Semantic recall keeps to its caller, stays off the event loop, and forgets at once.

Through the public API (:class:`SemanticIndex`) over a real SQLite store and the real
WordLlama model of the ``semantic`` extra; the forget case also through a real pipeline
(``LLMContextAggregatorPair``, ``ContextSummarizer``, Pipecat's OpenAI service against the
local OpenAI-protocol server).
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace

import pytest

from pipecat_summarizer._recall.embedding import (
    WordLlamaEmbedder,
    embedder_for,
    load_semantic_model,
)
from pipecat_summarizer._recall.semantic import SemanticIndex
from pipecat_summarizer.params import RecallParams, SemanticRecallParams
from pipecat_summarizer.store import MemoryStore, SQLiteMemoryStore
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord
from tests.recall.test_semantic import ASK, FILLER, PET, _call, _summaries
from tests.support.openai_server import Reply, is_summary_request

# Bob's own detail, found by meaning ("art" / "oil paintings of lighthouses")
BOB = "On weekends I make oil paintings of old lighthouses along the coast."
BOB_ASK = "What art do I make?"


@pytest.fixture(scope="module")
def semantic() -> SemanticRecallParams:
    """One model for the module, loaded before the calls (as an application would):
    WordLlama, whose indexing is instant, for recall's mechanics (the default model, MiniLM,
    is tested in test_semantic_models.py)."""
    options = SemanticRecallParams(model="wordllama")
    load_semantic_model(options)
    return options


def _messages(call_id: str, user_id: str | None, texts: list[str], start: int = 0) -> list:
    return [
        ArchivedMessage(
            call_id,
            start + i,
            "user" if i % 2 == 0 else "assistant",
            text,
            "{}",
            turn=i // 2,
            user_id=user_id,
        )
        for i, text in enumerate(texts)
    ]


def _texts(hits) -> list[str]:
    return [h.content for h in hits]


async def test_a_reused_call_id_never_brings_another_callers_message(tmp_path, semantic):
    """Alice's call was "room-1"; Bob's call reuses the id (a room name). Bob's index holds
    his own messages only, whatever the archive returns under that id; an index without a
    caller holds neither's."""
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        now = time.time()
        await store.write(
            [
                CallRecord("room-1", user_id="alice", started_at=now - 60, ended_at=now - 30),
                *_messages("room-1", "alice", [PET, *FILLER[:3]]),
            ]
        )
        # Bob, in the same room later: his messages under the same call_id (other positions,
        # so the store keeps both whatever it does about the reused id)
        await store.write(_messages("room-1", "bob", [BOB, "Lovely, noted."], start=100))
        assert {m.user_id for m in await store.messages("room-1")} == {"alice", "bob"}

        bob = SemanticIndex(semantic, call_id="room-1", user_id="bob")
        assert await bob.refresh(store) == 2
        hits, similarity = bob.rank(ASK)
        assert not any("Rex" in t for t in _texts(hits))
        assert all(key[1] >= 100 for key in similarity)  # Alice's rows were never embedded
        assert bob.reply("room-1", 0) is None  # nor the answer to Alice's first message
        # the control: Bob's own detail is found by meaning
        hits, _ = bob.rank(BOB_ASK)
        assert any("lighthouses" in t for t in _texts(hits))

        # a call without a caller: the messages archived under the id by callers are not its
        anonymous = SemanticIndex(semantic, call_id="room-1", user_id=None)
        await anonymous.refresh(store)
        assert anonymous.size == 0
        assert anonymous.rank(ASK) == ([], {})

        # and Alice, back in the room, gets her own detail and not Bob's
        alice = SemanticIndex(semantic, call_id="room-1", user_id="alice")
        await alice.refresh(store)
        assert any("Rex" in t for t in _texts(alice.rank(ASK)[0]))
        assert not any("lighthouses" in t for t in _texts(alice.rank(BOB_ASK)[0]))
    finally:
        await store.close()


class EveryonesCalls:
    """An archive that lists every caller's calls whoever asks (as a store with a bug, or one
    shared under a wrong id, would): the index must still keep to its caller."""

    def __init__(self, store: MemoryStore):
        self.store = store

    async def calls(self, user_id=None, *, limit=50):
        return await self.store.calls(None, limit=limit)

    async def messages(self, call_id, **kwargs):
        return await self.store.messages(call_id, **kwargs)

    async def message(self, call_id, position):
        return await self.store.message(call_id, position)


async def test_an_archive_that_lists_other_callers_calls_brings_none_of_them(tmp_path, semantic):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        now = time.time()
        await store.write(
            [
                CallRecord("a1", user_id="alice", started_at=now - 90, ended_at=now - 60),
                *_messages("a1", "alice", [PET, *FILLER[:3]]),
                CallRecord("b1", user_id="bob", started_at=now - 50, ended_at=now - 40),
                *_messages("b1", "bob", [BOB, "Lovely, noted."]),
            ]
        )
        bob = SemanticIndex(semantic, call_id="b2", user_id="bob")
        await bob.refresh(EveryonesCalls(store))
        assert bob.size == 2
        assert not any("Rex" in t for t in _texts(bob.rank(ASK)[0]))
        assert any("lighthouses" in t for t in _texts(bob.rank(BOB_ASK)[0]))
    finally:
        await store.close()


class ThreadRecordingEmbedder:
    """The real model; records which thread embedded the archive, and when it began."""

    def __init__(self, inner: WordLlamaEmbedder):
        self.inner = inner
        self.threads: set[int] = set()
        self.started = threading.Event()

    @property
    def loaded(self) -> bool:
        return self.inner.loaded

    def embed(self, texts):
        if len(texts) > 1:  # the archive (a turn's query is one text)
            self.threads.add(threading.get_ident())
            self.started.set()
        return self.inner.embed(texts)


async def test_indexing_a_large_archive_leaves_the_loop_free(tmp_path, semantic):
    """While 4,000 earlier messages are embedded, a frame that needs 150 trips through the
    event loop (as one does through a pipeline's queues) still gets through. Embedded on the
    loop in slices, each trip waited for a slice: 125 slices, and no such frame finished
    before the indexing did."""
    store = SQLiteMemoryStore(tmp_path / "m.db")
    texts = [f"{FILLER[i % len(FILLER)]} I asked this on day {i}." for i in range(4000)]
    try:
        now = time.time()
        await store.write(
            [
                CallRecord("c1", user_id="al", started_at=now - 90, ended_at=now - 60),
                *_messages("c1", "al", texts),
            ]
        )
        embedder = ThreadRecordingEmbedder(embedder_for(semantic))
        index = SemanticIndex(
            SemanticRecallParams(embedder=embedder, model="wordllama"), call_id="c2", user_id="al"
        )
        indexing = asyncio.ensure_future(index.refresh(store))
        frames = 0  # frames that began after the embedding began and ended before its end
        while not indexing.done():
            began = embedder.started.is_set()
            for _ in range(150):
                await asyncio.sleep(0)
            if began and not indexing.done():
                frames += 1
        assert await indexing == 4000
        assert frames > 0
        assert threading.get_ident() not in embedder.threads  # never on the loop's thread
    finally:
        await store.close()


async def test_refreshes_at_once_embed_each_message_once_beside_its_vector(tmp_path, semantic):
    """The index grows from a worker thread's results: two refreshes at once (a kick and a
    turn's) append each message once, and each row's vector is its own message's."""
    store = SQLiteMemoryStore(tmp_path / "m.db")
    texts = [PET, BOB, *FILLER] * 3
    try:
        now = time.time()
        await store.write(
            [
                CallRecord("c1", user_id="al", started_at=now - 90, ended_at=now - 60),
                *_messages("c1", "al", texts),
            ]
        )
        index = SemanticIndex(semantic, call_id="c2", user_id="al")
        index.kick(store)
        await asyncio.gather(index.refresh(store), index.refresh(store))
        await index.close()
        assert index.size == len(texts)
        for position, text in enumerate(texts):
            _, similarity = index.rank(text)
            assert similarity[("c1", position)] > 0.999  # its own text, in its own row
    finally:
        await store.close()


async def test_forget_empties_the_live_index_at_once(tmp_path, semantic):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        now = time.time()
        await store.write(
            [
                CallRecord("c1", user_id="al", started_at=now - 90, ended_at=now - 60),
                *_messages("c1", "al", [PET, "What a lovely dog.", *FILLER[:2]]),
                CallRecord("b1", user_id="bob", started_at=now - 50, ended_at=now - 40),
                *_messages("b1", "bob", [BOB]),
            ]
        )
        index = SemanticIndex(semantic, call_id="c2", user_id="al")
        bobs = SemanticIndex(semantic, call_id="b2", user_id="bob")
        await index.refresh(store)
        await bobs.refresh(store)
        hits, _ = index.rank(ASK)
        assert any("Rex" in t for t in _texts(hits))
        assert index.reply("c1", 0) == ("assistant", "What a lovely dog.")

        assert await store.forget("al") > 0
        # at once: no refresh, no await in between
        assert index.rank(ASK) == ([], {})
        assert index.reply("c1", 0) is None
        assert index.size == 0 and index.forgets == 1
        assert await index.rank_soon(ASK) == ([], {})
        # what the store still holds of the caller (nothing) is all a refresh brings back
        await index.refresh(store)
        assert not any("Rex" in t for t in _texts(index.rank(ASK)[0]))
        # another caller's index is not touched
        assert bobs.size == 1 and bobs.forgets == 0
        assert any("lighthouses" in t for t in _texts(bobs.rank(BOB_ASK)[0]))
    finally:
        await store.close()


@pytest.mark.parametrize("by", ["the call's store", "another process"])
async def test_forget_during_a_call_stops_semantic_recall_quoting_it(openai_server, tmp_path, by):
    """Alice's earlier call told of Rex; in her next call the application forgets her (she
    asked to be forgotten) before she asks about her pet: the question goes out without the
    detail, though her index had embedded it. Forgotten through another store object (another
    process, an admin tool), the live call's store never counted it: the recall step reads the
    tombstone beside its search and the index drops the caller before it ranks."""
    semantic = SemanticRecallParams(model="wordllama")  # instant indexing: the mechanics
    load_semantic_model(semantic)
    recall = replace(RecallParams(latency_budget_s=5.0), semantic=semantic)
    store = SQLiteMemoryStore(tmp_path / "m.db")
    admin = store if by == "the call's store" else SQLiteMemoryStore(tmp_path / "m.db")
    forgotten: list[int] = []

    async def handler(body: dict) -> Reply:
        if not is_summary_request(body) and body["messages"][-1].get("content") == FILLER[0]:
            forgotten.append(await admin.forget("al"))
        return _summaries(body)

    try:
        await _call(openai_server, store, [PET, *FILLER], recall=recall, call_id="c1", user_id="al")
        openai_server.requests.clear()
        openai_server.handler = handler
        processor = await _call(
            openai_server,
            store,
            [FILLER[0], ASK],
            recall=recall,
            call_id="c2",
            user_id="al",
            lead=0.5,  # the earlier call is embedded before the first turn
        )
    finally:
        await store.close()
        await admin.close()
    assert forgotten and forgotten[0] > 0
    assert store.forget_generation("al") >= 1  # counted by the forget, or from the tombstone
    last = openai_server.chat_requests[-1]
    assert last["messages"][-1]["content"] == ASK
    # nothing of Rex anywhere in the request: not recalled, not in the earlier-calls memory
    assert not any("Rex" in str(m["content"]) for m in last["messages"])
    assert processor.recall_step.semantic.forgets == 1

"""Attack: embeddings of a forgotten caller's words must not stay in the process's memory.

The process keeps each model's recent vectors by a hash of the text (``cached_vectors``), so
a returning caller's archive is not embedded again. A forget drops the caller's text from the
store and the live index; these tests look for the caller's vectors in that cache afterwards:
after a forget by the call's own store, by another store object (another process: noticed
from its tombstone), while a chunk of theirs is being embedded, and through a real pipeline.
SQLite and the real PostgreSQL.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from dataclasses import replace

import numpy as np
import pytest

from pipecat_summarizer._recall import embedding as embedding_module
from pipecat_summarizer._recall.embedding import (
    _text_key,
    embedder_for,
    forget_vectors,
    load_semantic_model,
)
from pipecat_summarizer._recall.semantic import SemanticIndex
from pipecat_summarizer.params import RecallParams, SemanticRecallParams
from pipecat_summarizer.store import open_store
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord
from tests.recall.test_semantic import ASK, FILLER, PET, _call, _summaries
from tests.support.openai_server import Reply, is_summary_request

BOB = "On weekends I make oil paintings of old lighthouses along the coast."


@pytest.fixture(scope="module")
def semantic() -> SemanticRecallParams:
    """WordLlama (instant indexing): the cache's mechanics, not the model's quality."""
    options = SemanticRecallParams(model="wordllama")
    load_semantic_model(options)
    return options


#: Another process's forget (an admin tool, another worker): this process's own forget tells
#: the vector cache at once, so only a real other process shows what is learnt from the
#: tombstone.
_FORGET = """
import asyncio, sys
from pipecat_summarizer.store import open_store

async def main():
    store = open_store(sys.argv[1])
    await store.open()
    try:
        print(await store.forget(sys.argv[2]))
    finally:
        await store.close()

asyncio.run(main())
"""


async def _forget_elsewhere(target, user_id: str) -> int:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _FORGET, str(target), user_id, stdout=subprocess.PIPE
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0
    return int(out.decode().strip().splitlines()[-1])


def _cached(semantic: SemanticRecallParams, text: str) -> bool:
    cache = embedding_module._CACHES.get(embedder_for(semantic))
    return cache is not None and _text_key(text) in cache.rows


def _messages(call_id: str, user_id: str, texts: list[str]) -> list[ArchivedMessage]:
    return [
        ArchivedMessage(
            call_id, i, "user" if i % 2 == 0 else "assistant", t, "{}", turn=i // 2, user_id=user_id
        )
        for i, t in enumerate(texts)
    ]


async def _archive(store, user: str, call_id: str, texts: list[str]) -> None:
    now = time.time()
    await store.write(
        [
            CallRecord(call_id, user_id=user, started_at=now - 90, ended_at=now - 60),
            *_messages(call_id, user, texts),
        ]
    )


# unique texts per test: the cache is the process's, shared by every test of the run
def _unique(text: str, tag: str) -> str:
    return f"{text} ({tag} {time.monotonic_ns()})"


async def test_a_forget_drops_the_callers_cached_vectors_both_backends(store_target, semantic):
    pet, bob = _unique(PET, "own"), _unique(BOB, "own")
    store = open_store(store_target)
    await store.open()
    try:
        await _archive(store, "al", "a1", [pet, "What a lovely dog."])
        await _archive(store, "bob", "b1", [bob])
        index = SemanticIndex(semantic, call_id="a2", user_id="al")
        bobs = SemanticIndex(semantic, call_id="b2", user_id="bob")
        assert await index.refresh(store) == 2 and await bobs.refresh(store) == 1
        assert _cached(semantic, pet) and _cached(semantic, bob)

        assert await store.forget("al") > 0
        index.rank(ASK)  # the index sees the forget
        assert index.forgets == 1
        assert not _cached(semantic, pet)
        # another caller's vectors are untouched
        assert _cached(semantic, bob) and bobs.forgets == 0
    finally:
        await store.close()


async def _indexed(store_target, semantic, text: str):
    """The store with Al's earlier call saying ``text``, and his next call's index of it."""
    store = open_store(store_target)
    await store.open()
    await _archive(store, "al", "a1", [text])
    index = SemanticIndex(semantic, call_id="a2", user_id="al")
    await index.refresh(store)
    return store, index


async def test_another_processs_forget_drops_the_cached_vectors_when_noticed(
    store_target, semantic
):
    """The forget runs in another process (an admin tool, another worker): this
    process learns of it from the tombstone (``noticed_forget``, read beside a turn's
    search); the index's next look drops the index and the cached vectors."""
    pet = _unique(PET, "other")
    since = time.time() - 1
    store, index = await _indexed(store_target, semantic, pet)
    try:
        assert _cached(semantic, pet)
        assert await _forget_elsewhere(store_target, "al") > 0
        index.rank(ASK)
        assert _cached(semantic, pet)  # not noticed yet: this process never counted it
        assert await store.noticed_forget("al", since)
        index.rank(ASK)
        assert index.forgets == 1 and not _cached(semantic, pet)
    finally:
        await store.close()


class _GatedEmbedder:
    """A model whose embedding waits for a gate: a chunk in flight while the forget runs."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()

    def embed(self, texts):
        self.entered.set()
        assert self.gate.wait(10)
        rng = np.random.default_rng(len(texts))
        return rng.standard_normal((len(texts), 8)).astype(np.float32)


async def test_a_chunk_embedded_while_the_forget_ran_leaves_no_cached_vector(tmp_path):
    model = _GatedEmbedder()
    semantic = SemanticRecallParams(embedder=model, min_similarity=0.0)
    pet = _unique(PET, "inflight")
    store = open_store(tmp_path / "m.db")
    await store.open()
    try:
        await _archive(store, "al", "a1", [pet])
        index = SemanticIndex(semantic, call_id="a2", user_id="al")
        refresh = asyncio.ensure_future(index.refresh(store))
        assert await asyncio.to_thread(model.entered.wait, 10)
        assert await store.forget("al") > 0
        index.rank(ASK)  # the forget is seen while the chunk is still in the model
        model.gate.set()
        await refresh
        assert index.size == 0
        cache = embedding_module._CACHES.get(model)
        assert cache is not None and _text_key(pet) not in cache.rows
    finally:
        model.gate.set()
        await store.close()


def test_forget_vectors_keeps_a_text_another_caller_shares_only_until_either_is_forgotten():
    """The pure cache rule: a vector is dropped when any caller it embeds for is forgotten
    (the other caller's next index embeds it again: a cost, never a leak)."""

    class Fixed:
        def embed(self, texts):
            return np.ones((len(texts), 4), dtype=np.float32)

    model = Fixed()
    shared, own = _unique("Thanks, that is all.", "shared"), _unique("My PIN hint is Rex.", "own")
    al, bob = _unique("al", "owner"), _unique("bob", "owner")  # the cache is the process's
    embedding_module.cached_vectors(model, [shared, own], al)
    embedding_module.cached_vectors(model, [shared], bob)
    cache = embedding_module._CACHES[model]
    assert {_text_key(shared), _text_key(own)} <= set(cache.rows)
    assert forget_vectors(al) == 2
    assert _text_key(own) not in cache.rows and _text_key(shared) not in cache.rows
    assert forget_vectors(al) == 0
    # an owner-less vector (a call without a caller) is never taken by a forget
    embedding_module.cached_vectors(model, [own])
    assert forget_vectors(al) == 0 and _text_key(own) in cache.rows


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_a_forget_during_a_call_leaves_no_vector_of_the_caller_pipeline(
    openai_server, store_target
):
    """Through a real pipeline: Alice's earlier call is embedded into her next call's index;
    mid-call another process forgets her (an admin tool, another worker: this process
    learns of it from the tombstone); once the call is over no vector of her earlier words is
    in the process. (The call's own store's forget: the direct tests above, both backends.)"""
    semantic = SemanticRecallParams(model="wordllama")
    load_semantic_model(semantic)
    recall = replace(RecallParams(latency_budget_s=5.0), semantic=semantic)
    pet = _unique(PET, "pipeline")
    store = open_store(store_target)
    forgotten: list[int] = []
    cached_before: list[bool] = []

    async def handler(body: dict) -> Reply:
        if not is_summary_request(body) and body["messages"][-1].get("content") == FILLER[0]:
            cached_before.append(_cached(semantic, pet))  # c2's index embedded c1
            forgotten.append(await _forget_elsewhere(store_target, "al"))
        return _summaries(body)

    try:
        openai_server.handler = _summaries
        await _call(
            openai_server, store, [pet, FILLER[1]], recall=recall, call_id="c1", user_id="al"
        )
        openai_server.handler = handler
        processor = await _call(
            openai_server,
            store,
            [FILLER[0], ASK],
            recall=recall,
            call_id="c2",
            user_id="al",
            lead=0.5,
            gap=10.0,  # settles once the reply (which waits for the forget) has ended
        )
    finally:
        await store.close()
    assert forgotten and forgotten[0] > 0 and cached_before == [True]
    assert processor.recall_step.semantic.forgets == 1
    assert not _cached(semantic, pet)


async def test_a_forget_after_the_call_ended_drops_the_cached_vectors(store_target, semantic):
    """The common case of a forget: the caller's call is over (its index closed), then the
    application forgets them. Nothing live sees the forget; the cache still holds vectors of
    their words until 20,000 newer ones push them out."""
    pet = _unique(PET, "ended")
    store = open_store(store_target)
    await store.open()
    try:
        await _archive(store, "al", "a1", [pet])
        index = SemanticIndex(semantic, call_id="a2", user_id="al")
        await index.refresh(store)
        await index.close()
        assert _cached(semantic, pet)
        assert await store.forget("al") > 0
        assert not _cached(semantic, pet)
    finally:
        await store.close()


async def test_a_forget_noticed_during_the_call_drops_the_vectors_when_the_call_ends(
    store_target, semantic
):
    """The step noticed the other process's forget (its tombstone, beside the last turn's
    search), but the index never ranked again (the ranking came late, the call ended):
    closing the index drops the caller's vectors."""
    pet = _unique(PET, "closing")
    since = time.time() - 1
    store, index = await _indexed(store_target, semantic, pet)
    try:
        assert await _forget_elsewhere(store_target, "al") > 0
        assert await store.noticed_forget("al", since)  # the step's read, at the last turn
        await index.close()  # the call ends: no ranking in between
        assert index.forgets == 1 and index.size == 0 and not _cached(semantic, pet)
    finally:
        await store.close()

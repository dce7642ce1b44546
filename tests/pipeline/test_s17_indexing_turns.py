"""The archive's background embedding never competes with a turn (S16-G-1).

With recall by meaning, a returning caller's archive is embedded in the process's indexing
thread while the call goes on. A sentence model's embedding took a core and the GIL from the
turns' 10 ms windows (LoCoMo at the real budget read under the lexical run beside it, and
equal at 1 s). Now the thread embeds in pieces and starts none while a recall turn of the
process is on its way (from its step's start to its block placed or let go), unless it has
waited its cap: turns that never pause still leave the index its share.

Real pipelines: the real ``LLMContextAggregatorPair``, ``ContextSummarizer`` with a real store
(a SQLite file, the real PostgreSQL), Pipecat's OpenAI service against the local
OpenAI-protocol server. The store's search of the turn is held on an event the test sets (the
turn stays on its way as long as the test likes); the embedder (WordLlama's real vectors)
sleeps in each piece and records, for each piece, whether the held turn was on its way when
the piece started (the first piece after the first chunk waits for the turn to be held, so
the index is still embedding when the turn comes). Counted, never timed.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._recall import semantic, turn_gate
from pipecat_summarizer._recall.embedding import embedder_for, load_semantic_model
from pipecat_summarizer.params import MemoryParams, RecallParams, SemanticRecallParams, WriterParams
from pipecat_summarizer.store import open_store
from tests.support.openai_server import Reply
from tests.support.pipeline_utils import cfg, main_llm, user_turn
from tests.support.recall_calls import ended_call
from tests.support.settle import Gap, Until, run_settling

FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)
LINES = [
    f"{who} {what} on {day}."
    for who, what, day in zip(
        ["My sister", "The dog", "Our landlord", "My manager"] * 4,
        ["called about Lisbon", "chewed the sofa", "raised the rent", "moved the review"] * 4,
        [f"day {d}" for d in range(16)],
        strict=True,
    )
]
CHUNK = 4  # the index's chunks here (EMBED_CHUNK): it grows by 4 messages at a time
PIECE_SLEEP_S = 0.02  # each piece (one message here) sleeps this long in the indexing thread
ASK = "What did my sister say about Lisbon?"


class _Held:
    """The store's next search waits on ``release`` (set by the test): the turn that makes
    it stays on its way meanwhile."""

    def __init__(self, store) -> None:
        self.armed = False
        self.holding = False
        self.entered = threading.Event()  # the held search began (read by the indexing thread)
        self.release = asyncio.Event()
        search = store.search

        async def held_search(*args, **kwargs):
            if self.armed:
                self.armed, self.holding = False, True
                self.entered.set()
                try:
                    await self.release.wait()
                finally:
                    self.holding = False
            return await search(*args, **kwargs)

        store.search = held_search


class _Pieces:
    """WordLlama's vectors; each call of the indexing thread (a piece) sleeps and records
    whether the held turn was on its way when it started."""

    def __init__(self, inner, held: _Held) -> None:
        self.inner = inner
        self.held = held
        self.pieces: list[bool] = []  # per piece: the held turn was on its way
        self.caps: list[int] = []  # per piece started with the turn on its way: _capped()
        self._texts = 0  # texts the indexing thread asked for so far
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self.inner.loaded

    def embed(self, texts):
        if threading.current_thread().name.startswith("semantic-embed"):
            with self._lock:
                holding = self.held.holding
                self.pieces.append(holding)
                if holding:
                    self.caps.append(_capped())
                first_of_second_chunk = self._texts == CHUNK
                self._texts += len(texts)
            if first_of_second_chunk:
                # the first chunk is in: this piece, started before the turn, ends once the
                # turn is held at its search (the index is still embedding when it comes)
                self.held.entered.wait(timeout=10.0)
            time.sleep(PIECE_SLEEP_S)
        return self.inner.embed(texts)

    def during_turn(self) -> int:
        with self._lock:
            return sum(self.pieces)


def _waited() -> int:
    return turn_gate.TURNS.waited


def _capped() -> int:
    return turn_gate.TURNS.capped


@pytest.fixture(scope="module")
def wordllama() -> SemanticRecallParams:
    options = SemanticRecallParams(model="wordllama")
    load_semantic_model(options)
    return options


@pytest.fixture
def pieces(monkeypatch):
    """One message a piece, chunks of CHUNK (so the index is still embedding at the turn)."""
    monkeypatch.setattr(semantic, "EMBED_CHUNK", CHUNK)
    monkeypatch.setattr(turn_gate, "PIECE_MOST", 1)
    monkeypatch.setattr(turn_gate, "PIECE_FIRST", 1)


async def _call(server, target: str, wordllama, frames_for) -> tuple:
    """One call of ``al``, whose earlier call of ``LINES`` is indexed from the call's start;
    ``frames_for(index, held, embedder)`` gives the frames. Returns the recall step, the held
    search and the embedder."""
    store = open_store(target)
    await store.write(ended_call(LINES))
    held = _Held(store)
    embedder = _Pieces(embedder_for(wordllama), held)
    context = LLMContext(messages=[{"role": "system", "content": "You are a family assistant."}])
    summarizer = OpenAISummarizer(base_url=server.base_url, model="cheap")
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=40, keep=4),
        summarizer=summarizer,
        store=store,
        call_id="c2",
        user_id="al",
        memory=MemoryParams(writer=FAST),
        # a budget the held search stays within: the turn is on its way until released
        recall=RecallParams(
            latency_budget_s=10.0,
            semantic=SemanticRecallParams(embedder=embedder, model="wordllama"),
        ),
    )
    pair = LLMContextAggregatorPair(context)
    step = processor.recall_step
    assert step is not None
    frames = frames_for(step.semantic, held, embedder)
    try:
        pipeline = Pipeline([pair.user(), processor, main_llm(server.base_url), pair.assistant()])
        await run_settling(pipeline, frames_to_send=frames)
    finally:
        held.release.set()
        held.entered.set()  # a piece waiting for a turn that never came goes on
        await summarizer.aclose()
        await step.close()
        await store.close()
    return step, held, embedder


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_no_piece_starts_while_a_turn_is_on_its_way(
    openai_server, store_target, wordllama, pieces, monkeypatch
):
    openai_server.handler = lambda body: Reply("Sure.")
    monkeypatch.setattr(turn_gate, "HOLD_FLOOR_S", 60.0)  # no cap here
    seen: dict[str, int] = {}

    def frames_for(index, held, embedder):
        def arm() -> bool:
            # the first chunk is in (the turn's ranking waits for no first piece): the next
            # turn's search is held
            held.armed = index.size >= CHUNK
            return held.armed

        def indexing_met_the_turn() -> bool:
            # the thread reached a piece with the turn on its way: it started it (before
            # the fix) or waits for the turn; then the search is let go
            if held.holding and (embedder.during_turn() or _waited() > seen["waited"]):
                seen["size"] = index.size
                held.release.set()
                return True
            return False

        def armed() -> bool:
            seen["waited"] = _waited()
            return arm()

        return [
            Until(sleep=5.0, done=armed),
            user_turn(ASK),
            Until(sleep=5.0, done=indexing_met_the_turn),
            Gap(sleep=1.0),
            # turns stopped: the index finishes
            Until(sleep=5.0, done=lambda: index.size == len(LINES)),
        ]

    step, held, embedder = await _call(openai_server, store_target, wordllama, frames_for)
    assert held.release.is_set() and "size" in seen  # the turn was held, the index met it
    assert step.turns == 1
    # no piece started while the turn was on its way (before the fix: the pieces went on)
    assert embedder.during_turn() == 0
    assert seen["size"] < len(LINES)  # the index was still embedding when the turn came
    # the index finished once the turn was over
    assert step.semantic.size == len(LINES)
    assert len(embedder.pieces) == len(LINES)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_a_turn_always_on_its_way_still_lets_the_index_grow(
    openai_server, store_target, wordllama, pieces, monkeypatch
):
    openai_server.handler = lambda body: Reply("Sure.")
    # the cap, short here (a piece sleeps 20 ms, takes no CPU: the floor is the cap)
    monkeypatch.setattr(turn_gate, "HOLD_FLOOR_S", 0.005)
    seen: dict[str, int] = {}

    def frames_for(index, held, embedder):
        def armed() -> bool:
            held.armed = index.size >= CHUNK
            return held.armed

        def indexed_while_held() -> bool:
            # the turn never ends until the whole archive is embedded
            if held.holding and index.size == len(LINES):
                seen["held_to_the_end"] = 1
                held.release.set()
                return True
            return False

        return [
            Until(sleep=5.0, done=armed),
            user_turn(ASK),
            Until(sleep=10.0, done=indexed_while_held),
            Gap(sleep=1.0),
        ]

    step, held, embedder = await _call(openai_server, store_target, wordllama, frames_for)
    # the index grew to its end with a turn on its way the whole time (the cap)
    assert "held_to_the_end" in seen
    assert step.semantic.size == len(LINES)
    during = embedder.during_turn()
    assert during > 0
    # each piece the turn met waited its cap first (before the fix: none waited); the first
    # may have passed its wait just before the turn began
    assert during >= 2
    caps = embedder.caps
    assert all(later > earlier for earlier, later in zip(caps, caps[1:], strict=False))

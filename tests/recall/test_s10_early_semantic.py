"""The early block with semantic recall on: ``RecallPrefetch``'s early search fused with the
ranking by meaning of the turn's query (as the turn fuses them), the follow-ups derived from
the fused hits, the snippets chosen and the block rendered before the turn ends; the turn
reuses it only when its own inputs, the fused hits and their similarities included, are the
same. Reused when equal (the same block as the turn makes without the early work); chosen
again when the final words differ, or when the index changed meanwhile (a message embedded
between the early work and the turn); a forget mid-call never places it; a call's second
recalling turn takes its own.

Real pipelines (a real ``LLMContextAggregatorPair`` fed transcriptions, ``ContextSummarizer``
with a real store, SQLite and PostgreSQL, Pipecat's OpenAI service against the local
OpenAI-protocol server), the real WordLlama vectors (offline, the ``semantic`` extra)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from pipecat.frames.frames import (
    DataFrame,
    Frame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from pipecat_summarizer import ContextSummarizer, RecallPrefetch
from pipecat_summarizer._recall.compose import EarlyBlock
from pipecat_summarizer._recall.embedding import load_semantic_model
from pipecat_summarizer._recall.prefetch import PrefetchingArchive
from pipecat_summarizer.params import RecallParams, SemanticRecallParams
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord
from tests.recall.test_attacks_dates import archived, utc
from tests.support.early_search import (
    SISTER_ASK,
    Forget,
    Forgetter,
    WatchedSQLite,
    prefetch_pipeline,
    recall_blocks,
    seed_sister,
    spoken_turn,
    watched_store,
)
from tests.support.openai_server import Reply
from tests.support.recall_calls import travel_desk
from tests.support.settle import Gap, run_settling

CAR_ASK = "Which car did I rent at the airport?"
PET_ASK = "What kind of animal is my pet?"  # no word of the pet lines: found by meaning
PETS = ["We adopted a grey cat called Tom last spring.", "Lovely, Tom the cat."]
REX = "Our dog Rex is a golden retriever, and he travels with us."


@pytest.fixture(scope="module")
def semantic() -> SemanticRecallParams:
    options = SemanticRecallParams(model="wordllama")
    load_semantic_model(options)
    return options


def _recall(semantic: SemanticRecallParams) -> RecallParams:
    # a loaded machine: the latency budget never binds here
    return RecallParams(latency_budget_s=2.0, semantic=semantic)


@pytest.fixture
def kept(monkeypatch) -> list[EarlyBlock]:
    """The early blocks the companion kept for a turn (in order)."""
    blocks: list[EarlyBlock] = []
    real = PrefetchingArchive.keep_block

    def keep(self, block: EarlyBlock) -> None:
        blocks.append(block)
        real(self, block)

    monkeypatch.setattr(PrefetchingArchive, "keep_block", keep)
    return blocks


async def _seed(store) -> None:
    """Alice's earlier calls: her sister's plans and the rental (``seed_sister``), her cat."""
    await seed_sister(store)
    await store.write(archived(PETS, call_id="a6", at=utc(2026, 4, 28), user_id="alice"))


class _Passing(FrameProcessor):
    """In the companion's place, without it: every frame passed on."""

    @property
    def settled(self) -> bool:
        """Always: it holds nothing (no timer, no task), so a settled pause need not last its
        full length for it (``tests.support.settle``)."""
        return True

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)


async def _call(server, store, frames, semantic, *, early=True, extra=()):
    """Alice's call: ``frames`` (after a pause in which her earlier calls are indexed);
    returns its recall step and the blocks the LLM received."""
    server.handler = lambda body: Reply("Sure.")
    before = len(server.chat_requests)
    context, processor, summarizer = travel_desk(
        server, store, _recall(semantic), call_id="now-alice"
    )
    companion = RecallPrefetch(processor) if early else _Passing()
    more = [f if isinstance(f, FrameProcessor) else f(processor) for f in extra]
    try:
        await run_settling(
            prefetch_pipeline(server, context, processor, companion, *more),
            frames_to_send=[Gap(sleep=1.0), *frames],
        )
    finally:
        await summarizer.aclose()
    step = processor.recall_step
    assert step is not None and step.semantic is not None
    return step, recall_blocks(server.chat_requests[before:])


@pytest.mark.parametrize("ask", [PET_ASK, SISTER_ASK])
async def test_the_early_block_with_meaning_is_the_turns_own(
    openai_server, store_target, tmp_path, semantic, kept, ask
):
    # the early search fused with the ranking by meaning, its follow-ups (SISTER_ASK
    # gathers), chosen and rendered while the caller spoke: the turn only compares; the
    # same block as the turn makes at its end without the early work
    results = []
    for early in (True, False):  # each on its own archive: a call archives its turn
        target = store_target if early else str(tmp_path / "plain.db")
        store = watched_store(target)
        try:
            await _seed(store)
            results.append(
                await _call(openai_server, store, spoken_turn(ask), semantic, early=early)
            )
        finally:
            await store.close()
    (step, blocks), (plain_step, plain) = results
    assert (step.early_blocks, step.early_choices) == (1, 0)
    assert (plain_step.early_blocks, plain_step.early_choices) == (0, 0)
    assert step.semantic_late == plain_step.semantic_late == 0  # both ranked by meaning
    assert len(kept) == 1 and len(blocks) == 1 and blocks == plain
    if ask == PET_ASK:  # found by meaning only: the early block holds the hits by meaning
        assert "grey cat" in blocks[0]
    else:
        assert "lives in Porto" in blocks[0] and "flying in on Friday" in blocks[0]


async def test_other_final_words_are_chosen_for_at_turn_time(
    openai_server, tmp_path, semantic, kept
):
    # the interim words' early block (the rental) is made; the final words ask about the
    # sister and their early search is still running at the turn's end: the turn chooses
    # for its own words, never the interim's block
    class Slow(WatchedSQLite):
        async def search(self, query, **kwargs):
            if "sister" in query:
                await asyncio.sleep(0.3)
            return await super().search(query, **kwargs)

    store = Slow(tmp_path / "m.db")
    try:
        await _seed(store)
        # a short pause after the final words: their slow search still runs at the turn's end
        frames = spoken_turn(SISTER_ASK, interim=CAR_ASK, early_s=0.1)
        step, blocks = await _call(openai_server, store, frames, semantic)
    finally:
        await store.close()
    assert kept and "red Fiat" in str(kept[0].text)  # the interim words' block was made
    assert (step.early_blocks, step.early_choices) == (0, 0)
    (block,) = blocks
    assert "lives in Porto" in block and "red Fiat" not in block


async def test_every_recalling_turn_takes_its_early_block(openai_server, tmp_path, semantic, kept):
    # two questions in one call, each recalled: the second turn's context holds the first
    # turn's answer but not its recalled block (the turn takes it out before its recall),
    # and its early work judges that same context (S10-L-1)
    store = watched_store(str(tmp_path / "m.db"))
    try:
        await _seed(store)
        frames = [*spoken_turn(PET_ASK), *spoken_turn(CAR_ASK)]
        step, blocks = await _call(openai_server, store, frames, semantic)
    finally:
        await store.close()
    assert len(kept) == 2 and len(blocks) == 2
    assert "grey cat" in blocks[0] and "red Fiat" in blocks[1]
    assert (step.early_blocks, step.early_choices) == (2, 0)


class _Embed(DataFrame):
    """Asks :class:`_Indexer` to archive :data:`REX` and index it, in the frame stream."""


class _Indexer(FrameProcessor):
    """Alice says :data:`REX` in her other call, still running (another device), and the
    index embeds it at once: between the early work and the turn, the index changed."""

    def __init__(self, processor: ContextSummarizer, store):
        super().__init__()
        self._processor = processor
        self._store = store
        self._busy = 0

    @property
    def settled(self) -> bool:
        return not self._busy

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if not isinstance(frame, _Embed):
            await self.push_frame(frame, direction)
            return
        self._busy += 1
        try:
            message = {"role": "user", "content": REX}
            await self._store.write(
                [
                    ArchivedMessage(
                        "a7",
                        2,
                        "user",
                        REX,
                        json.dumps(message),
                        turn=1,
                        at=time.time(),
                        user_id="alice",
                    )
                ]
            )
            step = self._processor.recall_step
            assert step is not None and step.semantic is not None
            await step.semantic.refresh(self._store)
        finally:
            self._busy -= 1


async def test_an_index_changed_after_the_early_work_is_chosen_for_again(
    openai_server, tmp_path, semantic, kept
):
    # the same words, the same lexical hits: only the ranking by meaning differs (a message
    # embedded meanwhile); the turn's fused hits are not the early ones: it chooses again,
    # and its block holds the message found by meaning at the turn
    store = watched_store(str(tmp_path / "m.db"))
    try:
        await _seed(store)
        now = time.time()
        await store.write(
            [
                CallRecord("a7", user_id="alice", started_at=now - 60),  # still running
                *[
                    ArchivedMessage(
                        "a7",
                        i,
                        role,
                        text,
                        json.dumps({"role": role, "content": text}),
                        turn=0,
                        at=now - 60 + i,
                        user_id="alice",
                    )
                    for i, (role, text) in enumerate(
                        [("user", "Is breakfast included?"), ("assistant", "Yes, until ten.")]
                    )
                ],
            ]
        )
        frames = spoken_turn(PET_ASK, between=[_Embed()])
        extra = [lambda processor: _Indexer(processor, store)]
        step, blocks = await _call(openai_server, store, frames, semantic, extra=extra)
    finally:
        await store.close()
    assert len(kept) == 1 and "golden retriever" not in str(kept[0].text)
    assert (step.early_blocks, step.early_choices) == (0, 0)
    (block,) = blocks
    assert "golden retriever" in block


async def test_a_forget_mid_call_never_places_the_early_block(
    openai_server, store_target, semantic, kept
):
    store = watched_store(store_target)
    try:
        await _seed(store)
        frames = spoken_turn(CAR_ASK, between=[Forget("alice")])
        forgetter = Forgetter(store)
        step, blocks = await _call(openai_server, store, frames, semantic, extra=[forgetter])
    finally:
        await store.close()
    assert kept and "red Fiat" in str(kept[0].text)  # made before the forget
    assert forgetter.forgotten and forgetter.forgotten[0] > 0
    assert step.early_blocks == step.early_choices == 0
    assert blocks == []
    assert step.semantic.forgets >= 1  # the index dropped the forgotten caller's rows

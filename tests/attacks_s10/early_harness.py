"""The set-up of the session-10 attacks on the early block (``RecallPrefetch``'s work after
the early search, reused by the turn only when its inputs are equal): one call of alice's on
a seeded SQLite archive, with the companion (``early=True``) or a pass-through in its place
(``early=False``: the block the turn makes itself), an :class:`Actor` that runs the test's
:class:`Act` frames in the stream's order (between the early work and the turn's end), and
the checks every placed block must pass (one per request, user role, within the ceiling)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipecat.frames.frames import Frame, SystemFrame
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from pipecat_summarizer import ContextSummarizer, RecallPrefetch
from pipecat_summarizer._recall.compose import EarlyBlock
from pipecat_summarizer._recall.render import RECALL_HEADER, is_recall_message
from pipecat_summarizer._text.tokens import estimate_text_tokens
from pipecat_summarizer.params import RecallParams
from tests.support.early_search import RECALL, desk, prefetch_pipeline, seed_sister, watched_store
from tests.support.openai_server import Reply, is_summary_request
from tests.support.settle import run_settling

CAR_ASK = "Which car did I rent at the airport?"
CAR_FACT = "Noted: the caller rented a red Fiat from Avis at the airport."


class Act(SystemFrame):
    """Runs ``fn(processor)`` (sync or async) when it reaches the :class:`Actor`. A system
    frame: the turn's end (``UserStoppedSpeakingFrame``, a system frame too) waits behind it
    at the actor, so what it does is done before the turn ends, however long it takes (a data
    frame would be overtaken)."""

    def __init__(self, fn: Callable[[ContextSummarizer], Any]):
        super().__init__()
        self.fn = fn


async def _early_kept(processor: ContextSummarizer) -> None:
    """Wait (at most 3 s) until the companion's early block is kept, if there is a companion
    (a loaded machine may not have finished the early work by the end of the pause)."""
    step = processor.recall_step
    archive = getattr(step, "early_searches", None) if step is not None else None
    if archive is None:
        return
    for _ in range(300):
        if getattr(archive, "_block", None) is not None:
            return
        await asyncio.sleep(0.01)


def early_kept() -> Act:
    """An act that waits for the early block (see :func:`_early_kept`): put before a change,
    so the change lands after the early work, never before it."""
    return Act(_early_kept)


class Actor(FrameProcessor):
    """Runs each :class:`Act` (the application, an admin tool, mid-turn); passes the rest."""

    def __init__(self, processor: ContextSummarizer):
        super().__init__()
        self._processor = processor
        self._acting = 0

    @property
    def settled(self) -> bool:
        """No act under way (a settled pause waits for it)."""
        return not self._acting

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, Act):
            self._acting += 1
            try:
                done = frame.fn(self._processor)
                if inspect.isawaitable(done):
                    await done
            finally:
                self._acting -= 1
            return
        await self.push_frame(frame, direction)


class _Passing(FrameProcessor):
    """In the companion's place, without it."""

    @property
    def settled(self) -> bool:
        """Always: it passes frames on and holds nothing (no timer, no task), so a settled
        pause need not last its full length for it (``tests.support.settle``): the call
        without the companion took the full pauses, ~2 s of idle time per call."""
        return True

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)


@dataclass
class Outcome:
    """What one call did: its step's counters, the blocks the LLM received (per request,
    ``None`` where none), the early blocks kept, the requests."""

    step: Any
    blocks: list[str | None]
    kept: list[EarlyBlock] = field(default_factory=list)
    requests: list[dict] = field(default_factory=list)

    @property
    def reused(self) -> tuple[int, int]:
        """(early_blocks, early_choices) of the step."""
        return self.step.early_blocks, self.step.early_choices


def check_requests(requests: list[dict], params: RecallParams = RECALL) -> list[str | None]:
    """Each request's recalled block (``None``: none), checked: at most one per request,
    a user message, never in a system/developer message, within ``max_tokens``."""
    blocks: list[str | None] = []
    for body in requests:
        found = [m for m in body["messages"] if is_recall_message(m)]
        assert len(found) <= 1, "a block placed twice"
        for m in body["messages"]:
            if m.get("role") in ("system", "developer"):
                assert RECALL_HEADER not in str(m.get("content")), "a block in instructions"
        if found:
            text = str(found[0]["content"])
            assert estimate_text_tokens(text) <= params.max_tokens, "over the ceiling"
            blocks.append(text)
        else:
            blocks.append(None)
    return blocks


async def one_call(
    server: Any,
    path: str,
    frames: list,
    *,
    early: bool = True,
    seed: Callable[[Any], Any] = seed_sister,
    setup: Callable[[ContextSummarizer], Any] | None = None,
    summary: str = "FACTS:\n- the caller asked about a trip",
    recall: RecallParams = RECALL,
) -> Outcome:
    """Alice's call on a new archive at ``path`` (seeded by ``seed``): ``frames`` through the
    companion (or a pass-through), an :class:`Actor`, the user aggregator, the processor
    (``setup(processor)`` before it starts), the main LLM ("Sure."; ``summary`` for a
    summary request); pauses settled."""
    store = watched_store(path)
    before = len(server.chat_requests)

    def answer(body: dict) -> Reply:
        return Reply(summary if is_summary_request(body) else "Sure.")

    server.handler = answer
    kept: list[EarlyBlock] = []
    try:
        await seed(store)
        context, summarizer, processor = desk(server, store, user_id="alice", recall=recall)
        if setup is not None:
            setup(processor)
        companion: FrameProcessor
        if early:
            prefetch = RecallPrefetch(processor)
            archive = prefetch.archive
            assert archive is not None
            keep = archive.keep_block
            archive.keep_block = lambda b: (kept.append(b), keep(b))[1]  # type: ignore[method-assign]
            companion = prefetch
        else:
            companion = _Passing()
        try:
            await run_settling(
                prefetch_pipeline(server, context, processor, companion, Actor(processor)),
                frames_to_send=frames,
            )
        finally:
            await summarizer.aclose()
    finally:
        await store.close()
    requests = [
        b for b in server.chat_requests[before:] if not is_summary_request(b) and b.get("stream")
    ]
    return Outcome(processor.recall_step, check_requests(requests, recall), kept, requests)

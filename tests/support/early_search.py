"""A caller's spoken turn with recall's early search (``RecallPrefetch``), for the attack
tests on it: a store that records its searches, the STT's frames for a turn (the words,
then the turn's end), a forget run mid-call by an admin tool in the frame stream (through
the call's store or another store object), and the pipeline and call around them: a real
``LLMContextAggregatorPair`` fed transcriptions, ``ContextSummarizer`` with a store and
recall, Pipecat's OpenAI service against the local OpenAI-protocol server."""

from __future__ import annotations

import asyncio
from typing import Any

from pipecat.frames.frames import (
    DataFrame,
    Frame,
    InterimTranscriptionFrame,
    TranscriptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.turns.user_turn_strategies import ExternalUserTurnStrategies

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer, RecallPrefetch
from pipecat_summarizer._recall.render import is_recall_message
from pipecat_summarizer.params import MemoryParams, RecallParams
from pipecat_summarizer.store import PostgresMemoryStore, SQLiteMemoryStore
from tests.recall.test_attacks_dates import archived, utc
from tests.support.openai_server import Reply
from tests.support.pipeline_utils import cfg, main_llm
from tests.support.recall_calls import FAST
from tests.support.settle import Gap, run_settling

#: A loaded machine: the latency budget never binds in these tests.
RECALL = RecallParams(latency_budget_s=0.3)

HOTEL = ["We are staying at the Hotel Marquis in Lisbon, room 418.", "Noted, the Marquis."]
CAR = ["I rented a red Fiat from Avis at the airport.", "Noted, a red Fiat."]
BOB_HOTEL = ["My hotel is the Pensao Flor in Porto, room 12.", "Noted, Pensao Flor."]

#: Alice's question about her sister's plans, and the calls that answer it.
SISTER_ASK = "What are all the plans with my sister?"
SISTER = ["My sister Marta lives in Porto and we plan a visit.", "Lovely, Porto in spring."]
# shares no word with the question: only the second search on "marta porto" finds it
WEDDING = ["Marta is flying in on Friday for the wedding.", "Noted, Friday."]
FIX = ["Make that Saturday, not Friday: the flight moved.", "Noted, Saturday."]


async def seed_trips(store: Any) -> None:
    """Alice's earlier call (:data:`HOTEL`, :data:`CAR`) and bob's (:data:`BOB_HOTEL`)."""
    await store.write(archived([*HOTEL, *CAR], call_id="a1", at=utc(2026, 5, 1), user_id="alice"))
    await store.write(archived(BOB_HOTEL, call_id="b1", at=utc(2026, 5, 2), user_id="bob"))


async def seed_sister(store: Any) -> None:
    """Alice's four earlier calls: her sister (:data:`SISTER`), the wedding, its fix, a car."""
    await store.write(archived(SISTER, call_id="a1", at=utc(2026, 4, 1), user_id="alice"))
    await store.write(archived(WEDDING, call_id="a2", at=utc(2026, 4, 20), user_id="alice"))
    await store.write(archived(FIX, call_id="a3", at=utc(2026, 4, 22), user_id="alice"))
    await store.write(archived(CAR, call_id="a4", at=utc(2026, 4, 25), user_id="alice"))


class Watched:
    """A real store that records each search (its words, and how it ended); ``held`` makes
    each search wait for ``release`` (set, it never waits again), ``delay_s`` slows it,
    ``fail`` makes it fail."""

    delay_s = 0.0
    fail = False
    held = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.searches: list[tuple[str, str | None]] = []  # (words, user)
        self.ended: list[str] = []  # "done", "failed" or "cancelled"
        self.release = asyncio.Event()

    async def search(self, query, **kwargs):
        self.searches.append((query, kwargs.get("user_id")))
        try:
            if self.held:
                await self.release.wait()
            await asyncio.sleep(self.delay_s)
            if self.fail:
                raise RuntimeError("the archive is down")
            found = await super().search(query, **kwargs)
        except asyncio.CancelledError:
            self.ended.append("cancelled")
            raise
        except Exception:
            self.ended.append("failed")
            raise
        self.ended.append("done")
        return found


class WatchedSQLite(Watched, SQLiteMemoryStore):
    """:class:`Watched` on SQLite."""


class WatchedPostgres(Watched, PostgresMemoryStore):
    """:class:`Watched` on PostgreSQL."""


def watched_store(target: str) -> Watched:
    """A :class:`Watched` store at ``target`` (a DSN or a SQLite file path)."""
    return WatchedPostgres(target) if "://" in target else WatchedSQLite(target)


class Forget(DataFrame):
    """Asks :class:`Forgetter` to forget a caller, in the frame stream's order."""

    def __init__(self, user_id: str):
        super().__init__()
        self.user_id = user_id


class Forgetter(FrameProcessor):
    """Runs ``store.forget`` when a :class:`Forget` passes (an admin tool, mid-call)."""

    def __init__(self, store):
        super().__init__()
        self._store = store
        self._forgetting = 0
        self.forgotten: list[int] = []

    @property
    def settled(self) -> bool:
        """No forget under way (a settled pause waits for it: ``tests.support.settle``)."""
        return not self._forgetting

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, Forget):
            self._forgetting += 1
            try:
                self.forgotten.append(await self._store.forget(frame.user_id))
            finally:
                self._forgetting -= 1
            return
        await self.push_frame(frame, direction)


def speech(*finals: str, interim: str | None = None, user: str = "alice") -> list:
    """An STT's frames for one turn, before the turn ends (its pauses: :class:`Gap`, full
    length under ``run_test``)."""
    frames: list = [UserStartedSpeakingFrame()]
    if interim is not None:
        frames += [InterimTranscriptionFrame(interim, user, "t0"), Gap(sleep=0.1)]
    for text in finals:
        frames += [TranscriptionFrame(text, user, "t0"), Gap(sleep=0.1)]
    return frames


def end_turn() -> list:
    """The turn's end, with time for the early search before it and the answer after it."""
    return [Gap(sleep=0.3), UserStoppedSpeakingFrame(), Gap(sleep=0.6)]


def spoken_turn(
    final: str,
    *,
    interim: str | None = None,
    between: list | None = None,
    early_s: float = 2.0,
) -> list:
    """One spoken turn of alice, quicker than :func:`speech` + :func:`end_turn`: interim
    words, the final ones, a pause (the early work ends), then ``between`` (a forget) and
    the turn's end.

    The pauses after the interim and the final words are settled ones: they end once the
    early work is done, at most after 2 s (a 0.1 s cap ran out under load before the early
    follow-ups had started). ``early_s`` caps the pause after the final words: short for a
    test whose final words' early work must still be running at the turn's end."""
    frames: list = [UserStartedSpeakingFrame()]
    if interim is not None:
        frames += [InterimTranscriptionFrame(interim, "alice", "t0"), Gap(sleep=2.0)]
    frames += [TranscriptionFrame(final, "alice", "t0"), Gap(sleep=early_s)]
    if between:  # a system frame overtakes queued data frames: the forget lands first
        frames += [*between, Gap(sleep=0.08)]
    return [*frames, UserStoppedSpeakingFrame(), Gap(sleep=0.15)]


def desk(
    server: Any, store: Any, *, user_id: str, recall: RecallParams | None
) -> tuple[LLMContext, OpenAISummarizer, ContextSummarizer]:
    """A travel desk's call of ``user_id`` on ``store``: its context, its summarizer (the
    caller closes it) and its ``ContextSummarizer`` with ``recall`` (no summary before 40
    messages)."""
    system = f"You are a travel desk; the caller is {user_id}."
    context = LLMContext(messages=[{"role": "system", "content": system}])
    summarizer = OpenAISummarizer(base_url=server.base_url, model="cheap")
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=40, keep=4),
        summarizer=summarizer,
        store=store,
        call_id=f"now-{user_id}",
        user_id=user_id,
        memory=MemoryParams(writer=FAST),
        recall=recall,
    )
    return context, summarizer, processor


def prefetch_pipeline(
    server: Any, context: LLMContext, processor: ContextSummarizer, companion: Any, *extra: Any
) -> Pipeline:
    """companion -> ``extra`` -> user aggregator (turns ended by the STT's frames) ->
    ``processor`` -> main LLM -> assistant aggregator."""
    pair = LLMContextAggregatorPair(
        context,
        user_params=LLMUserAggregatorParams(user_turn_strategies=ExternalUserTurnStrategies()),
    )
    return Pipeline(
        [companion, *extra, pair.user(), processor, main_llm(server.base_url), pair.assistant()]
    )


async def early_call(
    server: Any, store: Any, frames: list, *, recall: RecallParams = RECALL, admin: Any = None
) -> tuple[RecallPrefetch, Forgetter | None]:
    """Alice's call on ``store`` with ``RecallPrefetch``: ``frames`` through
    :func:`prefetch_pipeline` (with a :class:`Forgetter` on ``admin`` if given); the main
    LLM answers "Sure."; each pause ends once settled (``tests.support.settle``)."""
    server.handler = lambda body: Reply("Sure.")
    context, summarizer, processor = desk(server, store, user_id="alice", recall=recall)
    companion = RecallPrefetch(processor)
    forgetter = Forgetter(admin) if admin is not None else None
    extra = [forgetter] if forgetter is not None else []
    try:
        await run_settling(
            prefetch_pipeline(server, context, processor, companion, *extra),
            frames_to_send=frames,
        )
    finally:
        await summarizer.aclose()
    return companion, forgetter


def recall_blocks(requests: list[dict]) -> list[str]:
    """The recalled blocks' texts in ``requests`` (the main LLM's request bodies)."""
    return [str(m["content"]) for b in requests for m in b["messages"] if is_recall_message(m)]


def searches_running() -> list[str]:
    """The search tasks (the store's, recall's) still running on this loop."""
    me = asyncio.current_task()
    names = [
        getattr(t.get_coro(), "__qualname__", "")
        for t in asyncio.all_tasks()
        if t is not me and not t.done()
    ]
    return [n for n in names if "search" in n.lower()]

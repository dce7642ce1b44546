"""The calls of the question-time measurement (``pipecat-summarizer questions``, whose
command is :mod:`~pipecat_summarizer_cli.replay.questions`): answer recall on the request the
main LLM receives for each question, asked as the caller's next turn.

The two measurements (question time, across calls) are described in the command's module;
this one runs their calls, each through a real Pipecat pipeline.

The calls that ask the questions read the measured store and write nothing to it
(:class:`~pipecat_summarizer_cli.replay.question_store.QuestionStore`): no question, of any
strategy, reaches a later question's recall.

Strategies: ``full_buffer``, ``pipecat_builtin``, ``ours`` (``ContextSummarizer`` without
recall), ``ours_recall`` (lexical recall; with ``--semantic``, semantic recall fused with it:
the ``semantic`` extra). Answer recall is the share of an answer's content words found in
the request (:func:`~pipecat_summarizer_cli.replay.locomo.answer_recall`), by LoCoMo category and
overall (item-weighted); ``input`` is the questions' requests' tokens against the full
buffer's. The scoring (shares, per-strategy scores, the table) is in
:mod:`~pipecat_summarizer_cli.replay.question_scores`, what the recalled block holds (LoCoMo's
evidence turns) in :mod:`~pipecat_summarizer_cli.replay.question_relevance`; this module runs
the calls.
"""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import (
    ContextSummarizer,
    ContextSummarizerParams,
    MemoryParams,
    RecallObserver,
    RecallOutcome,
    RecallParams,
    RecallPrefetch,
    WriterParams,
)
from pipecat_summarizer.store import MemoryStore
from pipecat_summarizer_cli.replay.backends import (
    Backend,
    Meter,
    MeteredSummarizer,
    extractive_backend,
)
from pipecat_summarizer_cli.replay.call_driver import CallDriver, Speech, snapshot
from pipecat_summarizer_cli.replay.locomo import (
    LocomoConversation,
    QAItem,
    content_words,
    session_time,
)
from pipecat_summarizer_cli.replay.question_relevance import (
    evidence_ids,
    evidence_lines,
    evidence_present,
    evidence_snippets,
)
from pipecat_summarizer_cli.replay.question_rows import question_row, read_request
from pipecat_summarizer_cli.replay.question_scores import STRATEGIES, Scores
from pipecat_summarizer_cli.replay.question_store import QuestionStore
from pipecat_summarizer_cli.replay.recorder import Recorder
from pipecat_summarizer_cli.replay.report import TokenTable
from pipecat_summarizer_cli.replay.strategies import PipecatBuiltin, Setup, Thresholds
from pipecat_summarizer_cli.replay.transcript import Turn, context_messages

GREETING = "Hello, it's me again."
_SESSION = re.compile(r"^\[Session (\d+)\b")
_FAST_WRITER = WriterParams(flush_interval_s=0.05)

#: Across calls: the time between the greeting and the first question (a real greeting
#: exchange takes seconds).
GREETING_PAUSE_S = 1.0

#: Across calls: the time between a call's start and the caller's first words. The
#: caller's memory loads in the background and joins at the first frame after it arrives;
#: without the pause it raced the first turn, so from run to run it joined that turn or a
#: later one (a session's summary then did or did not fold the earlier calls in), or missed
#: the state the questions start from: on a loaded machine "ours" across calls read
#: 34.8-50.4% on one conversation from run to run.
CONNECT_PAUSE_S = 0.5

#: Before each question a recalling strategy is asked, the caller hears the last answer: a
#: real call leaves seconds between turns. Asked back to back, a question's search queued
#: behind the previous one's and its turn's writes on the store's one thread, and at the real
#: 10 ms budget whole runs went without recall (LoCoMo 26: 101 of 152 searches late at
#: question time without a pause, 6 with 0.2 s).
ANSWER_PAUSE_S = 0.2


@dataclass
class Plan:
    """What the measurement runs with.

    Parameters:
        thresholds: The summarizers' thresholds (Pipecat's defaults).
        backend: The summarizer backend (offline extractive by default).
        options: ``ContextSummarizerParams`` for ours.
        recall: ``RecallParams`` for ``ours_recall``.
        store_factory: A new, empty store for one conversation (SQLite in memory by
            default); the measurement closes it.
        tag: Prefix of the caller ids (keeps runs apart in a shared database).
        compact_at_end: Across calls, end each call with a manual compaction of the whole
            conversation (``LLMSummarizeContextFrame``, ``min_messages_after_summary=0``):
            every message is then summarized (without it, the messages still in the
            context at hang-up are archived as ``in_context_at_end``, unsummarized).
        pause_s: The pause before each question a recalling strategy is asked (the
            command's default is :data:`ANSWER_PAUSE_S`).
        speech: A recalling strategy's questions are spoken (transcriptions, then the
            turn's end: see :class:`~pipecat_summarizer_cli.replay.call_driver.Speech`)
            through a pipeline with ``RecallPrefetch`` before its user aggregator, so
            recall's search starts on the caller's words; ``None`` (the library's callers'
            default): appended as a message, the search starts when the turn ends.
    """

    thresholds: Thresholds = field(default_factory=Thresholds)
    backend: Backend = field(default_factory=extractive_backend)
    options: ContextSummarizerParams = field(default_factory=ContextSummarizerParams)
    recall: RecallParams = field(default_factory=RecallParams)
    store_factory: Callable[[], MemoryStore] | None = None
    tag: str = ""
    compact_at_end: bool = False
    pause_s: float = 0.0
    speech: Speech | None = None

    def store(self) -> MemoryStore:
        if self.store_factory is not None:
            return self.store_factory()
        from pipecat_summarizer.store import SQLiteMemoryStore

        return SQLiteMemoryStore()


def _ours(
    plan: Plan,
    context: LLMContext,
    recorder: Recorder,
    table_: TokenTable,
    *,
    store: MemoryStore | None = None,
    call_id: str | None = None,
    user_id: str | None = None,
    resume: bool = False,
    recall: RecallParams | None = None,
    summarize: bool = True,
    started_at: float | None = None,
) -> ContextSummarizer:
    options = plan.options
    if not summarize:
        options = replace(options, trigger=replace(options.trigger, auto=False))
    return ContextSummarizer(
        context=context,
        config=plan.thresholds.config(),
        summarizer=MeteredSummarizer(
            plan.backend.make_summarizer(), Meter(recorder, table_, count_failures=False)
        ),
        params=options,
        store=store,
        call_id=call_id if store is not None else None,
        user_id=user_id if store is not None else None,
        memory=(
            MemoryParams(resume=resume, writer=_FAST_WRITER, conversation_started_at=started_at)
            if store is not None
            else None
        ),
        recall=recall,
    )


def _asking(plan: Plan, context: LLMContext, q: ContextSummarizer) -> CallDriver:
    """The pipeline that asks ``q``'s questions: with recall and ``plan.speech``, spoken,
    ``RecallPrefetch`` before the user aggregator."""
    if plan.speech is None or q.recall_step is None:
        return CallDriver(context, [], [q])
    return CallDriver(context, [], [q], head=[RecallPrefetch(q)], speech=plan.speech)


def _early(asking: CallDriver) -> int:
    """Searches of ``asking``'s questions answered by one started on the caller's words."""
    return sum(
        p.archive.served
        for p in asking.head
        if isinstance(p, RecallPrefetch) and p.archive is not None
    )


class _TurnOutcomes(RecallObserver):
    """The turn outcomes a recall step told while one question was asked (its rows say how
    each question's recall ended: found nothing, or found hits and placed nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.told: list[RecallOutcome] = []

    def on_recall(self, outcome: RecallOutcome) -> None:
        if outcome.kind == "turn":  # a recall_memory lookup is the model's, not the turn's
            self.told.append(outcome)

    def take(self) -> RecallOutcome | None:
        """The last turn outcome told since the previous ``take`` (one question is one
        turn), forgetting the others."""
        last = self.told[-1] if self.told else None
        self.told.clear()
        return last


async def _ask_all(
    call: CallDriver,
    state: list,
    qa: Sequence[QAItem],
    table_: TokenTable,
    scores: Scores,
    lines: Mapping[str, str],
    *,
    recall: bool = False,
    pause_s: float = 0.0,
    step: Any = None,
) -> None:
    """Ask each question on a copy of ``state``; score its request (``recall``: the
    strategy recalls, so its block's tokens and snippets are counted, 0 without a block;
    ``pause_s`` before each question; ``step``: the recall step, whose counters say whether
    a question's search was late, and whose observers are told how its recall ended) and
    keep its row."""
    outcomes = _TurnOutcomes()
    if step is not None:
        # once: every batch of questions is asked in a call (and by a step) of its own
        step.add_observer(outcomes)
    for item in qa:
        if recall and pause_s > 0:
            await asyncio.sleep(pause_s)
        call.context.set_messages(copy.deepcopy(state))
        missed, early = (step.missed, _early(call)) if step is not None else (0, 0)
        outcomes.take()  # an earlier turn's (a greeting's) is not this question's
        asked = read_request(await call.ask(item.question), table_.message)
        # told inside the turn, before the request reached the model: this question's
        outcome = outcomes.take()
        if not scores.score(item, asked.text):  # LoCoMo's and a corrected answer
            continue
        scores.input_tokens += asked.tokens
        scores.recalled += asked.recalled
        evidence = evidence_lines(evidence_ids(item.evidence), lines)
        if recall:
            scores.block_tokens.append(asked.block_tokens)
            scores.snippets += len(asked.quotes)
            scores.evidence_snippets += evidence_snippets(asked.quotes, evidence)
        scores.blocks.append((item.question, asked.block))
        if evidence:
            found = evidence_present(asked.in_view, asked.quotes, evidence)
            scores.evidence.append(found / len(evidence))
        late = step.missed > missed if step is not None else None
        early_ = _early(call) > early if step is not None else None
        scores.rows.append(
            question_row(item, asked, lines, late=late, early=early_, outcome=outcome)
        )


async def _settle(store: MemoryStore, call_id: str, poll_s: float = 0.1) -> None:
    """Wait until the store has absorbed what the call archived. The replay compresses a
    long call into seconds, so its writer still holds a backlog when the questions start;
    in a real call the details were archived minutes before anyone asks about them, and a
    search queued behind that backlog (one store thread) would miss its latency budget
    for a reason no caller meets."""
    seen = -1
    while True:
        await asyncio.sleep(poll_s)  # a few of the writer's flush intervals
        n = len(await store.messages(call_id))
        if n == seen:
            return
        seen = n


async def _index_settled(summarizer: ContextSummarizer) -> None:
    """With semantic recall, wait until the call's index has embedded the whole archive. In
    a real call it indexes all along, minutes before anyone asks; the replay asks at once,
    and on a loaded machine the first questions went lexical only because the index was
    still catching up."""
    step = summarizer.recall_step
    index = getattr(step, "semantic", None) if step is not None else None
    if step is None or index is None:
        return
    # the refresh running now (started with the call) ends, then one more reads what is
    # left: a size steady between two polls was true while one chunk was still embedding
    await asyncio.wait_for(index.refresh(step.archive), 600.0)


class SessionClock:
    """A conversation replayed in one call with its sessions' dates (question time): the
    call's conversation clock moved to each session's date as its first turn is sent
    (``ContextSummarizer.set_conversation_time``), so each line is dated by its own session
    (S17-Q-1: every line carried session 1's date), and :meth:`now` continues it."""

    def __init__(self, summarizer: ContextSummarizer, first: float | None) -> None:
        self.summarizer = summarizer
        self.at = first
        self.mark = asyncio.get_running_loop().time()

    def turn(self, turn: Turn) -> None:
        """Before ``turn`` is sent: a new session's date moves the clock there."""
        at = _date([turn])
        if at is not None and at != self.at:
            self.summarizer.set_conversation_time(at)
            self.at, self.mark = at, asyncio.get_running_loop().time()

    def now(self) -> float | None:
        """The call's conversation clock now (``None``: undated, the wall clock's)."""
        return None if self.at is None else self.at + asyncio.get_running_loop().time() - self.mark


async def _replay(
    call: CallDriver,
    turns: Sequence[Turn],
    offset: int = 0,
    connect_pause_s: float = 0.0,
    sessions: SessionClock | None = None,
) -> None:
    await call.start()
    if connect_pause_s:
        await asyncio.sleep(connect_pause_s)
    for i, turn in enumerate(turns):
        if sessions is not None:
            sessions.turn(turn)
        await call.turn(turn.inputs, offset + i + 1)


def _date(turns: Sequence[Turn]) -> float | None:
    """A session's date (LoCoMo's, from the note its first message opens with): the date of
    the call that replays it, so its archived messages carry it (``None``: the wall clock)."""
    return session_time(str(turns[0].user_message.get("content", ""))) if turns else None


#: Across calls: the final call (the questions) is a day after the last session.
_DAY_S = 86400.0


def _user(conv: LocomoConversation, plan: Plan) -> str:
    return f"{plan.tag}locomo-{conv.sample_id}:{conv.speaker_a}"


async def question_time(conv: LocomoConversation, plan: Plan) -> dict[str, Scores]:
    """Replay ``conv`` as one call per strategy, then ask each question on a copy of its
    final state; the scores of every strategy."""
    transcript = conv.transcript
    turns = transcript.turns
    table_ = TokenTable()
    out: dict[str, Scores] = {s: Scores() for s in STRATEGIES}
    qa = [q for q in conv.qa if content_words(q.answer)]
    setup = Setup(plan.thresholds, plan.backend, plan.options, table_)

    # full buffer and the built-in: the final state, then a plain question pipeline
    for name in ("full_buffer", "pipecat_builtin"):
        context = LLMContext(messages=context_messages(transcript.preamble))
        recorder = Recorder()
        params = (
            PipecatBuiltin(setup, recorder).assistant_params()
            if name == "pipecat_builtin"
            else None
        )
        call = CallDriver(context, turns, assistant_params=params, recorder=recorder)
        await _replay(call, turns)
        state = snapshot(context)
        await call.end()
        asking = CallDriver(LLMContext(messages=copy.deepcopy(state)), [])
        await asking.start()
        await _ask_all(asking, state, qa, table_, out[name], conv.lines)
        await asking.end()

    # ours: one call archiving into the store, then questions without and with recall
    store = plan.store()
    user_id = _user(conv, plan)
    try:
        context = LLMContext(messages=context_messages(transcript.preamble))
        recorder = Recorder()
        ours = _ours(
            plan,
            context,
            recorder,
            table_,
            store=store,
            call_id=f"{user_id}:call",
            user_id=user_id,
            started_at=_date(turns),
        )
        call = CallDriver(context, turns, [ours], recorder=recorder)
        sessions = SessionClock(ours, _date(turns))  # the clock the call's dates run on
        await _replay(call, turns, sessions=sessions)
        await _settle(store, f"{user_id}:call")
        state = snapshot(context)
        # the questions continue the call's clock (they are asked in it, after every
        # message it archived, in its last session): dated from the call's start, a
        # question's "now" fell before or after a message by how fast the machine replayed
        # (S13-F-1)
        asked_at = sessions.now()
        # the questions are asked while the call is still on: its messages still in the
        # context are archived only when it ends, as in a real call
        for name, recall in (("ours", None), ("ours_recall", plan.recall)):
            qctx = LLMContext(messages=copy.deepcopy(state))
            q = _ours(
                plan,
                qctx,
                Recorder(),
                table_,
                # reads the call's archive, archives none of the questions
                store=QuestionStore(store) if recall is not None else None,
                call_id=f"{user_id}:questions",
                user_id=user_id,
                recall=recall,
                summarize=False,
                started_at=asked_at,
            )
            asking = _asking(plan, qctx, q)
            await asking.start()
            await _index_settled(q)
            await _ask_all(
                asking,
                state,
                qa,
                table_,
                out[name],
                conv.lines,
                recall=recall is not None,
                pause_s=plan.pause_s,
                step=q.recall_step,
            )
            await asking.end()
            if q.recall_step is not None:
                out[name].missed += q.recall_step.missed
                out[name].early += _early(asking)
        await call.end()
    finally:
        await store.close()
    return out


def sessions(conv: LocomoConversation) -> list[list[Turn]]:
    """The conversation's turns split by LoCoMo session (a turn whose user message opens
    with ``[Session N`` starts one)."""
    out: list[list[Turn]] = []
    for turn in conv.transcript.turns:
        text = str(turn.user_message.get("content", ""))
        if _SESSION.match(text) or not out:
            out.append([])
        out[-1].append(turn)
    return out


async def across_calls(
    conv: LocomoConversation, plan: Plan, full: Scores | None = None
) -> dict[str, Scores]:
    """Each session a separate call of the same caller through the store (resume on), the
    questions in a final call. ``full`` (the question-time full buffer) is reused as the
    ceiling when given."""
    transcript = conv.transcript
    table_ = TokenTable()
    qa = [q for q in conv.qa if content_words(q.answer)]
    out: dict[str, Scores] = {}
    if full is None:
        full = (await question_time(conv, plan))["full_buffer"]
    out["full_buffer"] = full
    # the built-in keeps nothing across calls: a new call is the system prompt alone
    out["pipecat_builtin"] = Scores()
    asking = CallDriver(LLMContext(messages=context_messages(transcript.preamble)), [])
    await asking.start()
    await _ask_all(
        asking,
        copy.deepcopy(transcript.preamble),
        qa,
        table_,
        out["pipecat_builtin"],
        conv.lines,
    )
    await asking.end()

    store = plan.store()
    user_id = _user(conv, plan)
    try:
        offset = 0
        last: float | None = None
        for k, session_turns in enumerate(sessions(conv), 1):
            last = _date(session_turns) or last
            context = LLMContext(messages=context_messages(transcript.preamble))
            recorder = Recorder()
            ours = _ours(
                plan,
                context,
                recorder,
                table_,
                store=store,
                call_id=f"{user_id}:session-{k}",
                user_id=user_id,
                resume=True,
                started_at=_date(session_turns),
            )
            # the replay LLM of this call holds only this session's answers
            call = CallDriver(context, session_turns, [ours], recorder=recorder)
            # a returning caller's memory joins at the first turn (see CONNECT_PAUSE_S)
            await _replay(call, session_turns, connect_pause_s=CONNECT_PAUSE_S if k > 1 else 0.0)
            if plan.compact_at_end:
                await call.compact()
            await call.end()
            offset += len(session_turns)
        for name, recall in (("ours", None), ("ours_recall", plan.recall)):
            qctx = LLMContext(messages=context_messages(transcript.preamble))
            q = _ours(
                plan,
                qctx,
                Recorder(),
                table_,
                # reads the sessions' archive, archives nothing of its own (no question of
                # this strategy or the other reaches a later question's recall)
                store=QuestionStore(store),
                call_id=f"{user_id}:final-{name}",
                user_id=user_id,
                resume=True,
                recall=recall,
                summarize=False,
                started_at=last + _DAY_S if last is not None else None,
            )
            asking = _asking(plan, qctx, q)
            await asking.start()
            # the caller's memory is in the greeting's context, so in the state every
            # question starts from (see CONNECT_PAUSE_S)
            await asyncio.sleep(CONNECT_PAUSE_S)
            await asking.turn([{"role": "user", "content": GREETING}], asking.question_turn)
            if recall is not None:
                # the greeting exchange takes seconds in a real call (the answer is spoken);
                # the replay would otherwise ask while the call's start-up reads are running
                await asyncio.sleep(GREETING_PAUSE_S)
                await _index_settled(q)
            state = snapshot(qctx)
            scores = out.setdefault(name, Scores())
            await _ask_all(
                asking,
                state,
                qa,
                table_,
                scores,
                conv.lines,
                recall=recall is not None,
                pause_s=plan.pause_s,
                step=q.recall_step,
            )
            await asking.end()
            if q.recall_step is not None:
                scores.missed += q.recall_step.missed
                scores.early += _early(asking)
    finally:
        await store.close()
    return out

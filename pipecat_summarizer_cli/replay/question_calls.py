"""The calls of the question-time measurement (``pipecat-summarizer questions``, whose
command is :mod:`~pipecat_summarizer_cli.replay.questions`): answer recall on the request the
main LLM receives for each question, asked as the caller's next turn.

Two measurements, each through real Pipecat pipelines (a real ``LLMContextAggregatorPair``,
the replay LLM recording what it is sent, the offline extractive summarizer):

* **Question time** (one call): the conversation is replayed as one call per strategy
  (instant mode: every summary lands before the next turn). Then each question is sent as
  the next user turn on its own copy of the final context, and answer recall is measured on
  the request the main LLM receives for it. Ours archives into a store (SQLite, in memory
  by default) during the call; at question time a ``ContextSummarizer`` with
  ``recall=RecallParams(...)`` searches it (its own summaries off: a question never changes
  the state the next question sees; a summary started at that turn would not change that
  turn's request anyway).
* **Across calls**: each LoCoMo session is replayed as a separate call of the same caller
  through the store (resume on: the next call starts with the caller's pinned facts and
  "earlier calls" summary); the questions are asked in a final call, each on its own copy of
  that call's state after a greeting turn. The full buffer (every session in one context)
  is the ceiling; Pipecat's built-in keeps nothing across calls.

Strategies: ``full_buffer``, ``pipecat_builtin``, ``ours`` (``ContextSummarizer`` without
recall), ``ours_recall`` (lexical recall; with ``--semantic``, semantic recall fused with it:
the ``semantic`` extra). Answer recall is the share of an answer's content words found in
the request (:func:`~pipecat_summarizer_cli.replay.locomo.answer_recall`), by LoCoMo category and
overall (item-weighted); ``input`` is the questions' requests' tokens against the full
buffer's. The scoring (shares, per-strategy scores, the table) is in
:mod:`~pipecat_summarizer_cli.replay.question_scores`; this module runs the calls.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pipecat.frames.frames import EndFrame, LLMMessagesAppendFrame, LLMSummarizeContextFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMAssistantAggregatorParams,
    LLMContextAggregatorPair,
)
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.utils.context.llm_context_summarization import LLMContextSummaryConfig
from pipecat.workers.runner import WorkerRunner

from pipecat_summarizer import (
    ContextSummarizer,
    ContextSummarizerParams,
    MemoryParams,
    RecallParams,
    WriterParams,
    is_recall_message,
)
from pipecat_summarizer.store import MemoryStore
from pipecat_summarizer_cli.replay.backends import (
    Backend,
    Meter,
    MeteredSummarizer,
    extractive_backend,
)
from pipecat_summarizer_cli.replay.locomo import (
    LocomoConversation,
    QAItem,
    content_words,
)
from pipecat_summarizer_cli.replay.question_relevance import (
    evidence_ids,
    evidence_lines,
    evidence_present,
    evidence_snippets,
    normalize,
    snippet_quotes,
)
from pipecat_summarizer_cli.replay.question_scores import STRATEGIES, Scores, answer_share
from pipecat_summarizer_cli.replay.recorder import Recorder
from pipecat_summarizer_cli.replay.replay_llm import ReplayLLM
from pipecat_summarizer_cli.replay.report import TokenTable, request_text
from pipecat_summarizer_cli.replay.strategies import PipecatBuiltin, Setup, Thresholds
from pipecat_summarizer_cli.replay.transcript import Step, Turn, context_messages

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


# -- one call through a real pipeline ----------------------------------------------------------


class _Call:
    """One call's pipeline (user aggregator, ``before`` processors, replay LLM, assistant
    aggregator), driven turn by turn on the running loop."""

    def __init__(
        self,
        context: LLMContext,
        turns: Sequence[Turn],
        before: Sequence[FrameProcessor] = (),
        *,
        assistant_params: LLMAssistantAggregatorParams | None = None,
        recorder: Recorder | None = None,
    ):
        self.context = context
        self.recorder = recorder
        # one extra slot, reused by every question (answered with nothing)
        self.llm = ReplayLLM([*(t.steps for t in turns), [Step()]])
        self._steps = [max(1, len(t.steps)) for t in turns] + [1]
        self.question_turn = len(turns) + 1
        user_agg, assistant_agg = LLMContextAggregatorPair(
            context, assistant_params=assistant_params or LLMAssistantAggregatorParams()
        )
        self._stopped = 0
        self._changed = asyncio.Event()

        @assistant_agg.event_handler("on_assistant_turn_stopped")
        async def _stopped(_agg, _message):
            self._stopped += 1
            self._changed.set()

        self.worker = PipelineWorker(
            Pipeline([user_agg, *before, self.llm, assistant_agg]),
            params=PipelineParams(),
            cancel_on_idle_timeout=False,
            idle_timeout_secs=None,
            enable_rtvi=False,
            enable_turn_tracking=False,
        )
        self._started = asyncio.Event()

        @self.worker.event_handler("on_pipeline_started")
        async def _on_started(_worker, _frame):
            self._started.set()

        self._runner_task: asyncio.Task | None = None

    async def start(self) -> None:
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(self.worker)
        self._runner_task = asyncio.ensure_future(runner.run())
        await asyncio.wait_for(self._started.wait(), 30)

    async def turn(self, inputs: list[dict], turn: int, timeout: float = 60.0) -> None:
        """Send one user turn and wait until its answer is in the context."""
        self.llm.begin_turn(turn)
        target = self.llm.responses
        expected_steps = self._steps[turn - 1]
        await self.worker.queue_frame(
            LLMMessagesAppendFrame(messages=context_messages(inputs), run_llm=True)
        )
        deadline = time.monotonic() + timeout
        while not (
            self.llm.responses >= target + expected_steps and self._stopped >= self.llm.responses
        ):
            self._changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"turn {turn} was not answered within {timeout:.0f}s")
            try:
                await asyncio.wait_for(self._changed.wait(), min(left, 0.05))
            except TimeoutError:
                pass
        if self.recorder is not None:  # let a summary started by the turn land
            await asyncio.wait_for(self.recorder.wait_idle(), timeout)
            await asyncio.sleep(0)

    async def ask(self, question: str) -> tuple[str, ...]:
        """Ask one question; the serialized messages of the request it produced."""
        before = len(self.llm.requests)
        await self.turn([{"role": "user", "content": question}], self.question_turn)
        return self.llm.requests[before].messages

    async def compact(self, timeout: float = 60.0) -> None:
        """A manual compaction of the whole conversation (what an application can do at
        hang-up), so every message is archived and the call's last summary covers it all."""
        await self.worker.queue_frame(
            LLMSummarizeContextFrame(config=LLMContextSummaryConfig(min_messages_after_summary=0))
        )
        await asyncio.sleep(0.05)
        if self.recorder is not None:
            await asyncio.wait_for(self.recorder.wait_idle(), timeout)
            await asyncio.sleep(0.05)

    async def end(self) -> None:
        await self.worker.queue_frame(EndFrame())
        if self._runner_task is not None:
            await asyncio.wait_for(self._runner_task, 60)


def _snapshot(context: LLMContext) -> list:
    return [copy.deepcopy(m) for m in context.messages if not is_recall_message(m)]


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
    """

    thresholds: Thresholds = field(default_factory=Thresholds)
    backend: Backend = field(default_factory=extractive_backend)
    options: ContextSummarizerParams = field(default_factory=ContextSummarizerParams)
    recall: RecallParams = field(default_factory=RecallParams)
    store_factory: Callable[[], MemoryStore] | None = None
    tag: str = ""
    compact_at_end: bool = False

    def store(self) -> MemoryStore:
        if self.store_factory is not None:
            return self.store_factory()
        from pipecat_summarizer.store import SQLiteMemoryStore

        return SQLiteMemoryStore()


class QuestionStore(MemoryStore):
    """The store as the calls that ask the questions see it: every read goes to the
    measured store, every write is dropped (counted in :attr:`dropped`).

    A question call archives its own turns (a question and its answer leave the context
    when the next question replaces it, and the last one is archived at the call's end), and
    the strategies share one caller's store: without this, a question asked of one strategy
    (or earlier of the same one) came back in a later question's recalled block. A
    measurement must never archive its own questions into the memory it measures.
    """

    def __init__(self, inner: MemoryStore):
        self._inner = inner
        self.backend = inner.backend
        self.dropped = 0

    async def open(self) -> None:
        await self._inner.open()

    async def close(self) -> None:
        """Nothing: the measurement closes the store it measures."""

    async def write(self, records: Sequence[Any]) -> None:
        self.dropped += len(records)

    async def calls(self, user_id: str | None = None, *, limit: int = 50) -> list[Any]:
        return await self._inner.calls(user_id, limit=limit)

    async def call(self, call_id: str) -> Any:
        return await self._inner.call(call_id)

    async def compactions(self, call_id: str) -> list[Any]:
        return await self._inner.compactions(call_id)

    async def messages(self, call_id: str, *, compaction: int | None = None) -> list[Any]:
        return await self._inner.messages(call_id, compaction=compaction)

    async def message(self, call_id: str, position: int) -> Any:
        return await self._inner.message(call_id, position)

    async def messages_at(self, keys: Sequence[tuple[str, int]]) -> list[Any]:
        return await self._inner.messages_at(keys)

    async def fact_history(
        self, *, call_id: str | None = None, user_id: str | None = None
    ) -> list[Any]:
        return await self._inner.fact_history(call_id=call_id, user_id=user_id)

    async def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        call_id: str | None = None,
        limit: int = 10,
        any_word: bool = False,
    ) -> list[Any]:
        return await self._inner.search(
            query, user_id=user_id, call_id=call_id, limit=limit, any_word=any_word
        )

    async def caller_memory(self, user_id: str, *, max_calls: int = 5) -> Any:
        return await self._inner.caller_memory(user_id, max_calls=max_calls)

    async def forget(self, user_id: str) -> int:
        raise RuntimeError("a question call never forgets the memory it measures")

    async def purge_older_than(self, days: float) -> int:
        raise RuntimeError("a question call never purges the memory it measures")

    def forget_generation(self, user_id: str) -> int:
        return self._inner.forget_generation(user_id)

    async def forgotten_at(self, user_id: str) -> float | None:
        return await self._inner.forgotten_at(user_id)

    async def noticed_forget(self, user_id: str, since: float) -> bool:
        return await self._inner.noticed_forget(user_id, since)


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
        memory=MemoryParams(resume=resume, writer=_FAST_WRITER) if store is not None else None,
        recall=recall,
    )


def _tokens(table_: TokenTable, messages: Sequence[str]) -> int:
    return sum(table_.message(m) for m in messages)


async def _ask_all(
    call: _Call,
    state: list,
    qa: Sequence[QAItem],
    table_: TokenTable,
    scores: Scores,
    lines: Mapping[str, str],
    *,
    recall: bool = False,
) -> None:
    """Ask each question on a copy of ``state``; score its request (``recall``: the
    strategy recalls, so its block's tokens and snippets are counted, 0 without a block)."""
    for item in qa:
        call.context.set_messages(copy.deepcopy(state))
        messages = await call.ask(item.question)
        decoded = [json.loads(m) for m in messages]
        share = answer_share(request_text(decoded), item.answer)
        if share is None:
            continue
        scores.add(item.category, share)
        scores.input_tokens += _tokens(table_, messages)
        blocks = [(s, d) for s, d in zip(messages, decoded, strict=True) if is_recall_message(d)]
        scores.recalled += bool(blocks)
        block = "\n".join(str(d["content"]) for _, d in blocks)
        quotes = snippet_quotes(block)
        evidence = evidence_lines(evidence_ids(item.evidence), lines)
        if recall:
            scores.block_tokens.append(sum(table_.message(s) for s, _ in blocks))
            scores.snippets += len(quotes)
            scores.evidence_snippets += evidence_snippets(quotes, evidence)
        scores.blocks.append((item.question, block))
        if evidence:
            in_view = [normalize(request_text([d])) for d in decoded if not is_recall_message(d)]
            scores.evidence.append(evidence_present(in_view, quotes, evidence) / len(evidence))


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


async def _index_settled(summarizer: ContextSummarizer, poll_s: float = 0.1) -> None:
    """With semantic recall, wait until the call's index has embedded the archive (its size
    steady between two polls). In a real call it indexes all along, minutes before anyone
    asks; the replay asks at once, and on a loaded machine the first questions went lexical
    only because the index was still catching up."""
    step = summarizer.recall_step
    index = getattr(step, "semantic", None) if step is not None else None
    if index is None:
        return
    deadline = time.monotonic() + 60.0
    seen = -1
    while time.monotonic() < deadline:
        await asyncio.sleep(poll_s)
        if index.ready and index.size == seen:
            return
        seen = index.size


async def _replay(
    call: _Call, turns: Sequence[Turn], offset: int = 0, connect_pause_s: float = 0.0
) -> None:
    await call.start()
    if connect_pause_s:
        await asyncio.sleep(connect_pause_s)
    for i, turn in enumerate(turns):
        await call.turn(turn.inputs, offset + i + 1)


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
        call = _Call(context, turns, assistant_params=params, recorder=recorder)
        await _replay(call, turns)
        state = _snapshot(context)
        await call.end()
        asking = _Call(LLMContext(messages=copy.deepcopy(state)), [])
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
            plan, context, recorder, table_, store=store, call_id=f"{user_id}:call", user_id=user_id
        )
        call = _Call(context, turns, [ours], recorder=recorder)
        await _replay(call, turns)
        await _settle(store, f"{user_id}:call")
        state = _snapshot(context)
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
            )
            asking = _Call(qctx, [], [q])
            await asking.start()
            await _index_settled(q)
            await _ask_all(
                asking, state, qa, table_, out[name], conv.lines, recall=recall is not None
            )
            await asking.end()
            if q.recall_step is not None:
                out[name].missed += q.recall_step.missed
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
    asking = _Call(LLMContext(messages=context_messages(transcript.preamble)), [])
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
        for k, session_turns in enumerate(sessions(conv), 1):
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
            )
            # the replay LLM of this call holds only this session's answers
            call = _Call(context, session_turns, [ours], recorder=recorder)
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
            )
            asking = _Call(qctx, [], [q])
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
            state = _snapshot(qctx)
            scores = out.setdefault(name, Scores())
            await _ask_all(asking, state, qa, table_, scores, conv.lines, recall=recall is not None)
            await asking.end()
            if q.recall_step is not None:
                scores.missed += q.recall_step.missed
    finally:
        await store.close()
    return out

"""The shared context's state and its one write path: the base of ``ContextSession``.

:class:`SharedContext` holds what must stay consistent with the context's messages (the
pending queue and its positions, the view without our own messages, replaced-context
detection, the reclaiming of our own messages' copies, the recalled block's place) and
makes every write of them; it is the ceiling's ``CeilingHost``. Where the recalled block goes
is :class:`~pipecat_summarizer._session.recalled_block.RecalledBlock`'s, a base.
:class:`~pipecat_summarizer._session.owner.ContextSession` adds the summary's life (the plan
in flight, the splice of its result). Synchronous: no ``await`` anywhere.
"""

from __future__ import annotations

from typing import Any

from loguru import logger
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.utils.context.llm_context_summarization import (
    LLMAutoContextSummarizationConfig,
)

from pipecat_summarizer._compaction.ceiling import RequestCeiling
from pipecat_summarizer._compaction.eviction import pending_places, with_pending
from pipecat_summarizer._compaction.measure import (
    ContextMeter,
    Edit,
    Measurement,
    single_edit,
)
from pipecat_summarizer._compaction.plan import SYSTEM_ROLES, head_length, make_protection
from pipecat_summarizer._recall.step import RecallStep
from pipecat_summarizer._record.corrections import unread
from pipecat_summarizer._record.pinned import Fact
from pipecat_summarizer._record.record import ConversationRecord
from pipecat_summarizer._session.recalled_block import RecalledBlock
from pipecat_summarizer._session.recorder import CallRecorder
from pipecat_summarizer._session.schedule import (
    CompactionSchedule,
    Job,
)
from pipecat_summarizer._text.tokens import CachedCounter, count_text
from pipecat_summarizer.events import (
    MessagesEvictedEvent,
    ToolResultsClearedEvent,
)
from pipecat_summarizer.params import ContextSummarizerParams
from pipecat_summarizer.summarizers.base import Summarizer


def _noted_in_place(messages: list, noted: Any, edited: int) -> bool:
    # right after the head, before the edit: as ConversationRecord.place leaves it
    head = head_length(messages)
    return head < edited and messages[head] is noted


def _holds(messages: list, message: Any) -> bool:
    """Whether ``message`` (by identity) is in ``messages``: our own messages sit near the
    start (facts, summary) or the end (the recalled block), so this is cheap."""
    for m in messages[:8]:
        if m is message:
            return True
    return any(m is message for m in reversed(messages))


class SharedContext(RecalledBlock):
    """The context's state and its one write path (the base of ``owner.ContextSession``).

    Args:
        context: The shared ``LLMContext``.
        config: Pipecat's auto-summarization config (validated).
        params: The processor's params.
        summarizer: The default secondary LLM.
        counter: The cached token counter (shared with recall's rendering).
        recorder: The store sink (archive, compactions, facts), or ``None``.
        recall: The recall step whose block this session places, or ``None``.
        name: How log lines name the processor.
    """

    def __init__(
        self,
        context: LLMContext,
        config: LLMAutoContextSummarizationConfig,
        params: ContextSummarizerParams,
        *,
        summarizer: Summarizer,
        counter: CachedCounter,
        recorder: CallRecorder | None = None,
        recall: RecallStep | None = None,
        name: str = "ContextSummarizer",
    ):
        """Build the session's parts in dependency order (nothing reads a part not yet built)."""
        self.context = context
        self.config = config
        self.params = params
        self.summarizer = summarizer
        self.recorder = recorder
        self.recall = recall
        self._name = name
        p = params
        self.record = ConversationRecord(
            config.summary_config,
            p.pinning,
            summary_role=p.summary_role,
            count_text=lambda text: count_text(counter, text),
            log_content=p.log_content,
            name=name,
        )
        if recorder is not None:
            self.record.on_facts_changed = recorder.facts_changed
            recorder.is_cut = self.record.interruptions.is_cut
        protected = make_protection(protect_injected_system=p.protect_injected_system)
        record = self.record
        # our own messages (facts, recalled block) are never summarized, like the head;
        # only a system or developer dict can be protected otherwise (is_system_like)
        self.meter = ContextMeter(
            counter,
            lambda i, m, ms: (
                m is record.noted_message
                or m is record.app_message
                or (recall is not None and m is recall.message)
                or (isinstance(m, dict) and m.get("role") in SYSTEM_ROLES and protected(i, m, ms))
            ),
        )
        self.ceiling = RequestCeiling(
            p.ceiling,
            self.meter.counter,
            protect_injected_system=p.protect_injected_system,
            stale_after=p.unresolved_tool_call_turns,
            name=name,
        )
        self.schedule = CompactionSchedule(config, p, name)
        self.pending: list = []  # evicted under the ceiling, in conversation order
        # where each pending message sits (eviction may step over an unresolved tool call)
        self.pending_places: dict = {}
        self.job: Job | None = None  # the plan in flight
        self.compactions = 0
        self.step = "counting"  # which step runs, for the processor's failure log
        self._in_flight = False  # as passed to prepare(), for the ceiling's pinning
        self._serializing = False  # prepare() runs as the LLM builds a request
        self.writes = 0  # context writes so far (a cheap "did anything change")
        self.loaded = False  # a returning caller's memory was loaded (see quiet())
        self._read: list = []  # the latest messages read for corrections
        # the resume's notice this session placed: the application's text, known by identity
        self.notice: dict | None = None
        # clearing without a compaction, for the processor's on_tool_results_cleared
        self.cleared: list[ToolResultsClearedEvent] = []

    def __str__(self) -> str:
        """The processor's name, for log lines."""
        return self._name

    # -- reading --------------------------------------------------------------------------

    @property
    def messages(self) -> list:
        """The context's messages now."""
        return self.context.messages

    def measure(self) -> Measurement:
        """The context's measurement (incremental: only what was added is counted)."""
        return self.meter.measure(self.context.messages, self.record.summary_message)

    def view(self, messages: list | None = None) -> list:
        """The context as the plan functions see it: without the conversation-facts message
        (neither head nor conversation) nor the recalled message (this turn's only)."""
        messages = self.context.messages if messages is None else messages
        view, recalled = self.record.view(messages), self.recalled
        return view if recalled is None else [m for m in view if m is not recalled]

    def logical(self) -> list:
        """The view with the pending queue back in its places (what a plan covers)."""
        summary = self.record.summary_in(self.context.messages)
        return with_pending(self.view(), self.pending, summary, self.pending_places)

    @property
    def summary_text(self) -> str | None:
        """The text of the summary in the context, if any."""
        in_context = self.record.summary_in(self.context.messages)
        return self.record.summary_text if in_context is not None else None

    @property
    def recalled(self) -> dict | None:
        """This turn's recalled message, if one is placed."""
        return self.recall.message if self.recall is not None else None

    def conversation_at_end(self) -> list:
        """The conversation messages in the context (archived at the end): not the head,
        the facts, the summary or the recalled message."""
        view = self.view()
        summary = self.record.summary_message
        return [m for m in view[head_length(view) :] if m is not summary]

    def request_overhead_tokens(self) -> int:
        """Tokens every request carries besides the messages (system instruction, tools)."""
        return self.ceiling.overhead(self.context.tools)

    # -- the one write path ---------------------------------------------------------------

    def put(self, messages: list | None) -> None:
        """Write ``messages`` unless ``None`` (nothing changed)."""
        if messages is not None:
            self.write(messages)

    def write(self, messages: list, *, removed: Any = None, inserted: Any = None) -> None:
        """Set the context's messages (the only place that does).

        A replacement by the application is judged on the context as this write found it:
        after the write, our own messages would be in the new context and the meter would
        take the rewrite for ours. ``removed`` / ``inserted``: the write takes out and/or
        puts in that one message (the recalled block), so the meter counts it alone.
        """
        record = self.record
        noted, app = record.noted_message, record.app_message
        if self.check_replaced(placing=inserted):
            # rendered before the replacement was known: the facts messages may quote the
            # old conversation's evicted messages, now unpinned
            stale = [
                x
                for x in (noted, app)
                if x is not None and x is not record.noted_message and x is not record.app_message
            ]
            messages = [m for m in messages if all(m is not x for x in stale)]
            messages = record.render(messages) or messages
            removed = inserted = None
        edit = None
        if removed is not None or inserted is not None:
            edit = single_edit(self.context.messages, messages, removed=removed, inserted=inserted)
        self._write(messages, edit)

    def _write(self, messages: list, edit: Edit | None = None) -> None:
        # every rewrite keeps the conversation-facts message right after the head (a known
        # one-message edit after it leaves it there); the meter's cheap append check cannot
        # see a rewrite that keeps the length
        noted = self.record.noted_message
        if edit is None or not (noted is None or _noted_in_place(messages, noted, edit.at)):
            messages, edit = self.record.place(messages), None
        self.context.set_messages(messages)
        self.writes += 1
        self.meter.invalidate(edit)
        # measured now, so the meter's anchors are this write's and a later replacement
        # is compared with what we left, never taken for our own rewrite
        self.measure()

    def reclaim_own(self, placing: Any = None) -> None:
        """Take back our own messages (facts, summary, recalled block) that the application
        put back as copies (a deep-copied ``LLMMessagesUpdateFrame``, a restored state):
        equal role and content where the original is gone. Cheap when nothing was copied.
        ``placing``: a message of ours about to be written, not missing (no copy sought)."""
        record, recall = self.record, self.recall
        if (
            record.app_message is None
            and record.noted_message is None
            and record.summary_message is None
            and (recall is None or recall.message is None)
        ):
            return  # nothing of ours placed (the common case before the first summary)
        messages: list[Any] = self.context.messages
        own = record.own_messages()
        if recall is not None and recall.message is not None and recall.message is not placing:
            own.append(recall.message)
        missing = [x for x in own if not _holds(messages, x)]
        if not missing:
            return
        taken = {id(x) for x in own}
        for old in missing:
            copy = next((m for m in messages if id(m) not in taken and m == old), None)
            if copy is None:
                continue  # it left the context
            taken.add(id(copy))
            if recall is not None and old is recall.message:
                recall.message = copy
            else:
                self.record.reclaim(old, copy)

    def check_replaced(self, measured: bool = False, placing: Any = None) -> bool:
        """Archive what the application removed from the context (``"replaced"``), and drop
        the pending queue once it cut the conversation's start (a replacement, a Flows
        reset, a truncating update): the queue is older than everything it dropped.

        Args:
            measured: The context was just measured (no need to measure again).
            placing: A message of ours about to be written (see :meth:`reclaim_own`).

        Returns:
            True if the context was found replaced (once per replacement).
        """
        if not measured:
            self.reclaim_own(placing)  # before the meter takes a copy of ours for conversation
            self.measure()
        rewrite = self.meter.take_rewrite()
        if rewrite is None:
            return False
        if self.recorder is not None:  # only conversation messages, never our own
            self.recorder.archive(rewrite.removed, "replaced")
        logger.info(
            f"{self}: the application removed {len(rewrite.removed)} messages from the "
            f"context{' (a replacement)' if rewrite.replaced else ''}"
        )
        if not rewrite.replaced:
            return False
        self.schedule.context_replaced()  # a new conversation: plan it afresh
        if self.pending:
            dropped, self.pending = self.pending, []
            self.pending_places = {}
            logger.info(
                f"{self}: {len(dropped)} pending messages dropped, not summarized "
                "(the context was replaced)"
            )
            if self.recorder is not None:
                self.recorder.archive(dropped, "replaced")
        # facts pinned from the old conversation's evicted messages go with it
        rendered = self.record.forget_evicted(self.context.messages)
        if rendered is not None:
            self._write(rendered)
        return True

    # -- the record's messages ------------------------------------------------------------

    def quiet(self) -> bool:
        """Nothing of ours is placed or due to be (no pinned fact, no summary, no recalled
        block, no caller memory loaded): a frame has nothing to reclaim or render."""
        record, recall = self.record, self.recall
        return (
            record.summary_message is None
            and record.app_message is None
            and record.noted_message is None
            and not self.loaded
            and not len(record.facts)
            and (recall is None or recall.message is None)
        )

    def render_record(self, in_flight: bool) -> None:
        """The pinned facts in place, rewritten only on change (cheap when nothing did)."""
        self.put(self.record.render(self.context.messages, in_flight=in_flight))

    def fold_and_refresh(self, in_flight: bool) -> None:
        """Facts over budget fold into the summary; the summary message is re-rendered."""
        self.put(self.record.enforce_budget(self.context.messages, in_flight=in_flight))
        self.put(self.record.refresh_summary(self.context.messages, in_flight=in_flight))

    def pin(self, key: str, text: str, *, kind: str, source: str, in_flight: bool) -> None:
        """Pin a fact (see ``ContextSummarizer.pin``)."""
        self.reclaim_own()
        messages = self.context.messages
        self.put(
            self.record.pin(messages, key, text, kind=kind, source=source, in_flight=in_flight)
        )

    def unpin(self, key: str, *, in_flight: bool) -> bool:
        """Unpin a fact; True if one was removed."""
        self.reclaim_own()
        removed, new = self.record.unpin(self.context.messages, key, in_flight=in_flight)
        self.put(new)
        return removed

    def load_memory(self, facts: list[dict], earlier: str | None, *, in_flight: bool) -> None:
        """A returning caller's stored facts and earlier calls' summary join the record."""
        messages = self.context.messages
        self.loaded = True  # an earlier-calls text may wait for the summary's place
        self.put(self.record.load(messages, facts, earlier, in_flight=in_flight))

    @property
    def facts(self) -> list[Fact]:
        """The pinned facts, in the order they are rendered."""
        return self.record.facts.facts

    def read_said(self, in_flight: bool) -> None:
        """Corrections in the caller's and the assistant's messages since the last look
        replace the details they correct (pinned facts, the summary)."""
        fresh = unread(self.context.messages, self._read)
        if fresh:
            self._read = [*self._read[-48:], *fresh]
            skip = [self.recalled, self.notice]
            self.put(self.record.correct(self.context.messages, fresh, skip, in_flight=in_flight))

    def barge_in(self, frame: Any) -> None:
        """An ``InterruptionFrame`` or an assistant turn written to the context
        (``Interruptions``): an answer the caller cut off is marked. Never raises."""
        try:
            self.record.interruptions.on_frame(frame, self.context.messages)
        except Exception as e:
            logger.error(f"{self}: marking an interrupted answer failed ({type(e).__name__})")

    # -- a request ------------------------------------------------------------------------

    def prepare(
        self, in_flight: bool, *, reclaimed: bool = False
    ) -> tuple[Measurement, MessagesEvictedEvent | None]:
        """Make the context ready to be sent: replaced-context check, pinned facts in place,
        under the ceiling. Returns the measurement and the eviction event to report.

        Args:
            in_flight: A summary is running.
            reclaimed: Our copies were just reclaimed (nothing but our own writes since).
        """
        self._in_flight = in_flight
        self.step = "counting"
        if not reclaimed:
            self.reclaim_own()  # before the meter takes a copy of ours for conversation
        writes = self.writes
        m = self.measure()
        self.check_replaced(measured=True)  # before anything is written (see write)
        if self.recall is not None and self.recall.forgotten():
            self.recall_gives_way()  # it quotes what the caller's forget removed
        self.step = "pinning"
        self.read_said(in_flight)
        self.render_record(in_flight)
        self.step = "counting"
        if self.writes != writes:  # measured again only when something was written
            m = self.measure()
            self.check_replaced(measured=True)
        ceiling = self.ceiling
        if ceiling.params is None:
            return m, None
        overhead = self.request_overhead_tokens()
        messages = self.context.messages
        if ceiling.due(m.total_tokens, overhead, messages) and self.recall_gives_way():
            m = self.measure()
        if not ceiling.due(m.total_tokens, overhead, self.context.messages):
            return m, None
        self.step = "eviction"
        event = ceiling.evict(self, overhead)
        return self.measure(), event

    def prepare_at_serialization(self, in_flight: bool) -> MessagesEvictedEvent | None:
        """:meth:`prepare` as the LLM builds a request (never re-entered, never raises: the
        request goes out as it is rather than not at all). Returns the eviction event."""
        if self._serializing:
            return None
        self._serializing = True
        try:
            return self.prepare(in_flight)[1]
        except Exception as e:
            logger.error(
                f"{self}: holding the ceiling as the request was built failed "
                f"({type(e).__name__}); sent as it is"
            )
            return None
        finally:
            self._serializing = False

    # -- the ceiling's host (ceiling.CeilingHost) -----------------------------------------

    def ceiling_messages(self) -> list:
        """The context's messages now."""
        return self.context.messages

    def ceiling_view(self) -> list:
        """The view the ceiling evicts from."""
        return self.view()

    def ceiling_fixed_tokens(self) -> int:
        """Tokens of the facts message: never evicted, sent with every request."""
        noted = self.record.noted_message
        return self.meter.counter.count_message(noted) if noted is not None else 0

    def ceiling_summary_message(self) -> dict | None:
        """The summary message (never evicted)."""
        return self.record.summary_message

    def ceiling_move_out(self, view: list, remaining: list, out: list) -> None:
        """``remaining`` replaces ``view``; ``out`` joins the pending queue in conversation
        order (with position keys: eviction may have stepped over an unresolved tool call)."""
        record = self.record
        summary = record.summary_message
        logical = with_pending(view, self.pending, summary, self.pending_places)
        queued = {id(m) for m in (*self.pending, *out)}
        self.write(remaining)
        self.pending = [m for m in logical if id(m) in queued]
        self.pending_places = pending_places(logical, self.pending, summary)
        if self.params.pinning.from_evicted:
            messages = self.context.messages
            self.put(record.pin_evicted(messages, out, in_flight=self._in_flight))
        if self.recorder is not None:
            self.recorder.archive(out, "evicted")

    def ceiling_total_tokens(self) -> int:
        """The context's tokens now (without the request overhead)."""
        return self.measure().total_tokens

    def ceiling_pending(self) -> int:
        """Messages waiting in the pending queue."""
        return len(self.pending)

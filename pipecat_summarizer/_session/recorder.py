"""``CallRecorder``: turns a ``ContextSummarizer``'s moments into store records.

The processor calls it at a handful of hook points (a summary applied or failed, messages
evicted or discarded, pinned facts changed, start and end of the call). Each hook builds
records from values already in memory and hands them to the :class:`StoreWriter` queue:
nothing here waits for the database, except :meth:`end` (the flush, bounded by a timeout;
:class:`~pipecat_summarizer._session.call_end.CallEnd`, a base).
A returning caller's memory loads in the background and is taken, without waiting, by
:meth:`CallRecorder.take_memory` once it is there.

Each recorder records under its own session key (``session_id``, unique), with the
application's ``call_id`` as the call row's label: a call id used twice (a room name, a
reconnect) never merges two sessions, their callers or their messages.
"""

from __future__ import annotations

import asyncio
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from loguru import logger

from pipecat_summarizer._compaction.clearing import is_cleared
from pipecat_summarizer._record.interrupted import archived_form
from pipecat_summarizer._session.call_end import CallEnd
from pipecat_summarizer._session.clock import ConversationClock
from pipecat_summarizer._session.resume import (
    Origin,
    Resumed,
    read_dropped,
    reference_json,
)
from pipecat_summarizer.params import MemoryParams
from pipecat_summarizer.store._writer import StoreWriter
from pipecat_summarizer.store.base import BASELINE_WAIT_S, MemoryStore, error_reason
from pipecat_summarizer.store.records import (
    ArchivedMessage,
    CallerMemory,
    CallRecord,
    CompactionRecord,
    FactEvent,
    Removal,
    check_id,
    earlier_calls_text,
    fact_changes,
    fact_snapshot,
    message_json,
    message_text,
    sha256_hex,
    tool_call_ids,
)

if TYPE_CHECKING:
    from pipecat_summarizer.events import ContextCompactedEvent


EARLIER_CALLS_HEADER = "From earlier calls with this caller:"


class CallRecorder(CallEnd):
    """One call's recorder.

    Args:
        store: The store (shared; the application closes it).
        call_id: The application's id of this call (a random one if ``None``). It may be
            reused (a room name, a reconnect): each recorder records under its own
            ``session_id``, with ``call_id`` as the label its call row carries.
        user_id: The caller's id, if known: needed to resume and to ``forget``. One id per
            person: callers who share one share their memory.
        options: How the call uses its store (``MemoryParams``).

    Raises:
        ValueError: If ``call_id`` or ``user_id`` cannot be stored (empty, longer than
            ``MAX_ID_CHARS``, or holding a NUL or a lone surrogate), naming the field.
    """

    def __init__(
        self,
        store: MemoryStore,
        call_id: str | None = None,
        user_id: str | None = None,
        options: MemoryParams | None = None,
    ):
        """Create the recorder (its writer starts with the call)."""
        if not isinstance(store, MemoryStore):
            raise TypeError(f"store must be a MemoryStore, got {type(store).__name__}")
        for name, value in (("call_id", call_id), ("user_id", user_id)):
            if value is not None:
                check_id(name, value)
        if options is not None and not isinstance(options, MemoryParams):
            raise TypeError(f"memory must be a MemoryParams, got {type(options).__name__}")
        self.store = store
        #: The application's id of the call (the label of its call row).
        self.call_id = call_id or uuid.uuid4().hex
        #: This session's key in the store: its records' ``call_id`` (unique per recorder).
        self.session_id = uuid.uuid4().hex if call_id else self.call_id
        self.user_id = user_id
        self.options = options or MemoryParams()
        self.writer = StoreWriter(store, self.options.writer, name=f"call {self.call_id}")
        #: Whether a message is an answer a barge-in cut off (the session's record sets it):
        #: archived with the mark in its ``message_json``.
        self.is_cut: Callable[[Any], bool] = lambda _message: False
        self.turns = 0
        # the call row's start: wall clock, compared with other calls' (resume window,
        # retention) and with forget tombstones, unlike the conversation's clock below
        self.started_at = time.time()
        #: The conversation's clock (:meth:`now`): what archived messages are dated by.
        self.clock = ConversationClock(self.options.conversation_started_at)
        self.resumed = False
        self._archived = 0  # next archive position
        self._pending_pos: dict[int, tuple[int, Any, int]] = {}  # id -> (position, message, turn)
        # when each message entered the context, by id: (the message, the conversation's
        # time); an archived message is dated by it, not by when it left (a transcript
        # replayed with its sessions' dates: a line of session 3 that leaves in session 5)
        self._entered: dict[int, tuple[Any, float]] = {}
        self._attempts = 0
        self._fact_seq = 0
        self._facts: dict[str, tuple[str, str, str]] = {}
        self._fact_version = -1
        self._restoring = False
        self._load: asyncio.Task | None = None
        self._baseline: asyncio.Future | None = None  # the caller's tombstone at the start
        self._load_deadline = 0.0
        self._load_done_at: float | None = None
        self._resumed: Resumed | None = None  # a dropped call to resume, until taken
        # the messages a resume restored, by id: (the message, where it is archived); they
        # were archived by the call they were said in, never again by this one
        self._restored: dict[int, tuple[Any, Origin]] = {}
        self._references = 0  # rows pointing at a restored message's archived row
        self._notice: Any = None  # the resume's notice (by identity): never archived
        # tool calls whose result was cleared (its original archived as "cleared"): their
        # placeholder is our text, archived unsearchable so recall never returns it
        self._cleared_calls: set[str] = set()
        self._dropped = False  # the application said this call dropped (mark_dropped)
        # the store's forget count for this caller when the call started: a forget during
        # the call (this process) stops what the call would write back about them
        self._forget_gen = store.forget_generation(user_id) if user_id is not None else 0
        self._ended = False

    # -- call start -----------------------------------------------------------------------

    def start(self) -> None:
        """At ``StartFrame``: start the writer, record the call (at once: nothing waits for
        the memory), and start loading a returning caller's memory in the background."""
        self.started_at = time.time()
        self.clock.start(self.started_at)  # on the running loop's clock from here
        self.writer.start()
        if self._forgotten():  # forgotten since the processor was made: nothing is written
            return
        self.writer.submit(self._call_row())
        if self.options.resume and self.user_id is not None and self._load is None:
            self._load_deadline = time.monotonic() + self.options.load_timeout_s
            self._load = asyncio.get_running_loop().create_task(self._load_memory())
            self._load.add_done_callback(self._loaded)

    def read_forget_baseline(self, recall: Any) -> None:
        """Read the caller's forget tombstone now, as the baseline ``recall``'s forget watch
        compares the tombstone with by value (``MemoryStore.forget_baseline``): a forget by
        another process whose clock is behind still counts. The memory loads after it, so
        anything it reads predates a forget the watch can tell."""
        read = getattr(getattr(recall, "archive", None), "forget_baseline", None)
        since = getattr(recall, "since", None)  # the key recall's watch passes
        if self.user_id is None or not callable(read) or not isinstance(since, float):
            return
        self._baseline = read(self.user_id, since)

    def _call_row(self) -> CallRecord:
        return CallRecord(
            self.session_id, self.user_id, self.started_at, resumed=self.resumed, label=self.call_id
        )

    def _loaded(self, _task: asyncio.Task) -> None:
        self._load_done_at = time.monotonic()

    async def _load_memory(self) -> tuple[CallerMemory, Resumed | None]:
        assert self.user_id is not None  # started only for a known caller
        if self._baseline is not None:  # its outcome is the watch's (a failure: a fallback)
            await asyncio.wait([self._baseline], timeout=BASELINE_WAIT_S)
        memory = await self.store.caller_memory(
            self.user_id, max_calls=self.options.max_earlier_calls
        )
        return memory, await self._dropped_call()

    async def _dropped_call(self) -> Resumed | None:
        """The caller's previous call, if it dropped within the window: what it had in view
        (``None``: none, or the read failed: the caller's memory still joins as today)."""
        window = self.options.resume_dropped_within_s
        if not window or self.user_id is None:
            return None
        try:
            return await read_dropped(
                self.store,
                self.user_id,
                session_id=self.session_id,
                started_at=self.started_at,
                window_s=window,
            )
        except Exception as e:  # the memory is still applied: only the resume is lost
            logger.warning(
                f"memory store (call {self.call_id}): reading the dropped call to resume "
                f"failed ({error_reason(e)}); the caller's memory joins without it"
            )
            return None

    @property
    def memory_pending(self) -> bool:
        """True while a returning caller's memory was started loading and is not yet taken
        or settled (failed, empty, too late): :meth:`take_memory` may still return it."""
        return self._load is not None

    def take_memory(self) -> tuple[list[dict], str | None] | None:
        """The caller's facts and "earlier calls" text, exactly once, when the load has
        finished with something; never waits.

        Returns ``None`` while it is still loading, and for good when there is nothing, the
        load failed (one WARNING with its reason) or it finished later than
        ``load_timeout_s`` after the start (one WARNING).
        """
        task = self._load
        if task is None:
            return None
        late = self._load_deadline < (
            self._load_done_at if task.done() and self._load_done_at else time.monotonic()
        )
        if not task.done() and not late:
            return None
        self._load = None
        if late:
            task.cancel()
            logger.warning(
                f"memory store (call {self.call_id}): caller memory not loaded within "
                f"{self.options.load_timeout_s}s of the start; the call goes on without it"
            )
            return None
        if task.cancelled():
            return None
        error = task.exception()
        if error is not None:  # a store that is down costs the memory, never the call
            logger.warning(
                f"memory store (call {self.call_id}): loading caller memory failed "
                f"({error_reason(error)}); the call goes on without it"
            )
            return None
        return self._apply(*task.result())

    def _forgotten(self) -> bool:
        """Whether the caller was forgotten (by this store object) since the call started."""
        return (
            self.user_id is not None
            and self.store.forget_generation(self.user_id) != self._forget_gen
        )

    def _apply(
        self, memory: CallerMemory, resumed: Resumed | None = None
    ) -> tuple[list[dict], str | None] | None:
        if self._forgotten():
            return None  # forgotten while it loaded
        text = None
        if memory.summaries and self.options.earlier_calls_tokens:
            body = earlier_calls_text(memory.summaries, self.options.earlier_calls_tokens - 10)
            text = f"{EARLIER_CALLS_HEADER}\n{body}" if body else None
        if resumed is not None:
            self._resumed = resumed
            logger.info(
                f"memory store (call {self.call_id}): dropped call {resumed.call_id} resumed "
                f"{round(resumed.gap_s)}s after its drop: {len(resumed.messages) - 1} messages, "
                f"{len(resumed.pending)} tool calls pending, {len(resumed.facts)} facts, "
                f"summary {'restored' if resumed.summary else 'none'}, "
                f"{resumed.skipped} skipped, {resumed.repairs} pairing repairs"
            )
        if text or resumed is not None:
            self.resumed = True
            self.writer.submit(self._call_row())  # the row's resumed flag (an upsert)
        if not memory.facts and not text:
            return None
        if resumed is None:  # a resume said what it restored
            logger.info(
                f"memory store (call {self.call_id}): returning caller, {memory.calls} earlier "
                f"calls, {len(memory.facts)} facts restored, earlier-calls summary "
                f"{'restored' if text else 'none'}"
            )
        return memory.facts, text

    def take_resumed(self) -> Resumed | None:
        """The dropped call this call resumes, exactly once, once the caller's memory was
        taken (:meth:`take_memory`); ``None`` when there is none (or not yet)."""
        resumed, self._resumed = self._resumed, None
        if resumed is not None:
            self._notice = resumed.messages[-1]  # restore() closes the messages with it
            for message, origin in zip(resumed.messages, resumed.origins, strict=False):
                if origin is not None:
                    self._restored[id(message)] = (message, origin)
        return resumed

    def mark_dropped(self) -> None:
        """This call dropped (the transport disconnected), whatever frame ends it: its row
        records ``ended_by="dropped"``, so the caller's next call within
        ``MemoryParams.resume_dropped_within_s`` resumes it."""
        self._dropped = True

    def restoring(self, on: bool) -> None:
        """Fact changes while ``on`` are recorded as ``restored``."""
        self._restoring = on

    def now(self) -> float:
        """The conversation's clock, what archived messages are dated by and recall's "how
        long ago" counts from: ``MemoryParams.conversation_started_at`` (or the wall clock
        at the call's start) plus the time since the call started, measured on the event
        loop's clock (:class:`~pipecat_summarizer._session.clock.ConversationClock`)."""
        return self.clock.now()

    # -- during the call ------------------------------------------------------------------

    def entered(self, messages: Sequence[Any]) -> None:
        """A turn's context: the messages not seen before (the newest, after the last one
        seen) entered the context now, by the conversation's clock. Reads back from the
        end to the first message already seen: the new ones only, however long the call."""
        entered = self._entered
        now: float | None = None
        for message in reversed(messages):
            seen = entered.get(id(message))
            if seen is not None and seen[0] is message:
                break
            if now is None:
                now = self.now()
            entered[id(message)] = (message, now)
        # ours that left unarchived (blocks, summaries) are let go; after a pass what is kept
        # is at most half the limit, so a pass comes once in as many turns' messages
        if len(entered) > 2 * (len(messages) + len(self._pending_pos)) + 64:
            here = {id(m) for m in messages}
            for key in [k for k in entered if k not in here and k not in self._pending_pos]:
                del entered[key]

    def _dated(self, message: Any, now: float, keep: bool) -> float:
        """When ``message`` entered the context (``now`` if it was never seen at a turn);
        forgotten here unless ``keep`` (an evicted message is archived again when summarized,
        with the same date)."""
        seen = self._entered.get(id(message))
        if seen is None or seen[0] is not message:
            return now
        if not keep:
            del self._entered[id(message)]
        return seen[1]

    def archive(
        self, messages: Iterable[Any], removed_by: Removal, compaction: int | None = None
    ) -> None:
        """Messages that left the context (oldest first).

        Each message is archived once: one a resume restored was archived by the call it was
        said in (at the end, a row without text points at it, for the next resume), and a
        resume's notice is not conversation. A cleared result's placeholder is archived
        without searchable text: recall returns the original (``"cleared"``), never ours.
        """
        if self._forgotten():
            return
        now = self.now()
        for message in messages:
            restored = self._restored.get(id(message))
            if (restored is not None and restored[0] is message) or message is self._notice:
                if restored is not None and removed_by == "in_context_at_end":
                    self._references += 1
                    position, self._archived = self._archived, self._archived + 1
                    self._submit(message, position, "", reference_json(restored[1]), now)
                continue
            kept = self._pending_pos.pop(id(message), None)
            evicted_turn = None
            if kept is not None and kept[1] is message:
                position, _, evicted_turn = kept
            else:
                position, self._archived = self._archived, self._archived + 1
            if removed_by == "evicted":  # the same message may be summarized later
                evicted_turn = self.turns
                self._pending_pos[id(message)] = (position, message, evicted_turn)
            calls = self._cleared_calls
            if removed_by == "cleared" and isinstance(message, dict):
                calls.add(str(message.get("tool_call_id")))
            ours = is_cleared(message) and str(message.get("tool_call_id")) in calls
            text = "" if ours and removed_by != "cleared" else message_text(message)
            form = message_json(archived_form(message, self.is_cut(message)))
            at = self._dated(message, now, keep=removed_by == "evicted")
            self._submit(message, position, text, form, at, removed_by, compaction, evicted_turn)

    def _submit(
        self,
        message: Any,
        position: int,
        text: str,
        form: str,
        at: float,
        removed_by: Removal = "in_context_at_end",
        compaction: int | None = None,
        evicted_turn: int | None = None,
    ) -> None:
        role = message.get("role", "unknown") if isinstance(message, dict) else "unknown"
        self.writer.submit(
            ArchivedMessage(
                call_id=self.session_id,
                position=position,
                role=str(role),
                content=text,
                message_json=form,
                tool_call_ids=tuple(tool_call_ids(message)),
                removed_by=removed_by,
                compaction=compaction,
                turn=self.turns,
                at=at,
                user_id=self.user_id,
                evicted_turn=evicted_turn,
            )
        )

    def applied(
        self,
        event: ContextCompactedEvent,
        summarized: list,
        summary_text: str,
        model: str | None,
    ) -> None:
        """A compaction was applied: its messages, then its record."""
        if self._forgotten():
            return
        self.archive(summarized, "summarized", event.compaction)
        self._attempts += 1
        self.writer.submit(
            CompactionRecord(
                call_id=self.session_id,
                attempt=self._attempts,
                compaction=event.compaction,
                ok=True,
                reason=event.reason,
                turn=self.turns,
                messages_before=event.messages_before,
                messages_after=event.messages_after,
                messages_summarized=event.messages_summarized,
                tokens_before=event.tokens_before,
                tokens_after=event.tokens_after,
                summary=summary_text,
                summary_sha256=sha256_hex(summary_text),
                latency_s=event.latency_s,
                model=model,
                user_id=self.user_id,
            )
        )

    def failed(self, reason: str, error: str, latency_s: float, model: str | None) -> None:
        """A summary attempt failed (the context was left untouched)."""
        if self._forgotten():
            return
        self._attempts += 1
        self.writer.submit(
            CompactionRecord(
                call_id=self.session_id,
                attempt=self._attempts,
                compaction=None,
                ok=False,
                reason=reason,
                turn=self.turns,
                latency_s=latency_s,
                model=model,
                error=error,
                user_id=self.user_id,
            )
        )

    def facts_changed(self, pinned: Any) -> None:
        """Record what changed in the pinned facts since the last call (cheap when nothing
        did: one version compare)."""
        version = pinned.version
        if version == self._fact_version or self._forgotten():
            return
        self._fact_version = version
        now = fact_snapshot(pinned.facts)
        changes = fact_changes(self._facts, now, restoring=self._restoring)
        self._facts = now
        # wall clock, not the conversation's: a caller's latest fact of a key is chosen
        # across calls (and processes) by it
        at = time.time()
        for key, action, text, kind, source, actor in changes:
            self._fact_seq += 1
            self.writer.submit(
                FactEvent(
                    call_id=self.session_id,
                    seq=self._fact_seq,
                    key=key,
                    action=action,
                    text=text,
                    fact_kind=kind,
                    source=source,
                    actor=actor,
                    turn=self.turns,
                    at=at,
                    user_id=self.user_id,
                )
            )


def __getattr__(name: str) -> object:
    """``MemoryOptions``, renamed ``MemoryParams`` in 0.2: one release, with a warning."""
    if name == "MemoryOptions":
        warnings.warn(
            "MemoryOptions is deprecated: use MemoryParams",
            DeprecationWarning,
            stacklevel=2,
        )
        return MemoryParams
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

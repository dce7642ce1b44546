"""The end of a recorded call, a base of ``CallRecorder``: the messages still in view
archived as ``in_context_at_end``, the call row's final state (how it ended, its summary and
facts, counts), then the writer's flush, bounded by ``MemoryParams.flush_timeout_s``. A call
whose caller was forgotten meanwhile writes nothing back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any, Protocol

from loguru import logger

from pipecat_summarizer._session.resume import MARKED_DROPPED
from pipecat_summarizer.params import MemoryParams
from pipecat_summarizer.store._writer import StoreWriter
from pipecat_summarizer.store.records import CallRecord, Removal


class _Recorder(Protocol):
    """What the end needs of the recorder (``CallRecorder`` has it)."""

    call_id: str
    session_id: str
    user_id: str | None
    options: MemoryParams
    writer: StoreWriter
    turns: int
    started_at: float
    resumed: bool
    _archived: int
    _references: int
    _pending_pos: dict[int, tuple[int, Any, int]]
    _load: asyncio.Task | None
    _dropped: bool
    _ended: bool

    def _forgotten(self) -> bool: ...

    def archive(
        self, messages: Iterable[Any], removed_by: Removal, compaction: int | None = None
    ) -> None: ...

    async def end(
        self: _Recorder,
        *,
        ended_by: str,
        summary: str | None,
        facts: Iterable[Any],
        messages_in_context: int,
        compactions: int,
        in_context: Iterable[Any] = (),
    ) -> bool: ...


class CallEnd:
    """The call's end (see the module docstring)."""

    _load: asyncio.Task | None  # the caller's memory still loading (cancelled at the end)
    _ended: bool

    async def end_call(self: _Recorder, ended_by: str, state: dict[str, Any]) -> None:
        """:meth:`end` for the processor: ``state`` is ``ContextSession.final_state()``; a
        failure is logged, never raised (the end of the call must reach the pipeline)."""
        try:
            await self.end(ended_by=ended_by, **state)
        except Exception as e:
            logger.error(f"recording the end of the call failed ({type(e).__name__})")

    async def end(
        self: _Recorder,
        *,
        ended_by: str,
        summary: str | None,
        facts: Iterable[Any],
        messages_in_context: int,
        compactions: int,
        in_context: Iterable[Any] = (),
    ) -> bool:
        """At ``EndFrame``/``CancelFrame``: record the final state and flush (bounded).

        Args:
            ended_by: ``end``, ``cancel`` or ``cleanup`` (recorded as ``dropped`` after
                :meth:`mark_dropped`).
            summary: The summary in the context at the end, if any.
            facts: The pinned facts at the end.
            messages_in_context: How many messages the context holds.
            compactions: Summaries applied in the call.
            in_context: The conversation messages still in the context (oldest first):
                archived as ``in_context_at_end``, so a returning caller's earlier calls are
                searchable in full, not only what left the context during the call.

        Returns:
            True if every record was written.
        """
        if self._ended:
            return True
        self._ended = True
        if self._load is not None:
            self._load.cancel()
            self._load = None
        if self._forgotten():
            # forgotten during the call: nothing of it is written back (what is queued goes)
            self.writer.discard()
            self._pending_pos.clear()
            return await self.writer.close(self.options.flush_timeout_s)
        # only at the end: during the call these messages are in view, never in the archive
        self.archive(in_context, "in_context_at_end")
        self.writer.submit(
            CallRecord(
                call_id=self.session_id,
                user_id=self.user_id,
                started_at=self.started_at,
                ended_at=time.time(),
                ended_by=MARKED_DROPPED if self._dropped else ended_by,
                summary=summary,
                facts=tuple(
                    {"key": f.key, "text": f.text, "kind": f.kind, "source": f.source}
                    for f in facts
                ),
                messages_in_context=messages_in_context,
                messages_archived=self._archived - self._references,
                compactions=compactions,
                turns=self.turns,
                resumed=self.resumed,
                label=self.call_id,
            )
        )
        self._pending_pos.clear()
        return await self.writer.close(self.options.flush_timeout_s)

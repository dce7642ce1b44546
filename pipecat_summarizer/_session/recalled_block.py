"""The recalled block's place in the shared context, a base of ``SharedContext``.

Last turn's block is taken out before anything measures or plans (it is replaced each turn,
never accumulated, summarized or archived); a request over the ceiling loses it before any
conversation is evicted; the ceiling says how much room it has; this turn's block is written
in. Synchronous, through the shared context's one write path.
"""

from __future__ import annotations

from typing import Any, Protocol

from loguru import logger
from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer._compaction.ceiling import RequestCeiling
from pipecat_summarizer._compaction.measure import Measurement
from pipecat_summarizer._recall.step import RecallStep
from pipecat_summarizer.params import ContextSummarizerParams


class _Host(Protocol):
    """What the block needs of the shared context (``SharedContext`` has it)."""

    recall: RecallStep | None
    context: LLMContext
    params: ContextSummarizerParams
    ceiling: RequestCeiling

    def reclaim_own(self, placing: Any = None) -> None: ...

    def write(self, messages: list, *, removed: Any = None, inserted: Any = None) -> None: ...

    def measure(self) -> Measurement: ...

    def request_overhead_tokens(self) -> int: ...

    @property
    def recalled(self) -> dict | None: ...


class RecalledBlock:
    """Where the recalled block goes (see the module docstring)."""

    def clear_recalled(self: _Host) -> None:
        """Take last turn's recalled message out before anything measures or plans: it is
        replaced each turn, never accumulated, summarized or archived."""
        recall = self.recall
        if recall is None:
            return
        try:
            self.reclaim_own()  # a copy of last turn's block is still last turn's block
            kept = recall.without_message(self.context.messages)
            if kept is not None:
                # still known as ours while written: never taken for the application's removal
                self.write(kept, removed=recall.message)
        except Exception as e:  # recall never costs the turn
            logger.error(f"{self}: recall clear failed ({type(e).__name__})")
        finally:
            recall.message = None

    def recall_gives_way(self: _Host) -> bool:
        """Take the recalled block out (a request over the ceiling loses it before any
        conversation is evicted). Returns True if it was in the context."""
        recall = self.recall
        if recall is None or recall.message is None:
            return False
        kept = recall.without_message(self.context.messages)
        if kept is not None:
            self.write(kept, removed=recall.message)
        recall.message = None
        return kept is not None

    def recall_room(self: _Host) -> int | None:
        """What the ceiling leaves for the recalled block (``None``: no ceiling)."""
        if self.params.ceiling is None:
            return None
        total = self.measure().total_tokens
        return self.ceiling.room(total, self.request_overhead_tokens())

    def place_recalled(self: _Host, messages: list | None) -> None:
        """Write the context with this turn's recalled message placed (``None``: none)."""
        if messages is not None:
            self.write(messages, inserted=self.recalled)

"""How the conversation record changes: facts pinned and unpinned (by the application, the
conversation, evicted messages), facts folded over the pinned block's budget, and a returning
caller's memory loaded (their stored facts restored under the application's authority, their
earlier calls' summary placed where the summary goes).

:class:`RecordChanges` is a base of
:class:`~pipecat_summarizer._record.record.ConversationRecord`: its methods are the record's,
kept here by topic; the record's state, its reading and its rendering are in
:mod:`pipecat_summarizer._record.record`. What these methods need of the record is
:class:`_Record`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from loguru import logger
from pipecat.utils.context.llm_context_summarization import LLMContextSummaryConfig

from pipecat_summarizer._compaction.plan import head_length
from pipecat_summarizer._record.interrupted import Interruptions
from pipecat_summarizer._record.pinned import (
    AUTHORITATIVE,
    CLAIM_SUFFIX,
    Fact,
    PinnedFacts,
    key_id,
)
from pipecat_summarizer.events import short_sha256
from pipecat_summarizer.params import PinningParams
from pipecat_summarizer.summarizers.extractive import pinnable_facts

Messages = list[Any]


def joined_earlier(earlier: str, summary: str) -> str:
    """A summary record that starts with the caller's earlier calls (older) and goes on with
    this call's ``summary``: the next summary rolls both."""
    return f"{earlier}\n\n{summary}" if summary.strip() else earlier


class _Record(Protocol):
    """What the changes read and call of the record."""

    pinning: PinningParams
    facts: PinnedFacts
    folded: list[Fact]
    summary_config: LLMContextSummaryConfig
    summary_text: str | None
    _earlier_waiting: str | None
    _app_here: set[str]
    _log_content: bool
    interruptions: Interruptions

    def summary_in(self, messages: Sequence[Any]) -> dict | None: ...

    def place(self, messages: Messages) -> Messages: ...

    def render_summary(self, text: str, config: LLMContextSummaryConfig) -> dict: ...

    def render(self, messages: Messages, *, in_flight: bool = True) -> Messages | None: ...

    def refresh_summary(self, messages: Messages, *, in_flight: bool) -> Messages | None: ...

    def fold_over_budget(self) -> bool: ...

    def enforce_budget(self, messages: Messages, *, in_flight: bool) -> Messages | None: ...

    def _join_earlier(self, messages: Messages, *, in_flight: bool) -> Messages | None: ...

    def _restorable(self, key: str, source: str) -> bool: ...

    def _adopt(self, message: dict, text: str) -> None: ...

    def _render_after(self, messages: Messages, new: Messages | None) -> Messages | None: ...


class RecordChanges:
    """The conversation record's changes (see the module's docstring)."""

    _earlier_waiting: str | None
    _app_here: set[str]

    def fold_over_budget(self: _Record) -> bool:
        """Remove the least recent facts until the block fits its budget.

        Facts from a summary or from evicted messages are still in the summary record (or in
        the pending queue); the others only lived in the block, so they are folded into the
        next summary text, loudly (a WARNING with hashes, never the text).

        Returns:
            True if any fact left the block.
        """
        removed = self.facts.enforce_budget()
        folded = [f for f in removed if f.source not in ("summary", "evicted")]
        if len(removed) > len(folded):
            logger.debug(f"{self}: {len(removed) - len(folded)} summary facts left the block")
        if folded:
            logger.warning(
                f"{self}: pinned facts over their {self.facts.budget_tokens}-token budget; "
                f"{len(folded)} least recent moved into the summary (sha256 "
                + ", ".join(short_sha256(f.text) for f in folded)
                + ")"
            )
            if self._log_content:
                logger.debug(f"{self}: moved facts: " + "; ".join(f.text for f in folded))
            self.folded.extend(folded)
        return bool(removed)

    def enforce_budget(self: _Record, messages: Messages, *, in_flight: bool) -> Messages | None:
        """Fold over budget and re-render the summary. Deferred while a summary is in
        flight: folding then would hide the facts until it lands."""
        if in_flight or not self.fold_over_budget():
            return None
        return self.refresh_summary(messages, in_flight=in_flight)

    def pin(
        self: _Record,
        messages: Messages,
        key: str,
        text: str,
        *,
        kind: str = "fact",
        source: str = "app",
        in_flight: bool = False,
    ) -> Messages | None:
        """Pin a fact (see :meth:`ContextSummarizer.pin`) and render.

        The application's fact wins its key: a conversation fact (``"llm"``, ``"summary"``)
        on a key the application holds is kept beside it as a claim, quoted user-role data
        (see :meth:`PinnedFacts.pin`). A key the application pins here is its own for the
        rest of the call: :meth:`load` never restores a stored fact over it.

        Raises:
            ValueError: If the key or text is empty, the kind or source unknown, or a
                conversation fact reads as an instruction.
        """
        if kind not in ("fact", "constraint"):
            raise ValueError("kind must be 'fact' or 'constraint'")
        if source not in ("app", "llm", "summary"):
            raise ValueError("source must be 'app', 'llm' or 'summary'")
        changed = self.facts.pin(key, text, kind=kind, source=source)  # type: ignore[arg-type]
        if source == "app":
            self._app_here.add(key_id(key))
        if not changed:
            return None
        return self._render_after(messages, self.enforce_budget(messages, in_flight=in_flight))

    def unpin(
        self: _Record, messages: Messages, key: str, *, in_flight: bool = False
    ) -> tuple[bool, Messages | None]:
        """Remove the fact under ``key`` (the application's unpin) and render; the summary
        shows it again. :meth:`load` does not restore a stored fact under ``key`` after it.

        Returns:
            Whether a fact was removed, and the new messages (or ``None``).
        """
        self._app_here.add(key_id(key))
        if not self.facts.unpin(key):
            return False, None
        new = self.render(messages)
        current = messages if new is None else new
        refreshed = self.refresh_summary(current, in_flight=in_flight)
        return True, new if refreshed is None else refreshed

    def pin_evicted(
        self: _Record, messages: Messages, evicted: Sequence[Any], *, in_flight: bool
    ) -> Messages | None:
        """Pin the salient facts of ``evicted`` (they left the context unsummarized); an
        answer a barge-in cut off is never read: the caller heard only part of it."""
        heard = [m for m in evicted if not self.interruptions.is_cut(m)]
        found = pinnable_facts(heard, max_tokens=self.facts.budget_tokens)
        if not any(found.values()) or not self.facts.merge_summary(found, source="evicted"):
            return None
        return self._render_after(messages, self.enforce_budget(messages, in_flight=in_flight))

    def forget_evicted(self: _Record, messages: Messages) -> Messages | None:
        """Unpin the facts taken from evicted messages: their conversation was replaced.

        Returns:
            The new messages, or ``None`` when no such fact was pinned.
        """
        keys = [f.key for f in self.facts.facts if f.source == "evicted"]
        for key in keys:
            self.facts.unpin(key)
        return self.render(messages) if keys else None

    def load(
        self: _Record,
        messages: Messages,
        facts: Iterable[dict],
        earlier: str | None,
        *,
        in_flight: bool,
    ) -> Messages | None:
        """Give a returning caller their memory: pin their stored facts, and place the
        "earlier calls" text where the summary goes (user-role data, like any summary) so
        this call's summaries build on it. A malformed stored fact is skipped.

        It may run on any turn (the memory joins the call when it arrives), so the stored
        facts are older than everything pinned in this call. The application's authority
        wins, then the newer:

        - a key the application pinned (or unpinned) in this call keeps the application's
          decision: no stored fact under it, nor its claim (:func:`claim_key`), is
          restored;
        - a stored application fact takes its key from a conversation fact of this call,
          which is kept beside it as the conversation's claim (quoted user-role data);
        - a stored conversation fact (``"llm"``, ``"summary"``, ``"evicted"``) is not
          restored over a fact this call already holds under its key, and on a key the
          application holds it is restored only as a claim beside the application's fact.

        Restored facts keep their source: only application facts are rendered with
        authority, in the developer/system message.
        """
        live, restored = [f.key for f in self.facts.facts], False
        for f in facts:
            try:
                key, source = f["key"], f["source"]
                if not self._restorable(key, source):
                    continue
                kind = f.get("kind", "fact")
                restored |= self.facts.pin(key, f["text"], kind=kind, source=source)
            except (KeyError, ValueError, TypeError, AttributeError):
                continue
        if restored:  # this call's facts stay the newest: the last to leave over budget
            self.facts.touch(live)
        new = self._render_after(messages, self.enforce_budget(messages, in_flight=in_flight))
        current = messages if new is None else new
        if not earlier:
            return new
        # never dropped: while a summary is in flight it waits (the summary's record takes
        # it in when it lands); after a summary it joins that summary's record
        self._earlier_waiting = earlier
        joined = self._join_earlier(current, in_flight=in_flight)
        return new if joined is None else joined

    def _join_earlier(self: _Record, messages: Messages, *, in_flight: bool) -> Messages | None:
        """The earlier-calls text waiting, put where the summary goes: the summary message
        (this call's summary kept after it) or, with no summary in the context, its own
        summary message after the head. ``None``: nothing waits, or a summary is in flight
        (its message must not change)."""
        earlier = self._earlier_waiting
        if earlier is None or in_flight:
            return None
        self._earlier_waiting = None
        present = self.summary_in(messages)
        if present is None:
            message = self.render_summary(earlier, self.summary_config)
            at = head_length(messages)
            self._adopt(message, earlier)
            return self.place([*messages[:at], message, *messages[at:]])
        text = joined_earlier(earlier, self.summary_text or "")
        message = self.render_summary(text, self.summary_config)
        at = next(i for i, m in enumerate(messages) if m is present)
        self._adopt(message, text)
        return self.place([*messages[:at], message, *messages[at + 1 :]])

    def _restorable(self: _Record, key: str, source: str) -> bool:
        """Whether a stored fact under ``key`` from ``source`` may be restored (see
        :meth:`load`)."""
        if not isinstance(key, str):
            return False
        decided = self._app_here
        if key_id(key) in decided or key_id(key.removesuffix(CLAIM_SUFFIX)) in decided:
            return False  # the application decided this key in this call: newer
        if source in AUTHORITATIVE:
            return True  # the application's authority wins over the conversation's
        return self.facts.get(key) is None  # this call's own conversation fact is newer


__all__ = ["RecordChanges", "joined_earlier"]

"""The conversation record: what the model sees besides the verbatim turns.

:class:`ConversationRecord` owns the pinned facts (by source), the rolling summary (its text,
its message and the template it was rendered with) and the facts folded out of the pinned
block over budget, and renders them as the messages of the context's head:

- the application's facts: one ``pinning.app_role`` (developer/system) message inside the
  system head, the only text rendered with authority;
- the summary: a ``summary_role`` message right after the head. A user-role summary also
  carries the conversation's facts (from summaries, the ``remember_fact`` tool, evicted
  messages): those its record does not already state are written into its FACTS and
  CONSTRAINTS, so they cost no message and no header of their own (the application's facts,
  shown in the head, are left out of it: not paid for twice; the full record rolls into the
  next summary);
- the conversation's facts that no summary message carries (no summary yet, an
  ``assistant``-role summary, or facts pinned while a summary is in flight, when the summary
  message must not change): one quoted user-role "noted" message right after the head,
  before the summary, until the summary message can take them in.

Pure: no asyncio, no frames. Every method that may change the context takes the current
messages and returns the new list (with the noted message placed after the head), or
``None`` when the messages stay as they are. Unchanged messages are the SAME dict objects
from one call to the next: the processor's splice and the prompt cache rely on identity.

While a summary is in flight (``in_flight=True``) the summary message must not change, since
the splice finds it by identity; facts over budget then wait for the summary to land.

The store plugs in here: :attr:`ConversationRecord.on_facts_changed` sees every fact change,
:meth:`ConversationRecord.load` gives a returning caller their facts and earlier-calls
summary; recall reads :meth:`ConversationRecord.texts_in_view`. How the record changes
(pinning, unpinning, evicted facts, the budget, loading) is in
:mod:`pipecat_summarizer._record.changes`, a base of the class; the summary message's text
(the template, the facts and corrections written into it) in
:mod:`pipecat_summarizer._record.summary_text`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any

from pipecat.utils.context.llm_context_summarization import LLMContextSummaryConfig

from pipecat_summarizer._compaction.plan import head_length
from pipecat_summarizer._record.changes import RecordChanges, joined_earlier
from pipecat_summarizer._record.corrections import Correction, find_correction, has_cue
from pipecat_summarizer._record.interrupted import Interruptions
from pipecat_summarizer._record.pinned import (
    AUTHORITATIVE,
    NOTED_HEADER,
    Fact,
    PinnedFacts,
)
from pipecat_summarizer._record.pinned import _quote as quote_fact
from pipecat_summarizer._record.sections import (
    parse_sections,
    record_items,
    without_items,
)
from pipecat_summarizer._record.summary_text import (
    SummaryDraft,
    render_template,
    summary_items,
    with_corrections,
    with_facts,
)
from pipecat_summarizer._text.messages import spoken_text
from pipecat_summarizer._text.tokens import estimate_text_tokens
from pipecat_summarizer._text.vocabulary import SPEAKER_RE, normalize_fact
from pipecat_summarizer.params import PinningParams

Messages = list[Any]


class ConversationRecord(RecordChanges):
    """Pinned facts, the rolling summary and folded facts, rendered as head messages.

    Args:
        summary_config: Pipecat's summary config (its template renders the summary message
            until a manual override's summary replaces it).
        pinning: Budget, automatic sources and the application facts' role.
        summary_role: Role of the summary message (``"user"`` or ``"assistant"``).
        count_text: Tokens of a bare string (the processor's counter).
        log_content: Also log fact text, at DEBUG only.
        name: How log lines name the owner.
    """

    def __init__(
        self,
        summary_config: LLMContextSummaryConfig,
        pinning: PinningParams | None = None,
        *,
        summary_role: str = "user",
        count_text: Callable[[str], int] = estimate_text_tokens,
        log_content: bool = False,
        name: str = "memory",
    ):
        """Initialize an empty record."""
        self.pinning = pinning or PinningParams()
        self.facts = PinnedFacts(self.pinning.budget_tokens)
        self.summary_role = summary_role
        self.summary_config = summary_config  # the template of the current summary
        self.summary_message: dict | None = None
        self.summary_text: str | None = None
        self.summary_tokens = 0
        self.app_message: dict | None = None  # the application's facts, in the head
        self.noted_message: dict | None = None  # conversation facts the summary lacks
        # normalized items the summary message states (its noted facts are not repeated)
        self._summary_items: frozenset[str] = frozenset()
        self.folded: list[Fact] = []  # left the block over budget, for the next summary
        # a returning caller's earlier-calls text that arrived while a summary was in flight
        # (it joins the summary message when that may change: it is never dropped)
        self._earlier_waiting: str | None = None
        # keys the application pinned or unpinned in this call: newer than any stored fact
        self._app_here: set[str] = set()
        #: Called with the facts whenever :meth:`render` sees them changed (the store's hook).
        self.on_facts_changed: Callable[[PinnedFacts], None] | None = None
        self._rendered_version = -1
        self._rendered_summary: tuple[dict | None, bool] = (None, False)  # message, in place
        self._count_text = count_text
        self._log_content = log_content
        self._name = name
        #: The latest corrections (old detail -> corrected one), applied to every summary.
        self.corrections: list[Correction] = []
        self._summary_stale = False  # a correction waits for the summary message to change
        #: The answers a barge-in cut off: never read for corrections, never pinned.
        self.interruptions = Interruptions()

    def __str__(self) -> str:
        """The owner's name, for log lines."""
        return self._name

    # -- reading --------------------------------------------------------------------------

    def summary_in(self, messages: Sequence[Any]) -> dict | None:
        """The summary message if it is in ``messages`` (by identity), else ``None``."""
        summary = self.summary_message
        if summary is not None and any(m is summary for m in messages):
            return summary
        return None

    def place(self, messages: Messages) -> Messages:
        """``messages`` with the noted message right after the head (plan functions work on
        the context without it: see :meth:`view`)."""
        noted = self.noted_message
        if noted is None:
            return messages
        rest = [m for m in messages if m is not noted]
        head = head_length(rest)
        return [*rest[:head], noted, *rest[head:]]

    def view(self, messages: Messages) -> Messages:
        """``messages`` without the noted message, which is neither head nor conversation
        (never summarized, never evicted)."""
        noted = self.noted_message
        return messages if noted is None else [m for m in messages if m is not noted]

    def texts_in_view(self) -> list[str]:
        """The summary and fact texts the model already sees (recall skips what they say)."""
        return [self.summary_text or "", *(f.text for f in self.facts.facts)]

    @property
    def carries_facts(self) -> bool:
        """True when the summary message carries the conversation's facts (a user-role
        summary: the same role the noted message has)."""
        return self.summary_role == "user"

    def render_summary(self, text: str, config: LLMContextSummaryConfig) -> dict:
        """The summary message for ``text``.

        The application's facts (in the head) are left out; so are the conversation's facts
        when they go in the noted message (an ``assistant``-role summary). A user-role
        summary carries the conversation's facts instead: those its record does not state
        are added to its FACTS and CONSTRAINTS (each fact is one line: it cannot pass for a
        heading).
        """
        facts = self.facts.facts
        if self.carries_facts:
            app = [f.text for f in facts if f.source in AUTHORITATIVE]
            if self.pinning.from_summaries and app:
                text = without_items(text, app, normalize_fact, empty="")
            noted = [f for f in facts if f.source not in AUTHORITATIVE]
            text = with_facts(text, noted) if noted else text
        elif self.pinning.from_summaries and len(self.facts):
            text = without_items(text, (f.text for f in facts), normalize_fact)
        content = render_template(config.summary_message_template, text)
        return {"role": self.summary_role, "content": content}

    # -- rendering ------------------------------------------------------------------------

    def render(self, messages: Messages, *, in_flight: bool = True) -> Messages | None:
        """Put the fact messages in place, rewritten only on change.

        Authority follows the source: the application's facts go in an ``app_role`` message
        inside the system head; facts from the conversation in the user-role summary
        message, as part of its record, or, for those it does not carry, in one user-role
        message right after the head (before the summary), as quoted data.

        Args:
            messages: The context's messages.
            in_flight: A summary is running: its message must not change, so facts it lacks
                wait in the noted message. ``True`` (the safe default) never rewrites the
                summary message.

        Returns:
            The new messages, or ``None`` when the fact messages are in place and current
            (the common case, cheap: identity checks and a version compare).
        """
        joined = self._join_earlier(messages, in_flight=in_flight)
        if joined is not None:
            again = self.render(joined, in_flight=in_flight)
            return joined if again is None else again
        if self._summary_stale and not in_flight:
            corrected = self._correct_summary(messages)
            if corrected is not None:
                again = self.render(corrected, in_flight=in_flight)
                return corrected if again is None else again
        new = self._render_blocks(messages)
        current = messages if new is None else new
        if in_flight or self.noted_message is None or self.summary_in(current) is None:
            return new
        if not self.carries_facts:
            return new
        # facts the summary message lacks move into it: one message, one header
        refreshed = self.refresh_summary(current, in_flight=False)
        if refreshed is None:
            return new
        again = self._render_blocks(refreshed)
        return refreshed if again is None else again

    def _noted_facts(self, summary_present: bool) -> list[Fact]:
        """The conversation's facts the noted message must show: all of them, or those the
        summary message in the context lacks."""
        facts = [f for f in self.facts.facts if f.source not in AUTHORITATIVE]
        if not self.carries_facts or not summary_present:
            return facts
        return [f for f in facts if normalize_fact(f.text) not in self._summary_items]

    def _render_blocks(self, messages: Messages) -> Messages | None:
        """The application's block and the noted message in place (see :meth:`render`)."""
        app, noted = self.app_message, self.noted_message
        if app is None and noted is None and not len(self.facts):
            return None  # nothing pinned
        head = head_length(messages)
        at = next((i for i in range(head) if messages[i] is app), None)
        app_in_place = at is not None or app is None
        noted_in_place = noted is None or (head < len(messages) and messages[head] is noted)
        # the summary message (and whether it is in the context) decides what it carries
        summary = (self.summary_message, self.summary_in(messages) is not None)
        current = (
            self._rendered_version == self.facts.version
            and self._rendered_summary[0] is summary[0]
            and self._rendered_summary[1] == summary[1]
        )
        if app_in_place and noted_in_place and current:
            return None
        moved = not (app_in_place and noted_in_place)
        if (moved or self._rendered_version != self.facts.version) and self.on_facts_changed:
            self.on_facts_changed(self.facts)
        self._rendered_version = self.facts.version
        self._rendered_summary = summary
        new, changed = list(messages), not (app_in_place and noted_in_place)
        app_text = self.facts.render_app()
        if app_text is None:
            if at is not None:
                del new[at]
                changed = True
            self.app_message = None
        elif app is None or at is None or app["content"] != app_text:
            block = {"role": self.pinning.app_role, "content": app_text}
            if at is None:
                new.insert(head, block)
            else:
                new[at] = block
            self.app_message, changed = block, True
        lacking = self._noted_facts(summary[1])
        noted_text = (
            "\n".join([NOTED_HEADER, *(f"- {quote_fact(f.text)}" for f in lacking)])
            if lacking
            else None
        )
        if noted_text is None:
            self.noted_message = None
        elif noted is None or noted["content"] != noted_text:
            self.noted_message = {"role": "user", "content": noted_text}
        if noted is not None and self.noted_message is not noted:
            new, changed = [m for m in new if m is not noted], True
        elif self.noted_message is not None and noted is None:
            changed = True
        return self.place(new) if changed else None

    def refresh_summary(self, messages: Messages, *, in_flight: bool) -> Messages | None:
        """Re-render the summary message after the pinned facts changed.

        Facts in the block are left out of the summary message; when they leave the block
        (over budget, unpinned) they show in the summary again, and folded facts (which only
        lived in the block) are written into the record. Never while a summary is in
        flight: its splice checks the current summary message by identity.
        """
        if in_flight:
            return None
        present = self.summary_in(messages) is not None
        if not present and not self.folded:
            return None
        text = (self.summary_text or "") if present else ""
        if self.folded:
            text, self.folded = with_facts(text, self.folded), []
        message = self.render_summary(text, self.summary_config)
        if present and message["content"] == self.summary_message["content"]:  # type: ignore[index]
            return None
        if present:
            at = next(i for i, m in enumerate(messages) if m is self.summary_message)
            new = [*messages[:at], message, *messages[at + 1 :]]
        else:
            at = head_length(messages)
            new = [*messages[:at], message, *messages[at:]]
        self._adopt(message, text)
        return self.place(new)

    def own_messages(self) -> list[dict]:
        """The messages this record placed (the application's facts, the noted facts, the
        summary), those that exist."""
        own = (self.app_message, self.noted_message, self.summary_message)
        return [m for m in own if m is not None]

    def reclaim(self, old: dict, copy: dict) -> None:
        """``copy`` (equal to ``old``, one of :meth:`own_messages`) is that message now: the
        application put a copy of the context back (a deep-copied ``LLMMessagesUpdateFrame``,
        a restored state). Without this the copy would stay as if it were conversation: an
        unpinned application fact kept with authority, the noted facts twice."""
        if old is self.app_message:
            self.app_message = copy
        elif old is self.noted_message:
            self.noted_message = copy
        elif old is self.summary_message:
            self.summary_message = copy
            if self._rendered_summary[0] is old:
                self._rendered_summary = (copy, self._rendered_summary[1])

    # -- the summary's life ------------------------------------------------------------

    def absorb(
        self,
        text: str,
        sections: dict[str, list[str]] | None,
        config: LLMContextSummaryConfig,
    ) -> SummaryDraft:
        """Take a summary result in: pin its facts, write folded facts into it, render its
        message. The record adopts it only at :meth:`commit`, once it is spliced.

        Args:
            text: The summary text.
            sections: Its parsed sections if the backend returned them (else parsed here).
            config: The summary config of the request (its template renders the message).
        """
        if self.pinning.from_summaries:
            parsed = sections if sections is not None else parse_sections(text)
            if self.facts.merge_summary(parsed):
                self.fold_over_budget()  # the summary message is rendered right below
        if self.folded:  # facts that left the pinned block belong in the record
            text, self.folded = with_facts(text, self.folded), []
        if self._earlier_waiting is not None:  # arrived while this summary ran
            text, self._earlier_waiting = joined_earlier(self._earlier_waiting, text), None
        text = with_corrections(text, self.corrections)  # an old detail rolled on: replaced
        return SummaryDraft(self.render_summary(text, config), text, config)

    # -- corrections ----------------------------------------------------------------------

    def correct(
        self, messages: Messages, fresh: Sequence[Any], skip: Sequence[Any], *, in_flight: bool
    ) -> Messages | None:
        """Apply the corrections the caller or the assistant made in ``fresh`` (new messages,
        oldest first; the record's own messages, answers a barge-in cut off and those in
        ``skip`` (the recalled block, a resume's notice) are not read): the
        conversation's pinned fact a correction names keeps its key and takes the corrected
        text; the summary's item is rewritten (once the summary message may change: never
        while a summary is in flight; the summary that lands takes it too).

        Returns:
            The new messages, or ``None`` when nothing was corrected or rendered.
        """
        found = False
        ignored = {id(x) for x in (*self.own_messages(), *skip, *self.interruptions.cut)}
        for message in fresh:
            if (
                not isinstance(message, dict)
                or message.get("role") not in ("user", "assistant")
                or id(message) in ignored
            ):
                continue
            text = spoken_text(message)
            if not has_cue(text):
                continue  # most messages: no detail and no pinned fact is read
            facts = [f for f in self.facts.facts if f.source not in AUTHORITATIVE]
            details = chain(  # read only when the text has a cue and a value
                ((None, item) for item in summary_items(self.summary_text or "")),
                ((f.key, f.text) for f in facts),
            )
            correction = find_correction(text, details)
            if correction is None:
                continue
            found = True
            self.corrections = [*self.corrections[-15:], correction]
            target = normalize_fact(correction.target)
            fixed = SPEAKER_RE.sub("", correction.text)
            for fact in facts:  # the fact named, and any fact that says the same
                if fact.key == correction.key or normalize_fact(fact.text) == target:
                    self.facts.correct(fact.key, fixed)
        if not found:
            return None
        self._summary_stale = True
        return self.render(messages, in_flight=in_flight)

    def _correct_summary(self, messages: Messages) -> Messages | None:
        """The summary message with the corrections applied, if it states an old detail."""
        self._summary_stale = False
        present = self.summary_in(messages)
        if present is None or not self.summary_text:
            return None
        text = with_corrections(self.summary_text, self.corrections)
        if text == self.summary_text:
            return None
        message = self.render_summary(text, self.summary_config)
        at = next(i for i, m in enumerate(messages) if m is present)
        self._adopt(message, text)
        return self.place([*messages[:at], message, *messages[at + 1 :]])

    def commit(self, draft: SummaryDraft) -> None:
        """Adopt a summary whose message is now in the context."""
        self._adopt(draft.message, draft.text)
        self.summary_config = draft.config

    def _adopt(self, message: dict, text: str) -> None:
        self.summary_message, self.summary_text = message, text
        self.summary_tokens = self._count_text(text)
        content = message.get("content")
        items = record_items(content) if isinstance(content, str) else []
        self._summary_items = frozenset(normalize_fact(i) for i in items)

    def _render_after(self, messages: Messages, new: Messages | None) -> Messages | None:
        current = messages if new is None else new
        rendered = self.render(current)
        return new if rendered is None else rendered


def __getattr__(name: str) -> object:
    """``ConversationMemory``, renamed ``ConversationRecord`` in 0.2 ("memory" is the durable
    store across calls): one release, with a warning."""
    if name == "ConversationMemory":
        warnings.warn(
            "ConversationMemory is deprecated: use ConversationRecord",
            DeprecationWarning,
            stacklevel=2,
        )
        return ConversationRecord
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Recall: the pure rules that bring a detail that left the context back when it is needed.

Every message that leaves the context is archived verbatim by the store
(:mod:`pipecat_summarizer.store`). On each user turn the latest user message (and the
assistant's last question, if short) is the query; the archive's best matches that are not
already in view (verbatim in the context, in the summary, or pinned) are rendered in ONE
bounded user-role message, "recalled from earlier", placed just before the latest user
message. The next turn replaces it (it is never accumulated), it is never summarized or
archived, and it is quoted data: never a system or developer message.

The rules live in three modules, by what they decide: :mod:`~pipecat_summarizer._recall.query`
(the query and which of its words count), :mod:`~pipecat_summarizer._recall.select` (which
hits are worth recalling) and :mod:`~pipecat_summarizer._recall.render` (the recalled message
and its place). This module gathers their names in one place;
:mod:`pipecat_summarizer._recall.step` is the asyncio step that asks the archive within the
turn's latency budget. The words, stems and stop words are the text vocabulary's
(:mod:`pipecat_summarizer._text.vocabulary`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipecat_summarizer._recall.query import (
    common_terms,
    focus,
    instruction_names,
    is_when,
    last_question,
    latest_user_index,
    names_in,
    rare_terms,
    recall_query,
    specific_terms,
    topic_terms,
    without_names,
)
from pipecat_summarizer._recall.render import (
    RECALL_HEADER,
    SPEAKERS,
    is_recall_message,
    place_recall,
    recall_message,
    render_recall,
    snippet_line,
    snippet_when,
    speaker,
    window,
    without_recall,
)
from pipecat_summarizer._recall.select import (
    Snippet,
    View,
    in_view,
    make_view,
    relevance,
    select_hits,
    still_relevant,
)
from pipecat_summarizer._validation import validate_numeric_fields


@dataclass
class RecallParams:
    """How recall works (``ContextSummarizer(..., recall=RecallParams())``; needs a store).

    Parameters:
        enabled: Recall on each user turn. ``False`` keeps the ``recall_memory`` tool only.
        max_tokens: Budget of the recalled message (header and quotes included).
        max_snippets: Most snippets in it.
        min_score: Least relevance for a snippet: the share of the query's topic words it
            contains (0..1, the same scale on every backend; the backend's own rank only
            orders the hits). A snippet must also contain two of them when the query has
            three or more: one shared word ("open") is not a strong match.
        latency_budget_s: How long the turn waits for the archive's answer. Later, the turn
            goes without recall, and the late answer may serve the next turn if it is still
            relevant to that turn's query.
        search_limit: Hits asked of the archive before filtering.
        max_snippet_tokens: Longest single snippet; a longer message is cut to a window around
            the query's words.
        max_question_words: The assistant's last question joins the query when it has at
            most this many words (``"Which hotel was that?"``); 0 never.
        tool_timeout_s: How long a ``recall_memory`` tool call waits for the archive.
        fill: Fill the block, after the strong matches, with the archive's next hits that
            share at least one of the query's topic words (in the archive's ranking), when
            there is a strong match. ``False``: strong matches only.
        semantic: Semantic recall as well (``SemanticRecall()`` from
            :mod:`pipecat_summarizer._recall.semantic`, the ``semantic`` extra): archived messages
            that say the same in other words, fused with the lexical hits. ``None``: lexical
            only.
    """

    enabled: bool = True
    max_tokens: int = 800
    max_snippets: int = 8
    min_score: float = 0.3
    latency_budget_s: float = 0.010
    search_limit: int = 30
    max_snippet_tokens: int = 120
    max_question_words: int = 20
    tool_timeout_s: float = 2.0
    fill: bool = True
    semantic: Any = None  # a SemanticRecall (typed loosely: numpy stays out of this module)

    @classmethod
    def broad(cls, semantic: Any = None, **overrides: Any) -> RecallParams:
        """A larger recalled block: up to 3,500 tokens, 35 snippets, 70 hits searched.

        The defaults (800 tokens, 8 snippets) keep every turn's request small; this preset
        trades input tokens for recall when callers often come back to details said long
        ago. Measured on LoCoMo at question time (benchmarks/README.md), answer recall and
        input against the full buffer's: lexical recall 79.6% at 11.8% with the defaults,
        83.8% at 17.0% with this preset; with ``semantic=SemanticRecall()`` 85.1% at 18.1%,
        with ``SemanticRecall(min_similarity=0.2)`` 85.6% at 19.0% (the full buffer: 90.8%).
        The block is filled only as far as matches go, so a turn that matches little costs
        little more than with the defaults.

        Args:
            semantic: Semantic recall as well (a ``SemanticRecall``, see ``semantic``);
                ``SemanticRecall(min_similarity=0.2)`` did best with this block.
            **overrides: Any other field (``latency_budget_s=0.02``, ...).

        Returns:
            The params (validated like any other).
        """
        fields: dict[str, Any] = {
            "max_tokens": 3500,
            "max_snippets": 35,
            "search_limit": 70,
        }
        return cls(**{**fields, "semantic": semantic, **overrides})

    def __post_init__(self):
        """Validate the fields (each error names its field)."""
        validate_numeric_fields(self, "recall.")
        if self.semantic is not None:
            from pipecat_summarizer._recall.semantic import SemanticRecall

            if not isinstance(self.semantic, SemanticRecall):
                raise TypeError(
                    f"recall.semantic must be a SemanticRecall, got {type(self.semantic).__name__}"
                )
        for name in ("enabled", "fill"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"recall.{name} must be a bool")
        for name in (
            "max_tokens",
            "max_snippets",
            "search_limit",
            "max_snippet_tokens",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"recall.{name} must be at least 1")
        if not 0.0 <= self.min_score <= 1.0:
            raise ValueError("recall.min_score must be between 0 and 1")
        if self.latency_budget_s < 0 or self.tool_timeout_s <= 0:
            raise ValueError("recall.latency_budget_s must be >= 0 and tool_timeout_s > 0")
        if self.max_question_words < 0:
            raise ValueError("recall.max_question_words must not be negative")
        if self.max_tokens < 40:
            raise ValueError("recall.max_tokens must be at least 40 (the header alone is ~25)")


__all__ = [
    "RECALL_HEADER",
    "SPEAKERS",
    "RecallParams",
    "Snippet",
    "View",
    "common_terms",
    "focus",
    "in_view",
    "instruction_names",
    "is_recall_message",
    "is_when",
    "last_question",
    "latest_user_index",
    "make_view",
    "names_in",
    "place_recall",
    "rare_terms",
    "recall_message",
    "recall_query",
    "relevance",
    "render_recall",
    "select_hits",
    "snippet_line",
    "snippet_when",
    "speaker",
    "specific_terms",
    "still_relevant",
    "topic_terms",
    "window",
    "without_names",
    "without_recall",
]

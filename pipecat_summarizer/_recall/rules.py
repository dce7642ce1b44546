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
from pipecat_summarizer.params import RecallParams  # its home is params.py; re-exported here

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

"""The summary message's text: the template filled in, the conversation's facts written into
its FACTS and CONSTRAINTS, corrected details rewritten in its bullets, and the draft the
processor splices in before the record adopts it. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pipecat.utils.context.llm_context_summarization import LLMContextSummaryConfig

from pipecat_summarizer._record.corrections import Correction
from pipecat_summarizer._record.pinned import Fact
from pipecat_summarizer._record.sections import record_items, with_items
from pipecat_summarizer._text.text_caches import text_cache
from pipecat_summarizer._text.vocabulary import normalize_fact


def render_template(template: str, summary: str) -> str:
    """The summary message's text: ``template`` with ``{summary}`` filled in (literally,
    when the template has other braces that ``str.format`` cannot take)."""
    try:
        return template.format(summary=summary)
    except (KeyError, IndexError, ValueError):
        return template.replace("{summary}", summary)


def with_facts(text: str | None, facts: Iterable[Fact]) -> str:
    """``text`` (a summary record) with ``facts`` written into FACTS / CONSTRAINTS."""
    items: dict[str, list[str]] = {"FACTS": [], "CONSTRAINTS": []}
    for fact in facts:
        items["CONSTRAINTS" if fact.kind == "constraint" else "FACTS"].append(fact.text)
    return with_items(text or "", items, normalize_fact)


_BULLET_LINE = re.compile(r"^(\s*(?:[-*•]|\d+[.)])\s+)(.*?)\s*$")


def with_corrections(text: str, corrections: Sequence[Correction]) -> str:
    """``text`` (a summary record) with each bullet that states a corrected detail as it was
    rewritten with the new value (:attr:`Correction.text`), in the order they were made."""
    if not corrections or not text:
        return text
    lines = text.splitlines()
    for correction in corrections:
        old = normalize_fact(correction.target)
        for i, line in enumerate(lines):
            bullet = _BULLET_LINE.match(line)
            if bullet and normalize_fact(bullet.group(2)) == old:
                lines[i] = bullet.group(1) + correction.text
    return "\n".join(lines)


@dataclass(frozen=True)
class SummaryDraft:
    """A summary ready to be spliced: :meth:`ConversationRecord.absorb` makes it, the
    processor splices ``message`` in, then :meth:`ConversationRecord.commit` adopts it."""

    message: dict
    text: str
    config: LLMContextSummaryConfig


@text_cache(maxsize=4)
def summary_items(text: str) -> tuple[str, ...]:
    # the summary changes once per compaction; corrections read it on many turns
    return tuple(record_items(text))


__all__ = ["SummaryDraft", "render_template", "summary_items", "with_corrections", "with_facts"]

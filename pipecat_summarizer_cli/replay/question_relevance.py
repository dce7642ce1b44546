"""How relevant a question's request is: the recalled block's snippets and LoCoMo's evidence.

Answer recall (:mod:`~pipecat_summarizer_cli.replay.question_scores`) rewards a bigger block;
these figures say what the block holds. LoCoMo gives each question the dialog ids of its
evidence (``"D3:12"``); the converter keeps each dialog line's text
(:attr:`~pipecat_summarizer_cli.replay.locomo.LocomoConversation.lines`), and a piece of the
request *holds* an evidence line when it carries at least half of that line's characters (at
most :data:`HOLD_CHARS` of them: the block quotes a window of a long line around the query's
words). Pure: no pipeline, no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence

#: A quote holds a dialog line when it carries this many of the line's characters (or half
#: of a shorter line's).
HOLD_CHARS = 80

_SPACE = re.compile(r"\s+")
_QUOTE = re.compile(r'"(?:[^"\\]|\\.)*"')
_DIA_ID = re.compile(r"D\d+:\d+")


def normalize(text: str) -> str:
    """``text`` with runs of whitespace as one space (as the recalled block quotes it)."""
    return _SPACE.sub(" ", text).strip()


def evidence_ids(evidence: Iterable[object]) -> list[str]:
    """The dialog ids of a QA item's ``evidence`` (a few LoCoMo entries hold two ids in one
    string, e.g. ``"D8:6; D9:17"``), distinct, in order."""
    seen: dict[str, None] = {}
    for entry in evidence:
        for dia_id in _DIA_ID.findall(str(entry)):
            seen.setdefault(dia_id, None)
    return list(seen)


def snippet_quotes(block: str) -> list[list[str]]:
    """The recalled block's snippets, each as its quotes (the caller's words, the reply),
    decoded, without the ``…`` of a cut window, whitespace normalized.

    A snippet is a line ``- [when] caller: "…" -> assistant: "…"`` (each quote a JSON string);
    the header and anything else are not snippets.
    """
    out: list[list[str]] = []
    for line in block.splitlines():
        if not line.startswith("- ["):
            continue
        quotes = []
        for raw in _QUOTE.findall(line):
            try:
                text = json.loads(raw)
            except ValueError:
                continue
            quotes.append(normalize(str(text).strip("…")))
        out.append(quotes)
    return out


def overlap(quote: str, line: str) -> int:
    """Characters of ``line`` that ``quote`` carries: all of it, the part the quote is cut
    from, or where one runs into the other (a window across two joined dialog lines)."""
    if not quote or not line:
        return 0
    if line in quote:
        return len(line)
    if quote in line:
        return len(quote)
    for k in range(min(len(quote), len(line)) - 1, 0, -1):
        if quote.endswith(line[:k]) or quote.startswith(line[-k:]):
            return k
    return 0


def holds(quote: str, line: str) -> bool:
    """Whether ``quote`` carries enough of ``line`` to count as holding it (see the module)."""
    need = min(HOLD_CHARS, max(1, len(line) // 2))
    return overlap(quote, line) >= need


def evidence_snippets(quotes: Sequence[Sequence[str]], evidence: Sequence[str]) -> int:
    """How many snippets hold at least one of the ``evidence`` lines."""
    return sum(any(holds(q, e) for q in snippet for e in evidence) for snippet in quotes)


def evidence_present(
    messages: Sequence[str], quotes: Sequence[Sequence[str]], evidence: Sequence[str]
) -> int:
    """How many ``evidence`` lines the request carries: whole in one of its ``messages``
    (normalized texts of the messages in view) or held by a snippet's quote."""
    found = 0
    flat = [q for snippet in quotes for q in snippet]
    for line in evidence:
        if any(line in m for m in messages) or any(holds(q, line) for q in flat):
            found += 1
    return found


def evidence_lines(ids: Sequence[str], lines: Mapping[str, str]) -> list[str]:
    """The normalized texts of the dialog ``ids`` the conversation has (an id LoCoMo names
    but the conversation lacks is left out)."""
    return [normalize(lines[i]) for i in ids if i in lines and normalize(lines[i])]


def percentile(values: Sequence[int], q: float) -> int:
    """The nearest-rank ``q`` percentile (0 < q <= 100) of ``values`` (0 when empty)."""
    if not values:
        return 0
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]

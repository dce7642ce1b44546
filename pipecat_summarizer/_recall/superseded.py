"""Recalled snippets that carry a detail corrected since: left out, or marked superseded.

A correction (:mod:`pipecat_summarizer._record.corrections`) replaces a detail in the pinned
facts and the summary, which then read ``"date: 21 March (corrected from 14 March)"``. The
archive still holds the message that said "14 March". :func:`supersede` is the one rule
recall's rendering applies to its snippets:

- a snippet that states a value a correction in view replaced (on the same topic) is left
  out: the corrected value is in view, the old one would only contradict it;
- a snippet that a later snippet of the same block corrects ("make that 21 March") is kept,
  marked ``[superseded: later corrected to 21 March]``, so the old value is never read as
  the current one; so is a snippet that a later archived text given as ``later`` corrects
  (found by searching the values the snippets state, :func:`stated_values`: a correction in
  a later call may share no word with the question).

Pure: no state, no store.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import TypeVar

from pipecat_summarizer._record.corrections import (
    corrected_from,
    find_correction,
    has_cue,
    unmarked,
    values,
)
from pipecat_summarizer._text.messages import ArchivedText
from pipecat_summarizer._text.text_caches import text_cache
from pipecat_summarizer._text.vocabulary import topic_words

S = TypeVar("S", bound=ArchivedText)

SUPERSEDED_MARK = "[superseded: later corrected to {new}] "


def _in_view_corrections(texts: Iterable[str]) -> list[tuple[str, str, frozenset[str]]]:
    """``(old value, new value, topic words)`` of each corrected detail in view."""
    found = []
    for text in texts:
        for line in text.splitlines():
            old = corrected_from(line)
            if old is None:
                continue
            plain = unmarked(line)
            kinds = {v.kind for v in values(old)}
            new = next((v.text for v in values(plain) if v.kind in kinds), None)
            if new is None:
                continue
            topic = frozenset(topic_words(plain) - topic_words(new) - topic_words(old))
            found.append((old, new, topic))
    return found


def _states(text: str, value: str) -> bool:
    return any(" ".join(v.text.lower().split()) == value.lower() for v in values(text))


def stated_values(snippets: Sequence[ArchivedText], limit: int = 3) -> list[str]:
    """The values (dates, times, amounts, ids, counts) ``snippets`` state, best snippet
    first, each once, at most ``limit``: what to search the caller's archive for, so that a
    correction made in a later call that shares no other word with the question ("make that
    21 March, not 14 March") reaches :func:`supersede` as ``later``."""
    found: list[str] = []
    lowered: set[str] = set()
    for s in snippets:
        for text in _stated(s.content):
            if text.lower() not in lowered:
                found.append(text)
                lowered.add(text.lower())
                if len(found) >= limit:
                    return found
    return found


@text_cache(maxsize=4096)  # the archive returns the same messages turn after turn
def _stated(content: str) -> tuple[str, ...]:
    """The texts of the values ``content`` states, names aside, in order: each message's
    read once (reading one is ~70 us, a turn reads up to ``max_snippets`` of them)."""
    return tuple(v.text for v in values(content) if v.kind != "name")


def _replaced(content: str, corrections: Sequence[tuple[str, str, frozenset[str]]]) -> bool:
    """Whether ``content`` states a value a correction in view replaced, on its topic (its
    topic words read only when it states an old value: most snippets state none)."""
    words: set[str] | None = None
    for old, new, topic in corrections:
        if _states(content, old) and not _states(content, new):
            if words is None:
                words = topic_words(content)
            if words & topic:
                return True
    return False


def _key(s: ArchivedText) -> tuple[float, str, int]:
    return (s.at, s.call_id, s.position)


def supersede(
    snippets: Sequence[S], in_view: Iterable[str] = (), later: Iterable[ArchivedText] = ()
) -> list[S]:
    """``snippets`` without those whose detail a correction in view replaced, and with those
    a later snippet corrects marked (see the module docstring); the order is kept.

    Args:
        snippets: Recalled snippets (anything with the archived text's fields).
        in_view: The texts the model sees besides the turns (summary, pinned facts).
        later: Archived texts found besides the snippets (a search of
            :func:`stated_values`): one said after a snippet that corrects it marks it too;
            they are never added to the snippets.
    """
    extra = sorted(later, key=_key)
    corrections = _in_view_corrections(in_view)
    kept: list[S] = []
    for s in snippets:
        if corrections and _replaced(s.content, corrections):
            continue  # the corrected value is in view
        kept.append(s)
    order = sorted(range(len(kept)), key=lambda i: (kept[i].at, kept[i].call_id, kept[i].position))
    # only a text with a correction's cue corrects anything (find_correction is None for the
    # others): each is read once, not once per snippet said before it
    cued = [(n, j) for n, j in enumerate(order) if has_cue(kept[j].content)]
    extra = [e for e in extra if has_cue(e.content)]
    out = list(kept)
    for n, i in enumerate(order):
        if not cued and not extra:
            break
        after: list[ArchivedText] = [kept[j] for m, j in cued if m > n]
        after += [e for e in extra if _key(e) > _key(kept[i])]
        for text in after:
            correction = find_correction(text.content, [(None, kept[i].content)])
            if correction is not None:
                mark = SUPERSEDED_MARK.format(new=correction.new)
                out[i] = dataclasses.replace(kept[i], content=mark + kept[i].content)
                break
    return out


__all__ = ["SUPERSEDED_MARK", "stated_values", "supersede"]

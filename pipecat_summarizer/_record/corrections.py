"""Corrections: a later message that replaces a detail said earlier ("make that 21 March").

:func:`find_correction` is the pure rule. A message corrects an earlier detail when it has a
correction cue ("make that", "actually", "change the date to", "no, the booking reference
is", "I meant", "X, not Y") followed by a value (a date, a time, an amount, a count, an
identifier, a name), and an earlier detail (a pinned fact, an item of the summary) holds a
value of the same kind, on the same topic when the message names one. The result says which
detail, its old value and the new one, and the detail rewritten with the new value and the
mark :func:`mark_corrected` writes (``"date: 21 March (corrected from 14 March)"``).

"That's not what I meant" (a cue, no value) and "I'd like 3 tickets" (a value, no cue) are
no corrections. Pure: no state, no frames.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pipecat_summarizer._text.text_caches import text_cache
from pipecat_summarizer._text.vocabulary import topic_words

_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
    r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"
_NUMBER_WORDS = (
    "one two three four five six seven eight nine ten eleven twelve twenty thirty forty fifty"
).split()
_NUMBER = r"(?:\d+(?:[.,]\d+)?|" + "|".join(_NUMBER_WORDS) + r")"
# Kinds of value, most specific first: a span taken by one is not read again by the next.
_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "date",
        re.compile(
            rf"\b(?:{_DAY}(?:\s+of)?\s+{_MONTH}|{_MONTH}\s+{_DAY})\b(?:,?\s+\d{{4}})?"
            r"|\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}/\d{1,2}(?:/\d{2,4})?\b",
            re.IGNORECASE,
        ),
    ),
    (
        "time",
        re.compile(r"\b\d{1,2}(?::\d{2})?\s*(?:am|pm|a\.m\.|p\.m\.)|\b\d{1,2}:\d{2}\b", re.I),
    ),
    (
        "weekday",
        re.compile(r"\b(?:mon|tues|wednes|thurs|fri|satur|sun)day\b", re.IGNORECASE),
    ),
    (
        "money",
        re.compile(
            r"[$€£]\s?\d[\d,]*(?:\.\d+)?|\b\d[\d,]*(?:\.\d+)?\s*(?:dollars|euros?|pounds|usd|eur|gbp)\b",
            re.IGNORECASE,
        ),
    ),
    ("id", re.compile(r"\b(?=[A-Z0-9-]*\d)(?=[A-Z0-9-]*[A-Z])[A-Z0-9][A-Z0-9-]{3,}\b")),
    ("count", re.compile(rf"\b{_NUMBER}\s+(?P<noun>[a-z]{{3,}})\b", re.IGNORECASE)),
    ("number", re.compile(rf"\b{_NUMBER}\b", re.IGNORECASE)),
    ("name", re.compile(r"\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*\b")),
)
# Capitalized words that are no name.
_NOT_NAMES = frozenset(
    "i i'm actually no sorry make change the my our it it's that's wait oh okay ok please "
    "correction not".split()
)
# A cue, then the new value's phrase (``new``), maybe the topic and an explicit old value.
_CUES = re.compile(
    r"\b(?:make|change|changed|move|moved|switch|switched|update|updated|set|put)\s+"
    r"(?:that|it|this)\s+(?:to\s+|for\s+)?(?P<new1>[^.;!?]+)"
    r"|\b(?:change|changed|move|moved|switch|switched|update|updated)\s+(?:the|my|our|your)\s+"
    r"(?P<topic2>[\w' -]{2,40}?)\s+to\s+(?P<new2>[^.;!?]+)"
    r"|\b(?:no|actually|sorry|correction|wait)\b[,:!]?\s+(?:(?:the|my|our)\s+"
    r"(?P<topic3>[\w' -]{2,40}?)\s+(?:is|was|should be|will be)|it'?s|it is|that'?s|that is|"
    r"it should be|it was|it will be|i need|i want|i have|there are|there will be|we are|we're)"
    r"\s+(?P<new3>[^.;!?]+)"
    r"|\bi meant\s+(?P<new4>[^.;!?]+)"
    r"|\b(?:actually|correction)\b[,:]?\s+(?P<new5>[^.;!?]+)",
    re.IGNORECASE,
)
# Words that name a kind of value: "change the date to ..." may correct any detail with a date.
_KIND_WORDS = {
    "date": "date day",
    "weekday": "date day",
    "time": "time hour",
    "money": "price amount cost budget total",
    "id": "reference number code id confirmation booking order",
    "name": "name",
}
_NOT_OLD = re.compile(r",?\s+(?:not|instead of|rather than)\s+(?P<old>[^,.;!?]+)$", re.IGNORECASE)
_CORRECTED_FROM = re.compile(r"\s*\(corrected from (?P<old>[^()]*)\)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Value:
    """One value in a text: its kind (``date``, ``time``, ``count:ticket``...), its text."""

    kind: str
    text: str


@dataclass(frozen=True)
class Correction:
    """A correction of an earlier detail.

    Parameters:
        target: The earlier detail's text, as it was.
        key: The pinned fact's key when the detail is a pinned fact, else ``None``.
        old: The value it held.
        new: The value that replaces it.
        text: The detail with the new value, marked (:func:`mark_corrected`).
    """

    target: str
    key: str | None
    old: str
    new: str
    text: str


def values(text: str) -> list[Value]:
    """The values ``text`` holds, most specific kinds first, each span read once."""
    found: list[Value] = []
    taken: list[tuple[int, int]] = []
    for kind, pattern in _KINDS:
        for m in pattern.finditer(text):
            if any(m.start() < end and start < m.end() for start, end in taken):
                continue
            span = m.group(0).strip()
            if kind == "name":
                first = span.split()[0].lower()
                if first in _NOT_NAMES or (m.start() == 0 and " " not in span):
                    continue
            if kind == "count":
                kind_of = "count:" + _stem(m.group("noun"))
            else:
                kind_of = kind
            taken.append((m.start(), m.end()))
            found.append(Value(kind_of, span))
    return found


def _stem(noun: str) -> str:
    noun = noun.lower()
    return noun[:-1] if noun.endswith("s") and not noun.endswith("ss") else noun


def _same(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def corrected_from(text: str) -> str | None:
    """The old value a marked detail names (``"... (corrected from 14 March)"``), or ``None``."""
    m = _CORRECTED_FROM.search(text)
    return m.group("old").strip() if m else None


def unmarked(text: str) -> str:
    """``text`` without a trailing ``(corrected from ...)`` mark."""
    return _CORRECTED_FROM.sub("", text).rstrip()


def mark_corrected(text: str, old: str) -> str:
    """``text`` marked as a correction of ``old``: ``"... (corrected from OLD)"`` (once)."""
    return f"{unmarked(text)} (corrected from {old})"


@dataclass(frozen=True)
class _Said:
    new: list[Value]
    old: str | None
    topic: frozenset[str]


# every alternative of _CUES starts with one of these words (or "i meant") at a word boundary:
# a match can start only there, so the regex is tried at those places alone (anchored), never
# scanned along the text (its alternations cost ~100 us on a spoken turn that has a cue word)
_CUE_WORDS = frozenset(
    "make change changed move moved switch switched update updated set put no actually sorry "
    "correction wait".split()
)
_CUE_STARTS = (*sorted(_CUE_WORDS), "i meant")
# the same places for a text that is not ASCII (its lower case may not keep the positions)
_CUE_START = re.compile(r"\b(?:" + "|".join(_CUE_STARTS) + r")\b", re.IGNORECASE)


def _word_char(c: str) -> bool:
    return c.isalnum() or c == "_"


def cue_starts(text: str) -> list[int]:
    """Where in ``text`` a correction's cue may start: each cue word at a word boundary, in
    order. Most spoken turns have none; an ASCII text is searched with ``str.find`` (a few
    microseconds), any other with the regex of the cue words."""
    if not text.isascii():
        return [m.start() for m in _CUE_START.finditer(text)]
    low = text.lower()
    starts = []
    for word in _CUE_STARTS:
        i = low.find(word)
        while i >= 0:
            j = i + len(word)
            if (i == 0 or not _word_char(low[i - 1])) and (j == len(low) or not _word_char(low[j])):
                starts.append(i)
            i = low.find(word, j)
    starts.sort()
    return starts


@text_cache(maxsize=256)  # a message is read by find_correction and applied, turn after turn
def _said(text: str) -> _Said | None:
    """The cue's new values, explicit old value and topic words, or ``None`` (no cue, or
    no value after it): the first cue, from the left, followed by a value (as
    ``_CUES.finditer`` would find them, tried only where a cue word starts)."""
    end = 0
    for start in cue_starts(text):
        if start < end:
            continue  # inside the previous cue's phrase
        m = _CUES.match(text, start)
        if m is None:
            continue
        end = m.end()
        phrase = next(m.group(g) for g in ("new1", "new2", "new3", "new4", "new5") if m.group(g))
        topic_text = m.group("topic2") or m.group("topic3") or ""
        old = None
        not_old = _NOT_OLD.search(phrase)
        if not_old:
            old = not_old.group("old").strip()
            phrase = phrase[: not_old.start()]
        new = values(phrase)
        if new:
            return _Said(new, old, frozenset(topic_words(topic_text)))
    return None


def has_cue(text: str) -> bool:
    """Whether ``text`` has a correction's cue followed by a value (cheap for most messages,
    which have none: a word test before the regex; cached for :func:`find_correction`)."""
    return _said(text) is not None


def _replace(target: str, old: Value, new: Value) -> str:
    replacement = new.text
    if old.kind.startswith("count:") and new.kind == "number":
        replacement = old.text.replace(old.text.split()[0], new.text, 1)
    return target.replace(old.text, replacement, 1)


def find_correction(text: str, details: Iterable[tuple[str | None, str]]) -> Correction | None:
    """The earlier detail ``text`` corrects, or ``None``.

    Args:
        text: A caller's or the assistant's message.
        details: The earlier details, oldest first: ``(key, text)``, ``key`` a pinned
            fact's key or ``None`` for an item of the summary.

    Returns:
        The correction: the detail (the most specific match; the most recent among equals),
        its old value and the new one, and its text with the new value, marked; ``None`` when a
        detail already states the new value as a correction (:func:`applied`).
    """
    said = _said(text)
    if said is None:
        return None
    details = list(details)
    if applied(text, (d for _, d in details)):
        return None  # said again (a turn restored, re-read): it corrects nothing more
    words = topic_words(text) | said.topic
    new_words = {id(new): words - topic_words(new.text) for new in said.new}
    kinds = {new.kind.partition(":")[0] for new in said.new} | {"count", "number"}
    best: tuple[tuple[int, int], Correction] | None = None
    for order, (key, detail) in enumerate(details):
        plain, every, about = _read(detail)
        held = [v for v in every if v.kind.partition(":")[0] in kinds]
        if not held:
            continue  # no value of a kind the message names
        for new in said.new:
            if said.topic and not said.topic & (about | _kind_words(new.kind)):
                continue  # "change the date to ..." corrects a detail about a date
            overlap = len(about & new_words[id(new)])
            for old in held:
                if not _matches(old, new) or _same(old.text, new.text):
                    continue
                explicit = said.old is not None and _same_value(said.old, old)
                if said.old is not None and not explicit:
                    continue
                if old.kind in ("number", "name") and not (explicit or overlap):
                    continue  # a bare number or name needs the topic to point at it
                rank = (4 * explicit + 2 * (old.kind == new.kind) + overlap, order)
                if best is None or rank > best[0]:
                    fixed = mark_corrected(_replace(plain, old, new), old.text)
                    best = (rank, Correction(detail, key, old.text, new.text, fixed))
    return None if best is None else best[1]


@text_cache(maxsize=2048)
def _read(detail: str) -> tuple[str, tuple[Value, ...], frozenset[str]]:
    """A detail's text without its mark, its values and its topic words (the same details
    are read at every correction of a call: cached)."""
    plain = unmarked(detail)
    return plain, tuple(values(plain)), frozenset(topic_words(plain))


def applied(text: str, details: Iterable[str]) -> bool:
    """Whether the correction ``text`` makes is already applied: a detail marked as a
    correction states its new value ("make that 21 March" after "date: 21 March (corrected
    from 14 March)"), so it replaces nothing again."""
    said = _said(text)
    if said is None:
        return False
    for detail in details:
        if corrected_from(detail) is None:
            continue
        held = {" ".join(v.text.lower().split()) for v in _read(detail)[1]}
        if all(" ".join(v.text.lower().split()) in held for v in said.new):
            return True
    return False


def _kind_words(kind: str) -> set[str]:
    return topic_words(_KIND_WORDS.get(kind, kind.partition(":")[2] or kind))


def is_marked(text: str) -> bool:
    """Whether ``text`` is marked as a correction ("(corrected)", "(corrected from X)")."""
    return "(corrected)" in text.lower() or corrected_from(text) is not None


def _matches(old: Value, new: Value) -> bool:
    if old.kind == new.kind:
        return True
    # "make that three" corrects "2 tickets"; "3 tickets" corrects a bare "2"
    return (old.kind.startswith("count:") and new.kind == "number") or (
        old.kind == "number" and new.kind.startswith("count:")
    )


def _same_value(said: str, value: Value) -> bool:
    if _same(said, value.text):
        return True
    return value.kind.startswith("count:") and _same(said, value.text.split()[0])


def unread(messages: Sequence[Any], read: Sequence[Any], cap: int = 16) -> list[Any]:
    """The messages at the end of ``messages`` not in ``read`` (by identity), oldest first,
    at most ``cap``: what was added since the last look, in O(new messages)."""
    seen = {id(m) for m in read}
    fresh: list[Any] = []
    for message in reversed(messages):
        if id(message) in seen or len(fresh) >= cap:
            break
        fresh.append(message)
    fresh.reverse()
    return fresh


__all__ = [
    "Correction",
    "applied",
    "Value",
    "corrected_from",
    "find_correction",
    "is_marked",
    "mark_corrected",
    "unmarked",
    "unread",
    "values",
]

"""The record being built, and fitting it to the token budget.

:class:`Record` holds the items per section with the indexes a correction needs;
:func:`fit` renders it within a budget, dropping the least salient bullets first;
:func:`pin_worthy` picks the bullets worth pinning.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipecat_summarizer._record.authority import is_instruction_like
from pipecat_summarizer._record.corrections import is_marked
from pipecat_summarizer._record.sections import _heading_of, render_sections
from pipecat_summarizer._text.messages import content_texts
from pipecat_summarizer._text.tokens import estimate_text_tokens, tokens_for, wide_chars
from pipecat_summarizer._text.vocabulary import (
    CONSTRAINTS,
    CORRECTED_MARK,
    DECISIONS,
    FACTS,
    ITEM_SPEAKER_RE,
    OPEN_QUESTIONS,
    SECTIONS,
    fold,
    topic_words,
)
from pipecat_summarizer.summarizers.extractive.classify import (
    DROP_RANK,
    salience,
    strip_role,
    topic_keys,
)
from pipecat_summarizer.summarizers.extractive.lexicon import NUMBER_RE

# An instruction-like sentence is kept as what its speaker said, never as a fact or a rule.
INSTRUCTION_NOTE = "{speaker} said (instruction-like; recorded as said, not a rule): {quote}"


def render_compact(sections: Mapping[str, Sequence[str]]) -> str:
    # Only for budgets too small for the four-heading skeleton: empty sections are left out.
    lines: list[str] = []
    for name in SECTIONS:
        items = [i for i in sections.get(name, ()) if i and i.strip()]
        if items:
            lines.append(f"{name}:")
            lines.extend(f"- {i}" for i in items)
    return "\n".join(lines)


def looks_like_record(text: str) -> bool:
    """Whether ``text`` is a memory record (a previous summary), not conversation."""
    lines = [line for line in text.splitlines() if line.strip()]
    headings = [i for i, line in enumerate(lines) if _heading_of(line)]
    return len(headings) >= 2 or (len(headings) == 1 and headings[0] == 0)


def text_of(content: Any) -> str:
    """A message content's text: a string whole, its typed text parts joined by a space."""
    if isinstance(content, str):
        return content
    return " ".join(p for p in content_texts(content, typed=True) if p)


def compact(value: Any, limit: int) -> str:
    if not isinstance(value, str):
        try:
            value = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
        except (TypeError, ValueError):
            value = str(value)
    text = " ".join(value.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def instruction_note(item: str) -> str:
    """``item`` (``"User: ..."``, ``"Tool ..."``) as an attributed, quoted note.

    Args:
        item: A record item whose text is instruction-like.

    Returns:
        ``User said (instruction-like; ...): "..."``, on one line, with the text's double
        quotes made single so it cannot close the quotation.
    """
    speaker, text = "Someone", item
    match = re.match(r"^(user|assistant)\s*:\s*", item, re.IGNORECASE)
    if match:
        speaker, text = match.group(1).capitalize(), item[match.end() :]
    elif item.lower().startswith("tool "):
        speaker = "A tool result"
    quote = '"' + " ".join(text.replace('"', "'").split()) + '"'
    return INSTRUCTION_NOTE.format(speaker=speaker, quote=quote)


def dedupe_key(item: str) -> str:
    text = fold(item).replace(CORRECTED_MARK, "")
    return " ".join(re.findall(r"\w+", text))


@dataclass(frozen=True)
class Topic:
    """What a correctable item is about, computed once when it is added."""

    seq: int
    plain_key: str
    words: frozenset[str]
    keys: frozenset[str]
    has_number: bool


def topic(text: str, seq: int = 0) -> Topic:
    text = strip_role(text)
    return Topic(
        seq,
        dedupe_key(text),
        frozenset(topic_words(text)),
        frozenset(topic_keys(text)),
        bool(NUMBER_RE.search(fold(text))),
    )


CORRECTABLE = (FACTS, CONSTRAINTS, DECISIONS)
NOT_USER_RE = re.compile(r"^(?:assistant\s*:|tool\b)", re.IGNORECASE)


class Record:
    """The record being built: items per section, oldest first.

    Items are unique by normalized text. The user's own items are indexed by content word
    and topic key, so a correction finds its candidates without scanning the record.
    """

    def __init__(self) -> None:
        self.sections: dict[str, list[str]] = {n: [] for n in SECTIONS}
        self._keys: dict[str, str] = {}  # normalized item -> section
        self._topics: dict[str, Topic] = {}  # correctable item -> topic
        self._by_word: dict[str, set[str]] = {}
        self._by_key: dict[str, set[str]] = {}
        self._seq = 0
        self.age: dict[str, int] = {}  # normalized item -> order of addition
        self._added = 0

    def add(self, section: str, item: str) -> None:
        """Add ``item`` to ``section`` unless an equal item is there.

        An instruction-like item bound for FACTS, CONSTRAINTS or DECISIONS goes to OPEN
        QUESTIONS instead, attributed (:func:`instruction_note`).
        """
        if section != OPEN_QUESTIONS and is_instruction_like(item):
            section, item = OPEN_QUESTIONS, instruction_note(item)
        key = dedupe_key(item)
        if not key:
            return
        if key in self._keys:
            # A repeated sentence keeps its place; a correction mark is not lost.
            if CORRECTED_MARK in item:
                items = self.sections[self._keys[key]]
                for i, existing in enumerate(items):
                    if dedupe_key(existing) == key and CORRECTED_MARK not in existing:
                        self._unindex(existing)
                        items[i] = item
                        self._index(self._keys[key], item)
            return
        self._keys[key] = section
        self.age[key] = self._added
        self._added += 1
        self.sections[section].append(item)
        self._index(section, item)

    def _index(self, section: str, item: str) -> None:
        # Users correct what they said, not what the assistant or a tool recorded.
        if section not in CORRECTABLE or NOT_USER_RE.match(item):
            return
        self._seq += 1
        about = topic(item, self._seq)
        self._topics[item] = about
        for word in about.words:
            self._by_word.setdefault(word, set()).add(item)
        for key in about.keys:
            self._by_key.setdefault(key, set()).add(item)

    def _unindex(self, item: str) -> None:
        about = self._topics.pop(item, None)
        if about is None:
            return
        for word in about.words:
            self._by_word[word].discard(item)
        for key in about.keys:
            self._by_key[key].discard(item)

    def remove(self, section: str, index: int) -> None:
        item = self.sections[section].pop(index)
        key = dedupe_key(item)
        self._keys.pop(key, None)
        self.age.pop(key, None)
        self._unindex(item)

    def trim(self, section: str, keep: int) -> None:
        while len(self.sections[section]) > keep:
            self.remove(section, 0)

    def merge(self, other: Mapping[str, Sequence[str]]) -> None:
        for name in SECTIONS:
            for item in other.get(name, ()):
                self.add(name, item)

    def apply_correction(self, sentence: str) -> str | None:
        """Remove the earlier user item that ``sentence`` corrects, if one matches.

        The match is the item sharing the most content words, helped by shared kinds of
        value (a time, a weekday, an amount...); a short correction such as "sorry, I meant
        Tuesday" may match on the kind of value alone. Ties go to the most recent item.

        Returns:
            The section of the removed item, or ``None`` if nothing matched.
        """
        this = topic(sentence)
        elliptical = len(this.words) <= 2
        candidates: set[str] = set()
        for word in this.words:
            candidates |= self._by_word.get(word, set())
        if elliptical:
            for key in this.keys:
                candidates |= self._by_key.get(key, set())
        best: tuple[int, int, str] | None = None
        for item in candidates:
            other = self._topics[item]
            if other.plain_key == this.plain_key:
                continue  # the correction itself, already recorded
            overlap = len(this.words & other.words)
            shared_keys = len(this.keys & other.keys)
            both_numbers = this.has_number and other.has_number
            eligible = (
                overlap >= 2
                or (overlap >= 1 and (shared_keys or both_numbers))
                or (elliptical and shared_keys >= 1)
            )
            if not eligible:
                continue
            rank = (2 * overlap + shared_keys + int(both_numbers), other.seq, item)
            if best is None or rank > best:
                best = rank
        if best is not None:
            item = best[2]
            section = self._keys[dedupe_key(item)]
            self.remove(section, self.sections[section].index(item))
            return section
        return None

    def is_empty(self) -> bool:
        return not any(self.sections.values())


def fit(record: Record, max_tokens: int) -> tuple[str, dict[str, list[str]]]:
    """Render the record within ``max_tokens``; return the text and the items kept."""
    current = {name: list(record.sections[name]) for name in SECTIONS}

    def fits(text: str) -> bool:
        return estimate_text_tokens(text) <= max_tokens

    full = fits(render_sections({}))
    render = render_sections if full else render_compact
    count = sum(len(items) for items in current.values())
    size = RenderedSize(current, full)
    if count > 1 and size.tokens() > max_tokens:
        # Least salient first; among equals the oldest, then by section.
        order = sorted(
            (
                salience(name, item),
                record.age.get(dedupe_key(item), 0),
                DROP_RANK[name],
                name,
                item,
            )
            for name in SECTIONS
            for item in current[name]
        )
        dropped: set[tuple[str, str]] = set()
        # Drop by arithmetic first (the estimate adds up per character), so a long
        # record is not re-rendered once per dropped item; then confirm on real text.
        victims = iter(order)
        while count > 1 and size.tokens() > max_tokens:
            *_, name, item = next(victims)
            size.remove(name, item)
            dropped.add((name, item))
            count -= 1
        while True:
            current = {
                n: [i for i in record.sections[n] if (n, i) not in dropped] for n in SECTIONS
            }
            if count <= 1 or fits(render(current)):
                break
            *_, name, item = next(victims)
            dropped.add((name, item))
            count -= 1
    text = render(current)
    if text and fits(text):
        return text, current
    # One item left that does not fit whole (or nothing): shorten it, keeping its head.
    first = next((n for n in SECTIONS if current[n]), None)
    if first is not None:
        item = current[first][0]
        lo, hi = 0, len(item)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            current[first][0] = item[:mid].rstrip() + "…"
            if fits(render(current)):
                lo = mid
            else:
                hi = mid - 1
        current[first][0] = item[:lo].rstrip() + "…"
        if lo and fits(render(current)):
            return render(current), {}  # a cut sentence is not worth pinning
        if render is render_sections:
            return render_sections({}), {}  # the skeleton fits; the item cannot
        current[first][0] = item
    return hard_truncate(render(current) or render_sections({}), max_tokens), {}


def pin_worthy(kept: Mapping[str, Sequence[str]], pin_tokens: int) -> dict[str, list[str]]:
    """The FACTS and CONSTRAINTS bullets worth pinning, within about ``pin_tokens``.

    Corrections first (an outdated pinned fact must be replaced), then by salience,
    constraints before facts, the newest first; each bullet is counted as the pinned
    block renders it (without the speaker). The chosen bullets keep the record's order.
    """
    candidates = []
    for name in (CONSTRAINTS, FACTS):
        for position, item in enumerate(kept.get(name, ())):
            if is_instruction_like(item):
                continue  # never pinned, whatever the record says
            score = salience(name, item)
            if score >= PIN_MIN_SALIENCE:
                corrected = is_marked(item)
                rank = (not corrected, -score, -DROP_RANK[name], -position)
                candidates.append((rank, name, position, item))
    candidates.sort()
    chosen: dict[str, list[tuple[int, str]]] = {FACTS: [], CONSTRAINTS: []}
    used = 0
    for _, name, position, item in candidates:
        cost = estimate_text_tokens(f"- {ITEM_SPEAKER_RE.sub('', item)}\n")
        if used + cost > pin_tokens:
            continue
        used += cost
        chosen[name].append((position, item))
    return {name: [item for _, item in sorted(items)] for name, items in chosen.items()}


PIN_MIN_SALIENCE = 4


class RenderedSize:
    """The token estimate of a rendering, kept up to date as items are removed."""

    def __init__(self, sections: Mapping[str, list[str]], full: bool):
        self.full = full
        self.chars = {n: sum(len(i) + 2 for i in sections[n]) for n in SECTIONS}
        self.wide = {n: sum(wide_chars(i) for i in sections[n]) for n in SECTIONS}
        self.count = {n: len(sections[n]) for n in SECTIONS}

    def remove(self, name: str, item: str) -> None:
        self.chars[name] -= len(item) + 2
        self.wide[name] -= wide_chars(item)
        self.count[name] -= 1

    def tokens(self) -> int:
        chars = wide = lines = 0
        for name in SECTIONS:
            if self.count[name]:
                chars += len(name) + 1 + self.chars[name]
                wide += self.wide[name]
                lines += 1 + self.count[name]
            elif self.full:
                chars += len(name) + 1 + len("- none")
                lines += 2
        chars += max(0, lines - 1)  # the newlines between lines
        return tokens_for(chars, wide)


def hard_truncate(text: str, max_tokens: int) -> str:
    # Last resort for absurd budgets: the longest prefix that fits (never empty, since any
    # string under 4 ASCII characters estimates to 0 tokens).
    lo, hi = 1, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_text_tokens(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]

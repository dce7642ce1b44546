"""Recall's query: what this turn asks about, and which of its words count.

The query is the latest user message (and the assistant's last question before it, when
short), without the call's parties' names; its topic terms are its words stemmed as the
archive stems (:func:`~pipecat_summarizer._text.vocabulary.search_stem`), stop words dropped.
Which terms count is narrowed by the conversation in view: words every message has
(:func:`common_terms`) say nothing, words new to it (:func:`rare_terms`) say much. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from pipecat_summarizer._recall.closings import without_closings
from pipecat_summarizer._text.messages import spoken_text
from pipecat_summarizer._text.text_caches import text_cache
from pipecat_summarizer._text.tokens import estimate_text_tokens
from pipecat_summarizer._text.vocabulary import (
    RECALL_STOPWORDS,
    normalize_verbatim,
    search_stem,
    words,
)


def topic_terms(text: str) -> list[str]:
    """The distinct stemmed topic words of ``text`` (stop words removed), in order."""
    return list(_topic_terms(text))


@text_cache(maxsize=4096)  # the same context messages are read again every turn
def _topic_terms(text: str) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for w in words(text):
        if w not in RECALL_STOPWORDS and (len(w) > 1 or w.isdigit()):
            seen.setdefault(search_stem(w), None)
    return tuple(seen)


# -- the query -------------------------------------------------------------------------


def latest_user_index(messages: Sequence[Any]) -> int | None:
    """Index of the user message that opens the current turn: the last user message with
    no assistant or tool message after it (instructions injected after it are allowed).
    ``None`` if the context does not end in a user turn."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        role = m.get("role") if isinstance(m, Mapping) else None
        if role == "user":
            return i
        if role not in ("system", "developer"):
            return None
    return None


def last_question(text: str, max_words: int) -> str | None:
    """The last sentence of ``text`` if it is a question of at most ``max_words`` words."""
    text = text.strip()
    if not text.endswith("?") or max_words <= 0:
        return None
    sentence = re.split(r"(?<=[.!?])\s+", text)[-1]
    return sentence if 0 < len(words(sentence)) <= max_words else None


#: The most of a caller's turn a query reads: its end, where a long turn's question usually
#: is (a 100 KB turn's 16,000 topic words cost seconds of ranking on the event loop; the
#: archive reads a query's first 32 words anyway).
MAX_QUERY_CHARS = 2000


def tail(text: str, max_chars: int) -> str:
    """The last ``max_chars`` characters of ``text``, from a word's start (the whole text
    when it is no longer)."""
    if len(text) <= max_chars:
        return text
    cut = text[-max_chars:]
    space = cut.find(" ")
    return cut[space + 1 :] if 0 <= space < len(cut) - 1 else cut


def recall_query(
    messages: Sequence[Any], max_question_words: int = 20, names: Iterable[str] | None = None
) -> str | None:
    """The query of the current turn: the latest user message, and the assistant's last
    question before it when that question is short (``"Which hotel?"`` / ``"the first one"``).

    Returns:
        The query text, or ``None`` when the context does not end in a user turn or the
        query has no topic word. ``names``: the instructions' names when known (see
        :func:`instruction_names`; :meth:`ContextTerms.names` keeps them).
    """
    i = latest_user_index(messages)
    if i is None:
        return None
    parts = [tail(spoken_text(messages[i]), MAX_QUERY_CHARS)]
    for m in reversed(messages[:i]):
        if isinstance(m, Mapping) and m.get("role") == "assistant":
            question = last_question(spoken_text(m), max_question_words)
            if question:
                parts.insert(0, question)
            break
        if isinstance(m, Mapping) and m.get("role") == "user":
            break
    if names is None:
        names = instruction_names(messages)
    query = without_names("\n".join(p for p in parts if p), names)
    return query if topic_terms(query) else None


_NAME_WORD = re.compile(r"[^\W\d_][^\W_]*", re.UNICODE)
_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+|\n)\W*$")


@lru_cache(maxsize=256)  # the same instructions are read every turn
def names_in(text: str) -> frozenset[str]:
    """Lower-cased capitalized words of ``text`` that do not start a sentence (``"You are
    Ava; the caller is John Smith."`` -> ``{"ava", "john", "smith"}``)."""
    found = set()
    for match in _NAME_WORD.finditer(text):
        start = match.start()
        opens = _SENTENCE_START.search(text[max(0, start - 3) : start])
        if match.group()[0].isupper() and not opens:
            found.add(match.group().lower())
    return frozenset(found - RECALL_STOPWORDS)


def instruction_names(messages: Sequence[Any]) -> frozenset[str]:
    """The names the instructions (system and developer messages) give: the call's parties
    (``"You are Ava; the caller is John."``)."""
    found: set[str] = set()
    for m in messages:
        if isinstance(m, Mapping) and m.get("role") in ("system", "developer"):
            found |= names_in(spoken_text(m))
    return frozenset(found)


def without_names(query: str, names: Iterable[str]) -> str:
    """``query`` without its capitalized words that are ``names`` (the call's parties, see
    :func:`instruction_names`): they are in view all along and the archive has them mostly
    in greetings ("Thanks, John!"), so they match the wrong messages and say nothing about
    which detail is meant. The query is kept whole when nothing else would be left."""
    names = set(names)
    if not names:
        return query
    kept = _NAME_WORD.sub(
        lambda m: "" if m.group()[0].isupper() and m.group().lower() in names else m.group(),
        query,
    )
    return kept if topic_terms(kept) else query


# -- the terms that count -------------------------------------------------------------


#: Fewest texts in view for any word to count as common. A call's first turns (a returning
#: caller's: the instructions, the memory, a greeting and the question) are too few to tell:
#: with 5, a question word the greeting or the earlier-calls summary also had was dropped
#: ("When should you call me back now?" searched only "forget").
MIN_COMMON_TEXTS = 10


def common_terms(
    texts: Sequence[str], *, share: float = 0.4, min_texts: int = MIN_COMMON_TEXTS
) -> set[str]:
    """Topic words found in at least ``share`` of ``texts`` (the messages in view): words
    every other message has (the two speakers' names, the call's subject) match everything
    and tell nothing about which archived message is meant. Empty below ``min_texts``."""
    texts = [t for t in texts if t]
    if len(texts) < min_texts:
        return set()
    df: dict[str, int] = {}
    for t in texts:
        for term in _topic_terms(t):
            df[term] = df.get(term, 0) + 1
    floor = share * len(texts)
    return {term for term, n in df.items() if n >= floor}


# A caller's opener and asking words ("Sorry, remind me:", "I forgot, ...", "quick
# question"): they say a question is asked, not what about (most asking words, "remember",
# "mention", "again", are stop words already).
_ASKING = frozenset(
    search_stem(w)
    for w in """sorry remind reminded forget forgot forgotten wonder wondering ask asking
    asked quick question""".split()
)


def focus(query: str, common: Container[str]) -> list[str]:
    """The query's topic words without the common ones and the asking words (``"sorry"``,
    ``"remind"``); all of them if none is left."""
    terms = topic_terms(query)
    kept = [t for t in terms if t not in common and t not in _ASKING]
    return kept or terms


# where a question splits in two: a sentence's end, or "and" / "also" before a question
# word ("What's my room number, and when is checkout?"); not a line's end: the assistant's
# short question and the caller's answer to it are one query ("Which hotel?" / "the first")
_PART_BREAK = re.compile(
    r"(?<=[.!?]) +|,?\s+(?:and|also|plus)\s+(?=(?:what|when|where|which|who|whom|whose|"
    r"how|why|did|do|does|is|are|was|were|can|could|will|would|should)\b)",
    re.IGNORECASE,
)


def query_parts(query: str, terms: Sequence[str]) -> list[list[str]]:
    """The parts of a question that asks two things (each part's share of ``terms``, the
    query's terms that count), so each part is matched on its own: a message answering one
    half shares too few of the whole query's words to pass as a strong match. ``[]`` for a
    question in one part."""
    counted = set(terms)
    parts: list[list[str]] = []
    for piece in _PART_BREAK.split(query):
        kept = [t for t in _topic_terms(piece) if t in counted] if piece else []
        if kept and kept not in parts:
            parts.append(kept)
    return parts if len(parts) > 1 else []


_WHEN_WORDS = """january february march april may june july august september october
    november december jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday
    wednesday thursday friday saturday sunday today yesterday tomorrow tonight morning
    afternoon evening night day days week weeks weekend month months year years""".split()
_WHEN = frozenset(_WHEN_WORDS) | frozenset(search_stem(w) for w in _WHEN_WORDS)


def is_when(term: str) -> bool:
    """True for a date or time word (``march``, ``2023``, ``7``, ``weekend``): what a
    question says about *when*, which the message it asks about rarely says itself (that
    was said "last week", on the day of its call)."""
    if term.isdigit():
        return len(term) <= 2 or (len(term) == 4 and term[:2] in ("19", "20"))
    return term in _WHEN


_ASKS_WHEN = re.compile(
    r"\b(?:when|how long|what (?:date|day|year|month|time)|which (?:date|day|year|month)"
    r"|since|ago|first (?:mention|said|told|call)|how many (?:days|weeks|months|years))\b",
    re.IGNORECASE,
)


def asks_when(query: str) -> bool:
    """True for a question about time (``"When did I ..."``, ``"how long ago"``, ``"what
    date"``): its recalled snippets carry a relative date too (``three weeks ago``)."""
    return bool(_ASKS_WHEN.search(query))


_SPECIFIC = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][\w'-]+|\b\w*\d\w*|\b\w{7,}", re.UNICODE)


def specific_terms(query: str) -> set[str]:
    """Stems of the query's specific words: names (capitalized inside a sentence), words
    with digits, long words ("Mozart", "418", "classical"), not everyday ones ("open")."""
    found: set[str] = set()
    for match in _SPECIFIC.finditer(query.strip()):
        found.update(search_stem(w) for w in words(match.group()) if w not in RECALL_STOPWORDS)
    return found


def specific_words(text: str) -> list[str]:
    """The distinct specific words of ``text`` (see :func:`specific_terms`), lower-cased
    and unstemmed (as the archive is searched), in order."""
    seen: dict[str, None] = {}
    for match in _SPECIFIC.finditer(text.strip()):
        for w in words(match.group()):
            if w not in RECALL_STOPWORDS and (len(w) > 1 or w.isdigit()):
                seen.setdefault(w, None)
    return list(seen)


_GATHERING = re.compile(
    r"\b(?:both|all|every|each|ever|how many|how often|what (?:activities|things|kinds|events"
    r"|types)|which \w+ (?:have|has|did))\b",
    re.IGNORECASE,
)


def gathers(query: str) -> bool:
    """True for a question whose answer is usually in several places ("both", "all", "how
    many times", "what activities"); an "all" that closes or checks the turn ("that's all",
    "did you get all that?", "at all", "I think that covers it all.") does not count."""
    return bool(_GATHERING.search(without_closings(query)))


def rare_terms(query: str, terms: Sequence[str], texts: Iterable[str]) -> set[str]:
    """The query's specific ``terms`` (see :func:`specific_terms`) found in at most one of
    ``texts`` (the messages in view, the question included): words the recent
    conversation has not been using, so one of them alone points at the archive."""
    counts = dict.fromkeys(set(terms) & specific_terms(query), 0)
    for text in texts:
        for term in counts.keys() & set(_topic_terms(text)):
            counts[term] += 1
    return {t for t, n in counts.items() if n <= 1}


# -- the context, read incrementally ----------------------------------------------------

_INSTRUCTIONS = ("system", "developer")


class _Read:
    """One context message as recall read it (kept while the message is in the context)."""

    __slots__ = ("content", "message", "norm", "role", "size", "terms", "text")

    def __init__(self, message: Any) -> None:
        self.message = message  # held, so its id is not reused while cached
        mapping = isinstance(message, Mapping)
        self.role = message.get("role") if mapping else None
        self.content = message.get("content") if mapping else None
        self.text = spoken_text(message)
        self.terms: tuple[str, ...] = _topic_terms(self.text) if self.text else ()
        self.norm = normalize_verbatim(self.text) if self.text else ""  # for the view
        self.size = estimate_text_tokens(self.text) if self.text else 0  # for the block's cap

    def changed(self) -> bool:
        # a tool result is written into its placeholder message in place (Pipecat)
        return isinstance(self.message, Mapping) and self.message.get("content") is not self.content


def _common_prefix(a: list[Any], b: list[Any]) -> int:
    """How many leading items ``a`` and ``b`` share (compared as lists: identity first),
    by bisection on slices, so an unchanged context costs no Python loop over it."""
    hi = min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    lo = 0  # a[:lo] == b[:lo]; a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class ContextTerms:
    """The context's messages as recall reads them, kept from turn to turn: each
    :meth:`update` reads only the messages new since the last one (the unchanged prefix is
    found by identity; a message moved, e.g. by a splice, is found again by identity), and
    keeps the statistics of :func:`common_terms`, :func:`rare_terms`, the view's words and
    :func:`instruction_names` up to date, so a turn's work follows what changed, not the
    context's length. The answers are those of the pure functions over the same messages.

    Attributes:
        read: How many messages' text was read so far (what a turn costs).
    """

    def __init__(self) -> None:
        """An empty context."""
        self._messages: list[Any] = []
        self._reads: list[_Read] = []
        self._df: dict[str, int] = {}  # topic word -> how many messages have it
        self._texts = 0  # messages with text
        self._watched: list[int] = []  # positions of tool and instruction messages
        self._norms: list[str] = []  # each message's normalized text, in order
        # each word of the normalized texts (space-delimited) -> the messages that have it
        self._tokens: dict[str, dict[_Read, int]] = {}
        self._joined: str | None = None  # the normalized texts joined, when needed
        self._size = 0  # the texts' estimated tokens
        self.read = 0

    def update(self, messages: Sequence[Any]) -> None:
        """Bring the statistics to ``messages`` (the context now)."""
        current = list(messages)
        kept = _common_prefix(self._messages, current)
        if kept == len(self._reads):  # only added (the usual turn): extend in place
            reads, norms, watched = self._reads, self._norms, self._watched
            spare: dict[int, _Read] = {}
        else:
            old_tail = self._reads[kept:]
            reads, norms = self._reads[:kept], self._norms[:kept]
            watched = [i for i in self._watched if i < kept]
            spare = {id(r.message): r for r in old_tail}
            for r in old_tail:
                self._remove(r)
        for i in watched:
            if reads[i].changed():
                self._remove(reads[i])
                reads[i] = self._read(reads[i].message)
                norms[i] = reads[i].norm
                self._add(reads[i])
        for i, m in enumerate(current[kept:], start=kept):
            found = spare.get(id(m))
            r = found if found and found.message is m and not found.changed() else self._read(m)
            self._add(r)
            reads.append(r)
            norms.append(r.norm)
            if r.role == "tool" or r.role in _INSTRUCTIONS:
                watched.append(i)
        self._messages, self._reads, self._norms = current, reads, norms
        self._watched, self._joined = watched, None

    def _read(self, message: Any) -> _Read:
        self.read += 1
        return _Read(message)

    def _add(self, r: _Read) -> None:
        if r.text:
            self._texts += 1
            self._size += r.size
            for t in r.terms:
                self._df[t] = self._df.get(t, 0) + 1
            for token in set(r.norm.split(" ")):
                posting = self._tokens.setdefault(token, {})
                posting[r] = posting.get(r, 0) + 1

    def _remove(self, r: _Read) -> None:
        if r.text:
            self._texts -= 1
            self._size -= r.size
            for t in r.terms:
                n = self._df[t] - 1
                if n:
                    self._df[t] = n
                else:
                    del self._df[t]
            for token in set(r.norm.split(" ")):
                posting = self._tokens[token]
                if posting[r] > 1:
                    posting[r] -= 1
                elif len(posting) > 1:
                    del posting[r]
                else:
                    del self._tokens[token]

    def names(self) -> frozenset[str]:
        """:func:`instruction_names` of the context."""
        found: set[str] = set()
        for i in self._watched:
            r = self._reads[i]
            if r.role in _INSTRUCTIONS:
                found |= names_in(r.text)
        return frozenset(found)

    def common(self, *, share: float = 0.4, min_texts: int = MIN_COMMON_TEXTS) -> Container[str]:
        """:func:`common_terms` of the context's texts, answered term by term."""
        # valid until the next update (read at once, by :func:`focus`)
        return _Common(self._df, self._texts, share, min_texts)

    def rare(self, query: str, terms: Sequence[str]) -> set[str]:
        """:func:`rare_terms` of the context's texts."""
        return {t for t in set(terms) & specific_terms(query) if self._df.get(t, 0) <= 1}

    def fingerprint(self) -> tuple[tuple[Any, str], ...]:
        """Each message's role and text as read, in order: equal for two contexts whose
        statistics, view and size are equal (what a choice made on one may be reused for)."""
        return tuple((r.role, r.text) for r in self._reads)

    def tokens(self) -> int:
        """The context's texts' estimated tokens (kept by :meth:`update`, not recounted)."""
        return self._size

    def terms(self) -> Container[str]:
        """Every topic word of the context's texts (answered term by term)."""
        return self._df.keys()

    def normalized(self) -> list[str]:
        """The context's texts normalized for the view (see ``select.make_view``), in order
        (``""`` for a message without text, which no verbatim check can match)."""
        return self._norms

    def says(self, norm: str) -> bool:
        """Whether a context message's normalized text contains ``norm`` (normalized, see
        ``select.in_view``): as ``norm in "\\n".join(self.normalized())``, but only the
        messages that have one of its inner words whole (every occurrence of ``norm`` in a
        message has them, spaces on both sides) are searched."""
        inner = norm.split(" ")[1:-1]
        if not inner:  # a word or two: the whole context, searched once joined
            if self._joined is None:
                self._joined = "\n".join(self._norms)
            return norm in self._joined
        # the messages having the rarest inner word; a word no message has ends it (a hit's
        # text usually has one: most hits are not in view, and this runs for each of them)
        tokens = self._tokens
        fewest: dict[_Read, int] | None = None
        for w in inner:
            posting = tokens.get(w)
            if not posting:
                return False
            if fewest is None or len(posting) < len(fewest):
                fewest = posting
        return any(norm in r.norm for r in fewest or ())


class _Common:
    """Membership in :func:`common_terms`' answer without building the set."""

    __slots__ = ("_df", "_floor")

    def __init__(self, df: Mapping[str, int], texts: int, share: float, min_texts: int):
        self._df = df if texts >= min_texts else {}
        self._floor = share * texts

    def __contains__(self, term: object) -> bool:
        n = self._df.get(term, 0)  # type: ignore[call-overload]
        return n > 0 and n >= self._floor

"""Recall's selection: which of the archive's hits are worth recalling this turn.

A hit is relevant when it shares enough of the query's topic terms (:func:`relevance`), and
worth recalling when it tells the model something not already in view (:func:`in_view`):
verbatim in the context, or every word of its own already in the summary or a pinned fact.
Pure.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipecat_summarizer._recall.query import (
    ContextTerms,
    gathers,
    is_when,
    specific_words,
    topic_terms,
)
from pipecat_summarizer._text.messages import ArchivedText
from pipecat_summarizer._text.text_caches import text_cache
from pipecat_summarizer._text.vocabulary import RECALL_STOPWORDS as STOPWORDS
from pipecat_summarizer._text.vocabulary import normalize_verbatim, search_stem, words

if TYPE_CHECKING:
    from pipecat_summarizer.params import RecallParams


@dataclass(frozen=True)
class Snippet(ArchivedText):
    """One archived message chosen for recall: the six fields of
    :class:`~pipecat_summarizer._text.messages.ArchivedText` (``content`` is its text), then:

    Parameters:
        relevance: Share of the query's topic words it contains (with its reply).
        rank: Its place in the archive's ranking (0 = best).
        reply_role: Who spoke next, when that message was archived too.
        reply: What they said (a recalled question is no use without its answer).
    """

    relevance: float
    rank: int
    reply_role: str | None = None
    reply: str | None = None

    @property
    def text(self) -> str:
        """Its text (``content``)."""
        return self.content

    @property
    def full_text(self) -> str:
        """The message and its reply."""
        return f"{self.content}\n{self.reply}" if self.reply else self.content


#: A text as the selection reads it (see :func:`_read`).
Read = tuple[str, frozenset[str], frozenset[str]]


@text_cache(maxsize=4096)  # the archive returns the same messages turn after turn
def _read(text: str) -> Read:
    """``text`` as the selection reads it, from one split into words: its normalized form
    (:func:`normalize_verbatim`), the stems of all its words (:func:`relevance`) and its
    topic terms (``topic_terms`` of the normalized form, :func:`in_view`: normalizing
    lower-cases, already idempotent, and folds spaces, which no word holds: the same
    words), each word stemmed once."""
    said = set(words(text))
    topic = [w for w in said - STOPWORDS if len(w) > 1 or w.isdigit()]
    return (
        normalize_verbatim(text),
        frozenset(map(search_stem, said)),
        frozenset(map(search_stem, topic)),
    )


def _joined(text: Read, reply: Read) -> Read:
    """:func:`_read` of a hit's text and its reply joined by a newline (``f"{text}\\n{reply}"``,
    neither blank), from theirs: the newline ends a word and folds into one space with the
    spaces around it, so the words are the text's then the reply's, and the normalized form
    is the two joined by a space."""
    return f"{text[0]} {reply[0]}", text[1] | reply[1], text[2] | reply[2]


def _stems(text: str) -> frozenset[str]:
    return _read(text)[1]


@text_cache(maxsize=256)  # one query's terms, judged against every hit of the turn
def _split_when(terms: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``terms`` as (its core, its date and time words not in the core): the core is the
    terms that are not date words, or all of them when the query has nothing else."""
    core = tuple(t for t in terms if not is_when(t)) or terms
    in_core = set(core)  # a set: a 100 KB question has thousands of terms
    return core, tuple(t for t in terms if t not in in_core)


def relevance(
    terms: Sequence[str],
    text: str,
    rare: Iterable[str] = (),
    *,
    strict: bool = True,
    need: int | None = None,
) -> float:
    """Share of ``terms`` (stemmed topic words of a query) present in ``text``.

    Date and time words (:func:`is_when`) count when present and are not missed when
    absent (unless the query has nothing else); a text must share another word. ``strict``:
    0.0 when a query of three or more terms shares only one with ``text``, unless that one
    is ``rare`` (new to the conversation in view, like "Mozart"): one everyday shared word
    ("open") is not a strong match. ``need``: the shared words a strong match needs, when
    not that rule's.
    """
    if not terms:
        return 0.0
    present = _stems(text)
    core, when_terms = _split_when(tuple(terms))
    shared = [t for t in core if t in present]
    when = sum(1 for t in when_terms if t in present)
    # two shared words for a query of three or more besides its date words (an absent
    # date word changes nothing); a date word present counts as one of the two
    if need is None:
        need = 2 if len(core) > 2 else 1
    strong = len(shared) + when >= need or bool(set(shared) & set(rare))
    if not shared or (strict and not strong):
        return 0.0
    return (len(shared) + when) / (len(core) + when)


@dataclass(frozen=True)
class View:
    """What the model already sees this turn: for "already in view" checks.

    Parameters:
        text: Every context message's text, the summary and the pinned facts, normalized
            (see :func:`normalize`) and joined.
        terms: Their stemmed topic words (anything that answers ``in``).
        says: When given, whether a normalized text is said verbatim in view, answered by
            the context's word index (then ``text`` holds only the texts beside the context).
    """

    text: str
    terms: Container[str]
    says: Callable[[str], bool] | None = None


def make_view(texts: Iterable[str]) -> View:
    """The view of the given texts (context messages, summary, pinned facts)."""
    texts = [t for t in texts if t]
    terms: set[str] = set()
    for t in texts:
        terms.update(topic_terms(t))
    return View("\n".join(normalize_verbatim(t) for t in texts), frozenset(terms))


def context_view(context: ContextTerms, texts: Iterable[str]) -> View:
    """:func:`make_view` of the context messages ``context`` keeps (each read once, see
    :class:`~pipecat_summarizer._recall.query.ContextTerms`) and the other ``texts`` (summary,
    pinned facts). Valid until the context's next update."""
    texts = [t for t in texts if t]
    terms: set[str] = set()
    for t in texts:
        terms.update(topic_terms(t))
    joined = "\n".join(normalize_verbatim(t) for t in texts)
    return View(joined, _Either(context.terms(), frozenset(terms)), context.says)


class _Either:
    """A term in either of two collections (without building their union)."""

    __slots__ = ("_a", "_b")

    def __init__(self, a: Container[str], b: Container[str]) -> None:
        self._a, self._b = a, b

    def __contains__(self, term: object) -> bool:
        return term in self._a or term in self._b


def in_view(text: str, view: View, query_terms: Sequence[str]) -> bool:
    """True when ``text`` would tell the model nothing new: it is verbatim in view, or every
    topic word it has beyond the query's is already in view (a paraphrase the summary or a
    pinned fact carries; a message with no word of its own adds nothing either)."""
    return _seen(_read(text), view, set(query_terms))


def _seen(read: Read, view: View, asked: set[str]) -> bool:
    """:func:`in_view` of a text read by :func:`_read`, the query's terms a set."""
    norm, _, topic = read
    if not norm or norm in view.text or (view.says is not None and view.says(norm)):
        return True
    return all(t in view.terms for t in topic if t not in asked)


class _Relevance:
    """The relevance of a text to one query: to the whole query (``terms``) or to the best
    of its ``parts`` (see :func:`~pipecat_summarizer._recall.query.query_parts`), each scored
    as :func:`relevance` scores it: a message that answers one half of a two-part question
    is as relevant as one that answers a one-part question. A part of two words or more
    needs two of them (or a ``rare`` one): a part is a short query, and one everyday word of
    it ("leave") is not a strong match. Each part's core, date words and the shared words it
    needs are read once for all the hits of a selection, and the strict and the loose score
    come from one count."""

    __slots__ = ("_rare", "_sets")

    def __init__(
        self, terms: Sequence[str], parts: Sequence[Sequence[str]], rare: Iterable[str]
    ) -> None:
        self._rare = frozenset(rare)
        sets = []
        needs: list[tuple[Sequence[str], int | None]] = [(terms, None)]
        needs += [(p, min(2, len([t for t in p if not is_when(t)]) or 1)) for p in parts]
        for part, need in needs:
            if not part:
                continue  # relevance 0.0: never above another
            core, when_terms = _split_when(tuple(part))
            if need is None:
                need = 2 if len(core) > 2 else 1
            sets.append((core, when_terms, need, len(core)))
        self._sets = tuple(sets)

    def scores(self, present: frozenset[str]) -> tuple[float, float]:
        """The relevance of a text whose stems are ``present``: ``(strict, loose)``, as
        :func:`relevance` with ``strict=True`` and ``strict=False``."""
        strict = loose = 0.0
        rare = self._rare
        for core, when_terms, need, size in self._sets:
            shared = [t for t in core if t in present]
            if not shared:
                continue
            when = sum(1 for t in when_terms if t in present)
            score = (len(shared) + when) / (size + when)
            if score > loose:
                loose = score
            if score > strict and (len(shared) + when >= need or any(t in rare for t in shared)):
                strict = score
        return strict, loose


#: How many more hits :func:`select_hits` judges past the frame's deadline for a first
#: strong match, when none is chosen yet (each costs the frame ~0.1 ms).
PAST_DEADLINE_HITS = 4


def select_hits(
    hits: Sequence[Any],
    query: str,
    view: View,
    params: RecallParams,
    *,
    replies: Mapping[tuple[str, int], tuple[str, str]] | None = None,
    terms: Sequence[str] | None = None,
    rare: Iterable[str] = (),
    exclude_roles: Iterable[str] = ("system", "developer"),
    min_similarity: float | None = None,
    parts: Sequence[Sequence[str]] = (),
    most: int | None = None,
    weak_per_strong: float | None = None,
    least_weak: int = 0,
    few_strong: int | None = None,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[Snippet]:
    """The hits worth recalling: not in view, no duplicates; the strong matches first
    (relevant enough, see ``params.min_score``), then, with ``params.fill``, the other hits
    that share a topic word with the query, in the archive's order: only when there is a
    strong match. A hit whose words were shown already as an earlier hit's reply
    brings the message that followed it (the answer to that reply's question).

    Args:
        hits: The archive's hits, best first (``SearchHit`` or anything with its fields).
        query: The query they answer.
        view: What the model already sees.
        params: The recall params (``min_score``, ``max_snippets``).
        replies: ``(call_id, position) -> (role, text)`` of the message that followed a
            hit (the answer to a question); it travels with the hit, and is judged with it.
        terms: The query's terms that count (default: all its topic words; see
            :func:`focus`).
        rare: Query terms new to the conversation in view (see :func:`rare_terms`): one of
            them alone is a strong enough match.
        exclude_roles: Roles never recalled (instructions are not conversation).
        min_similarity: With semantic recall: a hit whose ``similarity`` (cosine with the
            query, see :mod:`pipecat_summarizer._recall.semantic`) is at least this is relevant
            enough without sharing the query's words (a paraphrase).
        parts: The terms of each part of a two-part question (see
            :func:`~pipecat_summarizer._recall.query.query_parts`): a hit relevant to one
            part is relevant.
        weak_per_strong: When given, the filling takes at most this many weak hits per
            strong match (rounded up), but never fewer than ``least_weak``.
        least_weak: The filling's weak hits ``weak_per_strong`` never cuts below, when
            at most ``few_strong`` strong matches were chosen (``None``: however many).
        most: The caller keeps only the first ``most`` snippets: the hits stop being
            judged once that many strong matches are chosen (the first ``most`` are the
            same as without it).
        deadline: When the frame's time is up (``clock``'s time): hits are judged best
            first, and once it has passed no more are once a strong match is chosen, nor
            after :data:`PAST_DEADLINE_HITS` more without one (a late answer to an earlier
            question may hold none: judging all of it held the frame for milliseconds);
            what is chosen so far is returned. ``None``: every hit is judged.
        clock: The clock ``deadline`` is on (the running loop's, for the recall step).

    Returns:
        At most ``params.max_snippets`` snippets (texts not yet cut).
    """
    terms = list(terms) if terms is not None else topic_terms(query)
    judge = _Relevance(terms, parts, rare)
    asked = set(terms)
    excluded = set(exclude_roles)
    replies = replies or {}
    out: list[Snippet] = []
    weak: list[Snippet] = []  # filling: share a topic word, not a strong match
    seen: set[str] = set()
    enough = params.max_snippets if most is None else max(1, min(most, params.max_snippets))
    past = 0  # hits judged after the deadline
    for rank, hit in enumerate(hits):
        if deadline is not None and clock() >= deadline:
            if out or past >= PAST_DEADLINE_HITS:
                break  # the frame's time is up: what is chosen so far is placed
            past += 1  # none chosen yet: a strong match among the next few is still worth it
        text = str(getattr(hit, "content", "") or "")
        role = str(getattr(hit, "role", "") or "")
        if role in excluded or not text.strip():
            continue
        call_id = str(getattr(hit, "call_id", ""))
        position = int(getattr(hit, "position", 0))
        reply_role, reply = replies.get((call_id, position), (None, None))
        if reply_role in excluded or not (reply or "").strip():
            reply_role, reply = None, None
        # each text read once (:func:`_read`): normalized, stemmed, its topic terms; a hit is
        # judged with its reply (as found, even when the reply is quoted instead below)
        said = _read(text)
        answer = _read(reply) if reply else None
        whole = said if answer is None else _joined(said, answer)
        norm = said[0]
        if norm in seen:
            # the same words said again, archived by two calls, or shown already as an
            # earlier hit's reply: then what followed them (the answer) may still be new
            if answer is None or answer[0] in seen:
                continue
            role, text, position = str(reply_role), str(reply), position + 1
            norm = answer[0]
            reply_role, reply, answer = None, None, None
        strict, loose = judge.scores(whole[1])
        score = strict
        similarity = getattr(hit, "similarity", None)
        close = min_similarity is not None and similarity is not None
        close = close and similarity >= min_similarity  # type: ignore[operator]
        bucket = out
        if not close and (score < params.min_score or score == 0.0):
            score = loose if params.fill else 0.0
            if score == 0.0 or len(weak) >= params.max_snippets:
                continue
            bucket = weak
        if _seen(whole, view, asked):
            continue
        if answer is not None and (_seen(answer, view, asked) or answer[0] in seen):
            reply_role, reply, answer = None, None, None
        seen.add(norm)
        if answer is not None:
            seen.add(answer[0])
        bucket.append(
            Snippet(
                call_id=call_id,
                position=position,
                turn=int(getattr(hit, "turn", 0)),
                at=float(getattr(hit, "at", 0.0) or 0.0),
                role=role,
                content=text,
                relevance=score,
                rank=rank,
                reply_role=reply_role,
                reply=reply,
            )
        )
        if len(out) >= enough:
            break
    if not out:
        return []  # filling needs a strong match
    if weak_per_strong is not None:  # the filling, in proportion to the strong matches
        few = few_strong is None or len(out) <= few_strong
        weak = weak[: max(least_weak if few else 0, math.ceil(weak_per_strong * len(out)))]
    return (out + weak)[: params.max_snippets]


# a question that asks for a list: a plural thing asked of someone ("What books has Melanie
# read?", "Which cities has Jon visited?"), "what kinds of", "in what ways", "what are some",
# "what has Melanie painted?"
_LISTING = re.compile(
    r"\b(?:what|which)\s+(?:[\w+/'-]+\s+){0,3}?[\w/'-]*[^s\W]s\s+"
    r"(?:has|have|had|does|do|did|are|were)\b"
    r"|\b(?:what|which)\s+(?:kinds|types|sorts)\s+of\b|\bin what ways\b|\bwhat are some\b"
    r"|\bwhat (?:has|have)\s+\w+\s+\w+ed\b",
    re.IGNORECASE,
)


def lists(query: str) -> bool:
    """True for a question that asks for a list (:func:`gathers`, or a plural thing asked of
    someone: "What books has Melanie read?", "in what ways", "what are some"): its pieces
    are often in several places, each matching the question no better than the others."""
    return gathers(query) or bool(_LISTING.search(query))


def gather_words(
    hits: Sequence[Any],
    query: str,
    terms: Sequence[str],
    min_score: float,
    *,
    limit: int = 3,
    first: int = 10,
) -> list[str]:
    """The words of a second search, when the question's pieces may be in several calls:
    the names and things (specific words, see
    :func:`~pipecat_summarizer._recall.query.specific_words`) the first strong hits say and
    the query does not, most frequent first (at most ``limit``). ``[]`` unless the question
    gathers ("all", "both", "how many times", see
    :func:`~pipecat_summarizer._recall.query.gathers`): on LoCoMo across calls a second
    search whenever the strong hits came from two calls filled the block with noise
    (81.9% -> 81.1% answer recall, 12.5% -> 13.9% input, conversations 30 and 26)."""
    if not gathers(query):
        return []
    strong = []
    for hit in hits[:first]:
        text = str(getattr(hit, "content", "") or "")
        if text and relevance(terms, text) >= max(min_score, 1e-9):
            strong.append((str(getattr(hit, "call_id", "")), text))
    if not strong:
        return []
    asked = set(topic_terms(query)) | set(terms)
    counts: dict[str, int] = {}
    for _, text in strong:
        for w in specific_words(text):
            if search_stem(w) not in asked:
                counts[w] = counts.get(w, 0) + 1
    return sorted(counts, key=lambda w: -counts[w])[:limit]


def block_budget(
    snippets: Sequence[Snippet], min_tokens: int, max_tokens: int, *, listing: bool = False
) -> int:
    """An adaptive block's size (tokens), by what was found: ``min_tokens`` for one hit
    with every word of the query (the answer is there, the rest is noise); more the weaker
    the best match, the more calls the relevant hits come from (a question whose pieces
    were said in several calls) and the more hits tie for best; at most ``max_tokens``.
    ``listing`` (a question that asks for a list, see :func:`lists`): ``max_tokens``, as
    a list is not in one hit however well that one matches.

    Monotone: a weaker best match, one more call or one more tie never makes it smaller.
    """
    lo, hi = min(min_tokens, max_tokens), max_tokens
    if not snippets:
        return lo
    if listing:
        return hi
    top = max(s.relevance for s in snippets)
    ties = sum(1 for s in snippets if s.relevance >= top)
    calls = len({s.call_id for s in snippets if s.relevance >= 0.5 * top})
    need = 2.0 * (1.0 - min(1.0, top)) + 0.25 * (calls - 1) + 0.1 * (ties - 1)
    return lo + round((hi - lo) * min(1.0, max(0.0, need)))


def block_cap(
    params: RecallParams, context_tokens: int, *, listing: bool = False
) -> tuple[int, int]:
    """An adaptive block's cap, tokens and snippets, for a context of ``context_tokens``:
    what ``params.request_tokens`` leaves after the context, between ``params.min_tokens``
    and ``params.max_tokens``; the snippets in proportion (``params.max_snippets`` at the
    full cap). A new call, whose context holds nothing of the caller's past, gets the
    largest block; a long call, whose context holds much of it, a smaller one (on LoCoMo
    across calls 81.3% -> 84.2% answer recall at 10.3% -> 14.8% of the full buffer's
    input; at question time, with a long context, unchanged: conversations 30 and 26).
    ``request_tokens=None``: always ``max_tokens`` and ``max_snippets``.

    ``listing`` (a question that asks for a list, see :func:`lists`): ``max_tokens`` and
    ``max_snippets`` in any context. Its pieces each match it no better than the others, so
    the context's cap kept the first few the archive ranked: on LoCoMo at question time
    (conversations 30 and 26, their first searches' hits chosen again without the view) the
    first 22-29 snippets held 55 of the multi-hop questions' 102 evidence lines, the first
    48 held 64.

    Monotone: a longer context never gets a larger cap.
    """
    hi, most = params.max_tokens, params.max_snippets
    if params.request_tokens is None or listing:
        return hi, most
    lo = min(params.min_tokens, hi)
    cap = min(hi, max(lo, params.request_tokens - max(0, context_tokens)))
    return cap, max(1, round(most * cap / hi))


def still_relevant(snippets: Sequence[Snippet], query: str, min_score: float) -> list[Snippet]:
    """The snippets of a late answer that also answer this turn's query."""
    terms = topic_terms(query)
    out = []
    for s in snippets:
        score = relevance(terms, s.full_text)
        if score > 0.0 and score >= min_score:
            out.append(s)
    return out

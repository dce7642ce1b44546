"""What recall gathers around the first search's hits: replies, hits by meaning, a second search.

Hits found by meaning are fused with the lexical ones, their replies taken from the semantic
index (:func:`with_meaning`). A recalled question is worth little without its answer, so the
message that followed each of the first hits is read with them (:func:`read_around`, one
query on a ``MemoryStore``); and a reply that repeats the question's words is worth little
without what it answers, so the message said just before each of the very first hits joins
them as a hit of its own (:func:`with_befores`). A question that asks for several pieces
("all", "both", "how many times") may need turns of several calls that share no word with
it: the first strong hits' names and things
(:func:`~pipecat_summarizer._recall.select.gather_words`) are searched once more, within what
is left of the budget (:func:`second_search`), and the hits found only by that search join
the snippets after the first search's own (:func:`with_gathered`, pure).

:class:`~pipecat_summarizer._recall.step.RecallStep` calls these; they hold no state.
"""

from __future__ import annotations

import asyncio
import re
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import is_dataclass
from dataclasses import replace as dc_replace
from typing import Any

from pipecat_summarizer._recall.select import Snippet, View, select_hits
from pipecat_summarizer._text.vocabulary import search_stem as stem
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store._rows import BEFORE_HITS, Before, said_before

#: The most of an archived message's text recall reads (characters, ~500 tokens: more than a
#: spoken turn; a cleared tool result can be 30 KB): the part around the first searched word.
#: What follows a search (selection, rendering, corrections) then costs the same for any
#: message, so the frame's time after the search is bounded by construction.
MAX_HIT_CHARS = 2_000

#: A search's hits (best first) and the replies read for them, by ``(call_id, position)``:
#: ``(role, content)`` of the message that followed the hit.
Found = tuple[list[Any], dict[tuple[str, int], tuple[str, str]]]


def clip(text: str, words: Sequence[str], max_chars: int = MAX_HIT_CHARS) -> str:
    """``text`` as it is when at most ``max_chars`` long, else the ``max_chars`` around the
    first place one of ``words`` starts (a quarter before it; the start when none is
    found), cut at spaces: a substring, so the "already in view" checks still hold (pure)."""
    if len(text) <= max_chars:
        return text
    # found in ``text`` itself, case aside: ``text.lower()`` can be longer ("İ" lowers to two
    # characters), and its places would drift off the word
    places = [re.search(re.escape(w[:4]), text, re.IGNORECASE) for w in words if w]
    found = [m.start() for m in places if m is not None]
    lo = max(0, min(found, default=0) - max_chars // 4)
    hi = min(len(text), lo + max_chars)
    lo = max(0, hi - max_chars)
    if lo > 0:  # whole words: start after a space, end before one
        space = text.find(" ", lo, hi)
        lo = space + 1 if space >= 0 else lo
    if hi < len(text):
        space = text.rfind(" ", lo, hi)
        hi = space if space > lo else hi
    return text[lo:hi]


def clipped(found: Found, words: Sequence[str], max_chars: int = MAX_HIT_CHARS) -> Found:
    """``found`` with each hit's and reply's text cut by :func:`clip` (hits are copied only
    when longer; a hit that is not a dataclass is kept whole)."""
    hits, replies = found
    out = []
    for h in hits:
        text = getattr(h, "content", None)
        if isinstance(text, str) and len(text) > max_chars and is_dataclass(h):
            h = dc_replace(h, content=clip(text, words, max_chars))  # type: ignore[type-var]
        out.append(h)
    for key, (role, text) in replies.items():
        if len(text) > max_chars:
            replies[key] = (role, clip(text, words, max_chars))
    return out, replies


async def read_replies(
    archive: Any, hits: Sequence[Any], replies: dict[tuple[str, int], tuple[str, str]]
) -> None:
    """Read into ``replies`` the message that followed each of ``hits`` not there yet (the
    answer to a question, the rest of a story): see :func:`read_around`."""
    await read_around(archive, hits, (), replies, {})


async def read_around(
    archive: Any,
    hits: Sequence[Any],
    near: Sequence[Any],
    replies: dict[tuple[str, int], tuple[str, str]],
    befores: dict[tuple[str, int], Before | None],
) -> None:
    """Read into ``replies`` the message that followed each of ``hits`` not there yet, and
    into ``befores`` the message said just before each of ``near`` (``None``: there is
    none of the caller's): one query when the archive has ``messages_at``
    (``MemoryStore``), else one ``message`` read each; nothing when the archive has no
    ``message``. What :func:`read_ahead` read for these very hits is taken instead."""
    if getattr(archive, "message", None) is None:
        return
    after: list[Any] = []
    for h in hits:
        key = (h.call_id, h.position)
        if key in replies:
            continue
        ahead = _read_ahead(h, 1)
        if ahead is _NOT_READ:
            after.append(h)
        elif ahead is not None:
            replies[key] = ahead  # type: ignore[assignment]
    before: list[Any] = []
    for h in near:
        ahead = _read_ahead(h, 2)
        if ahead is _NOT_READ:
            before.append(h)
        else:
            befores[(h.call_id, h.position)] = ahead  # type: ignore[assignment]
    keys = [(h.call_id, h.position + 1) for h in after]
    keys += [(h.call_id, h.position - 1) for h in before]
    if not keys:
        return
    batch = getattr(archive, "messages_at", None)
    if batch is not None:
        found = list(await batch(keys))
    else:
        found = await asyncio.gather(*(archive.message(c, p) for c, p in keys))
    for h, m in zip(after, found[: len(after)], strict=True):
        if m is not None and _same_caller(h, m):
            replies[(h.call_id, h.position)] = (str(m.role), str(m.content))
    for h, m in zip(before, found[len(after) :], strict=True):
        befores[(h.call_id, h.position)] = said_before(h, m)


def known_befores(
    found: Sequence[Any], hits: Sequence[Any], index: Any
) -> dict[tuple[str, int], Before | None]:
    """The befores known for the first ``BEFORE_HITS`` of ``hits`` (``found`` fused with the
    ranking by meaning): read with the search (``found.befores``), or held by the semantic
    ``index`` (pure: ``index`` is only read)."""
    known = dict(getattr(found, "befores", {}))
    if index is not None:
        for h in hits[:BEFORE_HITS]:
            key = (h.call_id, h.position)
            if key not in known:
                said = index.before(h.call_id, h.position)
                if said is not None:
                    known[key] = said
    return known


def unread_befores(
    hits: Sequence[Any], befores: Mapping[tuple[str, int], Before | None]
) -> list[Any]:
    """The first ``BEFORE_HITS`` of ``hits`` whose before is still to read (a hit at a
    call's first position has none) (pure)."""
    first = hits[:BEFORE_HITS]
    return [h for h in first if (h.call_id, h.position) not in befores and h.position > 0]


#: Roles never quoted before a hit (instructions are not conversation, as ``select_hits``).
INSTRUCTIONS = frozenset({"system", "developer"})


def with_befores(
    hits: Sequence[Any],
    replies: Mapping[tuple[str, int], tuple[str, str]],
    befores: Mapping[tuple[str, int], Before | None],
) -> Found:
    """``hits`` with the message said just before each of the first ``BEFORE_HITS`` that
    the assistant said (of ``befores``) as a hit of its own right after it, its reply the
    hit, and ``replies`` with those: the assistant's reply often repeats the question's
    words while the answer is in the caller's message before it ("Paris?! That's great!"),
    so it is judged with the hit's words and shown beside it. The caller's own hits bring
    none (what the assistant said before one is mostly another topic: on LoCoMo half the
    added input, and held out a little more recall). Left off: an instruction, a message
    that is a hit already, a hit that is not a dataclass (pure)."""
    out: list[Any] = []
    replies = dict(replies)
    seen = {(h.call_id, h.position) for h in hits}
    for i, h in enumerate(hits):
        out.append(h)
        said = befores.get((h.call_id, h.position)) if i < BEFORE_HITS else None
        key = (h.call_id, h.position - 1)
        if getattr(h, "role", None) != "assistant":
            continue  # a caller's own statement: what was said before it is another topic
        if said is None or said[0] in INSTRUCTIONS or key in seen or not is_dataclass(h):
            continue
        role, content, turn, at = said
        seen.add(key)
        replies[key] = (str(getattr(h, "role", "")), str(getattr(h, "content", "")))
        moved: Any = dc_replace  # a hit of any dataclass type
        out.append(moved(h, position=key[1], role=role, content=content, turn=turn, at=at))
    return out, replies


def _same_caller(hit: Any, message: Any) -> bool:
    """Whether ``message`` may stand as ``hit``'s reply: said in the hit's caller's archive
    (a call key holding two callers' messages never lends one's words as the other's reply,
    as the stores' own reply reads)."""
    user = getattr(hit, "user_id", None)
    return user is None or getattr(message, "user_id", user) == user


def fused(
    found: Sequence[Any], first: int, ranked: tuple[list, Mapping] | None, index: Any
) -> tuple[Found, list[Any]]:
    """A search's answer ``found`` as recall reads it, before its replies are read: its hits
    (fused with the ranking by meaning ``ranked`` when there is one, the replies ``index``
    holds for them taken from it, see :func:`with_meaning`), the replies known (read with
    the search, or the index's), and those of the first ``first`` hits whose reply is still
    to read (:func:`read_replies`). The turn's search and the early work's reading of the
    same answer share it (pure: ``index`` is only read)."""
    hits = list(found or [])
    replies: dict[tuple[str, int], tuple[str, str]] = dict(getattr(found, "replies", {}))
    # the hits the store read replies for with the search (``found.replies``)
    read = {(h.call_id, h.position) for h in hits[:first]} if hasattr(found, "replies") else ()
    if index is not None and ranked is not None:
        hits, meant = with_meaning(hits, ranked, index)
        replies.update(meant)  # semantic hits' replies come from the index
    unread = [h for h in hits[:first] if (h.call_id, h.position) not in read]
    return (hits, replies), unread


async def as_found(
    archive: Any,
    found: Sequence[Any],
    words: str,
    first: int,
    *,
    ranked: tuple[list, Mapping] | None = None,
    index: Any = None,
) -> Found:
    """A search's answer ``found`` (of ``words``) as the recall step reads it: its hits
    (fused with the ranking by meaning ``ranked``, when given with its ``index``), the
    replies of the first ``first`` (read with the search, held by the index, read ahead,
    or read now), each text clipped around the words (see :func:`fused`, :func:`clipped`)."""
    (hits, replies), unread = fused(found, first, ranked, index)
    befores = known_befores(found, hits, index)
    await read_around(archive, unread, unread_befores(hits, befores), replies, befores)
    return clipped(with_befores(hits, replies, befores), words.split())


#: Replies and befores read ahead for hits an early search returned (:func:`read_ahead`), by
#: the hit (weakly: an entry goes with its hit): ``(id(hit), reply or None, before or None or
#: _NOT_READ)``.
_AHEAD: weakref.WeakKeyDictionary[Any, tuple[int, Any, Any]] = weakref.WeakKeyDictionary()
_NOT_READ = object()


def _read_ahead(hit: Any, part: int = 1) -> object:
    """What was read ahead for this very hit, its reply (``part`` 1) or its before (2)
    (``None``: it has none), else ``_NOT_READ``."""
    try:
        entry = _AHEAD.get(hit)
    except TypeError:  # a hit that cannot be weakly referenced or hashed
        return _NOT_READ
    if entry is None or entry[0] != id(hit):  # an equal hit, not this one
        return _NOT_READ
    return entry[part]


async def read_ahead(archive: Any, hits: Sequence[Any]) -> None:
    """Read the replies of ``hits`` and the befores of the first ``BEFORE_HITS`` now (an
    early search's, while the caller is still speaking), so the turn's
    :func:`read_around` of these very hits reads nothing."""
    replies: dict[tuple[str, int], tuple[str, str]] = {}
    befores: dict[tuple[str, int], Before | None] = {}
    near = unread_befores(hits, befores)
    await read_around(archive, hits, near, replies, befores)
    if getattr(archive, "message", None) is None:
        return
    for i, h in enumerate(hits):
        key = (h.call_id, h.position)
        before = befores.get(key) if i < BEFORE_HITS else _NOT_READ
        try:
            _AHEAD[h] = (id(h), replies.get(key), before)
        except TypeError:
            return


def with_meaning(hits: Sequence[Any], ranked: tuple[list, Mapping], index: Any) -> Found:
    """The lexical ``hits`` fused with the hits by meaning (``ranked``: the
    :class:`~pipecat_summarizer._recall.semantic.SemanticIndex`'s closest rows and their
    similarities), and the replies the index holds for them (no archive read)."""
    from pipecat_summarizer._recall.fusion import fuse

    close, similarity = ranked
    fused = fuse(list(hits), close, similarity)
    replies: dict[tuple[str, int], tuple[str, str]] = {}
    for h in fused:
        reply = index.reply(h.call_id, h.position)
        if reply is not None:
            replies[(h.call_id, h.position)] = reply
    return fused, replies


async def second_search(
    search: Callable[[str], Awaitable[Found]],
    result: Callable[[asyncio.Task], Found],
    gathered: Sequence[str],
    hits: Sequence[Any],
    wait_s: float,
) -> Found:
    """The second search (``search`` on ``gathered``, the first hits' names and things),
    within ``wait_s``: its hits the first search did not return (``hits``), or nothing when
    late (a late second search is cancelled, never kept for the next turn).

    Args:
        search: Starts the search for a query (the step's, without recall by meaning).
        result: A finished search task's ``(hits, replies)`` (a failure counted and logged
            by the step, and read as nothing).
        gathered: The words searched.
        hits: The first search's hits.
        wait_s: How long the search may take.
    """
    task = asyncio.ensure_future(search(" ".join(gathered)))
    await wait_for_task(task, max(wait_s, 0.0))
    if not task.done():
        task.add_done_callback(consume)
        task.cancel()
        return [], {}
    found, replies = result(task)
    return unseen(found, hits), replies


async def within(task: asyncio.Task, deadline: float) -> tuple[bool, Any]:
    """``(True, task's result)`` once ``task`` is done by ``deadline`` (the loop's clock),
    else ``(False, None)``: it is left running (never cancelled: what it also awaits, a
    forget's watch, still lands) and its exception is read when it ends."""
    if not task.done():
        left = deadline - asyncio.get_running_loop().time()
        await wait_for_task(task, max(0.0, left))
    if not task.done():
        task.add_done_callback(consume)
        return False, None
    return True, task.result()


def unseen(found: Sequence[Any], hits: Sequence[Any]) -> list[Any]:
    """The hits of ``found`` that are not among ``hits`` (by call and position)."""
    seen = {(h.call_id, h.position) for h in hits}
    return [h for h in found if (h.call_id, h.position) not in seen]


def with_gathered(
    snippets: list[Snippet],
    more: Found,
    query: str,
    view: View,
    gathered: Sequence[str],
    params: RecallParams,
    *,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[Snippet]:
    """``snippets`` and, after them, the second search's hits (``more``) that have one of the
    gathered words, within ``params.max_snippets``, no message quoted twice (a hit the
    snippets quote already, as a snippet or as a reply, see :func:`unquoted`); none once
    the frame's ``deadline`` (``clock``'s time, see :func:`select_hits`) has passed."""
    if deadline is not None and clock() >= deadline:
        return snippets
    stems = [stem(w) for w in gathered]
    extra = select_hits(
        more[0],
        query,
        view,
        params,
        replies=more[1],
        terms=stems,  # judged on the gathered words: it need not share the query's
        rare=stems,
        deadline=deadline,
        clock=clock,
    )
    kept = unquoted(extra, quoted(snippets))
    return (snippets + kept)[: params.max_snippets]


def quoted(snippets: Iterable[Snippet]) -> set[tuple[str, int]]:
    """The archived messages ``snippets`` quote, by ``(call_id, position)``: each snippet's
    own and, when it carries one, its reply's (the message after it) (pure)."""
    out: set[tuple[str, int]] = set()
    for s in snippets:
        out.add((s.call_id, s.position))
        if s.reply:
            out.add((s.call_id, s.position + 1))
    return out


def unquoted(extra: Iterable[Snippet], shown: Iterable[tuple[str, int]]) -> list[Snippet]:
    """The snippets of ``extra`` (a second search's) as they join a block that quotes the
    messages ``shown`` already (see :func:`quoted`): each message quoted once. A snippet
    shown already (as a snippet, or as one's reply) brings its own reply instead, the
    message that followed it, as :func:`select_hits` does for a hit shown as an earlier
    hit's reply; nothing when that one is shown too. A reply shown already is left off
    (pure)."""
    seen = set(shown)
    out = []
    for s in extra:
        after = (s.call_id, s.position + 1)
        if (s.call_id, s.position) in seen:
            if not s.reply or after in seen:
                continue
            s = dc_replace(
                s,
                position=s.position + 1,
                role=str(s.reply_role),
                content=s.reply,
                reply_role=None,
                reply=None,
            )
        elif s.reply and after in seen:
            s = dc_replace(s, reply_role=None, reply=None)
        seen |= quoted([s])
        out.append(s)
    return out


async def wait_for_task(task: asyncio.Task, timeout: float) -> None:
    """Wait for ``task`` at most ``timeout`` seconds (it is left running after); if the
    waiting itself is cancelled (the turn's frame, the call), ``task`` is cancelled too and
    its exception read: a cancelled turn leaves no search behind."""
    try:
        await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        task.add_done_callback(consume)
        task.cancel()
        raise


def mark_later(snippets: list[Snippet], later: Sequence[Any]) -> list[Snippet]:
    """``snippets`` with those a ``later`` archived message corrects marked superseded (see
    :func:`~pipecat_summarizer._recall.superseded.supersede`); only those: a correction among
    the snippets themselves is marked once, when the block is rendered (pure).

    Only a later text with a correction's cue can correct anything, and each is tried
    against the snippets said before it: linear in the snippets, where judging every pair
    of snippets (as the rendering does) cost the frame several milliseconds at 40 snippets.
    """
    from pipecat_summarizer._record.corrections import has_cue

    seen = {(s.call_id, s.position) for s in snippets}
    extra = [h for h in later if (h.call_id, h.position) not in seen and has_cue(h.content)]
    if not extra or not snippets:
        return snippets
    from pipecat_summarizer._recall.superseded import supersede

    def key(s: Any) -> tuple[float, str, int]:
        return (s.at, s.call_id, s.position)

    cued = [t for t in snippets if has_cue(t.content)]  # only these can correct a snippet
    out = list(snippets)
    for i, s in enumerate(snippets):
        (marked,) = supersede([s], (), extra)
        if marked is s:
            continue
        # a snippet of the block said later corrects it too: the rendering marks it, once
        after = [t for t in cued if key(t) > key(s)]
        if after and supersede([s, *after])[0] is not s:
            continue
        out[i] = marked
    return out


def consume(task: asyncio.Task) -> None:
    """Read a late search's exception, so asyncio never logs it as never retrieved."""
    if not task.cancelled():
        task.exception()


__all__ = [
    "MAX_HIT_CHARS",
    "Found",
    "as_found",
    "known_befores",
    "read_around",
    "unread_befores",
    "with_befores",
    "clip",
    "clipped",
    "consume",
    "fused",
    "mark_later",
    "quoted",
    "read_replies",
    "second_search",
    "unquoted",
    "unseen",
    "wait_for_task",
    "with_gathered",
    "with_meaning",
    "within",
]

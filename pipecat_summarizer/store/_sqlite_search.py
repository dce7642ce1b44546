"""The SQLite store's search: FTS5 inside the caller's scope, ranked by BM25.

An any-word search ranks only its rarest words (see ``RANK_MATCHES``), and a search first only
the latest matches (``RANK_WINDOW``): BM25 over every match of a common word is what made a
search slow on a large archive.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from pipecat_summarizer.store import _sqlite_schema as schema
from pipecat_summarizer.store._rows import Before

#: An any-word search ranks its rarest words while their matches stay within this many
#: messages (see ``rarest``): BM25 over every match of a common word costs ~20 ms at 100k
#: archived messages.
RANK_MATCHES = 3000
#: Of a search's matches (an any-word search's: its ranked words') BM25 scores the latest
#: this many (at most ``RANK_MATCHES``) first, all of them only if that window holds too
#: few of the caller's: each costs ~1.5 us (its document's length is read), a 3,000 window
#: ~5 ms a turn at 1M archived, every match of "Sunday" (~30,000) 45 ms.
RANK_WINDOW = 1000
#: How long a common word's document count (at least ``DF_CACHE_MIN``) is reused (a
#: larger count longer, at most ``DF_TTL_MAX_S``: see ``fresh_for``).
DF_TTL_S = 60.0
DF_TTL_MAX_S = 3600.0
DF_CACHE_MIN = 200

#: A hit row's score (``SearchHit.score``, BM25 negated).
SCORE = 7

#: The messages deleted so far (schema v8: a trigger counts them in the deleting transaction),
#: and a second row: the search holds the statement open (see ``find``).
_REMOVALS = "SELECT n FROM removals WHERE id = 1 UNION ALL SELECT NULL"
_NONE = (0, 0, 0.0, 0, -1)

#: (scope bounds, word) -> (messages matching, counted to ``cap``; the edge of a word with
#: more, or 0; when; cap; the removals counted then): see ``word_counts``.
WordCounts = dict[tuple[tuple[int, int], str], tuple[int, int, float, int, int | None]]


def find(
    conn: sqlite3.Connection,
    counts: WordCounts,
    words: list[str],
    user_id: str | None,
    call_id: str | None,
    limit: int,
    any_word: bool,
) -> list[tuple]:
    """The best ``limit`` messages matching ``words`` (all of them, or any with
    ``any_word``) among the latest ``RANK_WINDOW`` matches, or all of them when those hold
    fewer (see ``RANK_WINDOW``), run in the store's thread (``call_id`` already a session
    key). ``counts`` caches common words' counts across searches.

    The search reads one snapshot: its first statement, the database's removals (see
    ``word_counts``), is held open until it ends, so the words are counted in the snapshot
    the removals were read in; and an interrupt (a search nobody waits for any more) stops
    it at any step (one that came as a statement ended was forgotten with it, and the search
    ran on)."""
    held = conn.execute(_REMOVALS)
    try:
        removals = held.fetchone()[0]
        return _find(conn, counts, words, user_id, call_id, limit, any_word, removals)
    finally:
        held.close()


def _find(
    conn: sqlite3.Connection,
    counts: WordCounts,
    words: list[str],
    user_id: str | None,
    call_id: str | None,
    limit: int,
    any_word: bool,
    removals: int | None,
) -> list[tuple]:
    bounds = search_bounds(conn, user_id, call_id)
    if bounds is None:
        return []  # a call with no archived messages
    ranked = rarest(conn, counts, words, bounds, removals) if any_word else words
    if not ranked:
        return []
    # every word quoted: FTS5 operators in the caller's words are just words
    quoted = [f'"{w}"' for w in ranked]
    match = (" OR " if any_word else " ").join(quoted)
    lo, hi = bounds
    # even the rarest word (or all the words: "Sunday") may match thousands: rank the
    # latest RANK_WINDOW matches in the scope (a rowid range is cheap for FTS5); all of
    # them only if that window holds too few of this caller's
    edge = conn.execute(
        "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? "
        "AND rowid BETWEEN ? AND ? ORDER BY rowid DESC LIMIT 1 OFFSET ?",
        (match, lo, hi, min(RANK_WINDOW, RANK_MATCHES)),
    ).fetchone()
    if edge is not None:
        rows = best_matches(conn, match, (edge[0] + 1, hi), user_id, call_id, limit)
        if len(rows) >= limit:
            if any_word and len(quoted) > 1:
                # and the older messages holding every ranked word (at most half of
                # RANK_MATCHES): BM25 scores a message the same under AND as under OR
                # (the same words, the same weights), so the two rankings merge
                older = best_matches(
                    conn, " AND ".join(quoted), (lo, edge[0]), user_id, call_id, limit
                )
                rows = sorted(rows + older, key=lambda r: (-r[SCORE], -r[-1]))[:limit]
            return [r[:-1] for r in rows]
    return [r[:-1] for r in best_matches(conn, match, bounds, user_id, call_id, limit)]


def followers(
    conn: sqlite3.Connection, keys: Sequence[tuple[str, int]], user_id: str | None = None
) -> dict[tuple[str, int], tuple[str, str]]:
    """The message that followed each of ``keys`` (a call's position) that has one: role
    and text, read in one statement per 200 keys; with ``user_id``, only that caller's (a
    call key holding two callers' messages never lends one's words as the other's reply)."""
    found: dict[tuple[str, int], tuple[str, str]] = {}
    mine = "" if user_id is None else " AND m.user_id = ?"
    for i in range(0, len(keys), 200):  # stay under SQLite's variable limit
        chunk = keys[i : i + 200]
        rows = conn.execute(
            f"WITH k(c, p) AS (VALUES {','.join(['(?,?)'] * len(chunk))}) "
            "SELECT m.call_id, m.position - 1, m.role, m.content FROM k JOIN messages m "
            f"ON m.call_id = k.c AND m.position = k.p + 1{mine}",
            [v for key in chunk for v in key] + ([] if user_id is None else [user_id]),
        ).fetchall()
        for call_id, position, role, content in rows:
            found[(call_id, position)] = (str(role), str(content))
    return found


def befores(conn: sqlite3.Connection, hits: Sequence[Any]) -> dict[tuple[str, int], Before | None]:
    """The message said just before each of ``hits`` (its call's previous position): role,
    content, turn and time, or ``None`` when there is none that is the hit's caller's (a
    call key holding two callers' messages never lends one's words as the other's), read in
    one statement per 200 hits."""
    found: dict[tuple[str, int], Before | None] = {(h.call_id, h.position): None for h in hits}
    for i in range(0, len(hits), 200):  # stay under SQLite's variable limit
        chunk = hits[i : i + 200]
        rows = conn.execute(
            f"WITH k(c, p, u) AS (VALUES {','.join(['(?,?,?)'] * len(chunk))}) "
            "SELECT m.call_id, m.position + 1, m.role, m.content, m.turn, m.at FROM k "
            "JOIN messages m ON m.call_id = k.c AND m.position = k.p - 1 AND m.user_id IS k.u",
            [v for h in chunk for v in (h.call_id, h.position, h.user_id)],
        ).fetchall()
        for call_id, position, role, content, turn, at in rows:
            found[(call_id, position)] = (str(role), str(content), int(turn), float(at))
    return found


def search_bounds(
    conn: sqlite3.Connection, user_id: str | None, call_id: str | None
) -> tuple[int, int] | None:
    """The full-text rowids a search may match: the caller's scope, the call's (the
    scope of its caller, or of the call itself when it has none), or all of them.
    ``None`` when the call has no archived messages."""
    if user_id is not None:
        return schema.scope_range(schema.scope_of(user_id, ""))
    if call_id is not None:
        scopes = conn.execute(
            "SELECT DISTINCT scope FROM messages WHERE call_id = ? LIMIT 2", (call_id,)
        ).fetchall()
        if not scopes:
            return None
        if len(scopes) == 1:
            return schema.scope_range(scopes[0][0])
    return 0, (1 << (schema.SCOPE_BITS + schema.ID_BITS)) - 1


def best_matches(
    conn: sqlite3.Connection,
    match: str,
    bounds: tuple[int, int],
    user_id: str | None,
    call_id: str | None,
    limit: int,
) -> list[tuple]:
    """The best ``limit`` matches of ``match`` in ``bounds`` that belong to the caller
    (and call), best first: a hit's fields (its score at ``SCORE``), then its full-text rowid. BM25
    ranks the index alone, and only the best rows are read: the rest of a message (its
    text) is never sorted. Ties go to the latest message."""
    where = ""
    params: list[str | int] = []
    if user_id is not None:
        where += " AND m.user_id = ?"
        params.append(user_id)
    if call_id is not None:
        where += " AND m.call_id = ?"
        params.append(call_id)
    columns = (
        "m.call_id, m.position, m.turn, m.at, m.role, m.content, m.removed_by, -f.score, m.user_id"
    )
    ranked = (
        "SELECT rowid AS id, bm25(messages_fts) AS score FROM messages_fts "
        "WHERE messages_fts MATCH ? AND rowid BETWEEN ? AND ?"
    )
    rows = conn.execute(
        f"SELECT {columns}, f.id FROM ({ranked} ORDER BY score, rowid DESC LIMIT ?) f "
        f"JOIN messages m ON m.id = (f.id & {schema.ID_MASK}) WHERE 1{where} "
        "ORDER BY f.score, f.id DESC",
        (match, *bounds, limit, *params),
    ).fetchall()
    if len(rows) < limit and conn.execute(
        "SELECT count(*) FROM (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? "
        "AND rowid BETWEEN ? AND ? LIMIT ?)",
        (match, *bounds, limit),
    ).fetchone()[0] > len(rows):
        # the scope holds others' matches (a shared scope, or a call of a caller): the
        # filter goes inside the ranking
        rows = conn.execute(
            f"SELECT {columns}, f.id FROM ({ranked}) f "
            f"JOIN messages m ON m.id = (f.id & {schema.ID_MASK}) WHERE 1{where} "
            "ORDER BY f.score, f.id DESC LIMIT ?",
            (match, *bounds, *params, limit),
        ).fetchall()
    return rows


def rarest(
    conn: sqlite3.Connection,
    counts: WordCounts,
    words: Sequence[str],
    bounds: tuple[int, int],
    removals: int | None,
) -> list[str]:
    """The words an any-word search ranks: the rarest in the scope's messages first,
    while their matches stay within ``RANK_MATCHES`` (always the rarest one). A word in
    thousands of messages (the speakers' names, "today") weighs almost nothing in BM25,
    but scoring every message it matches is what made a search at 100k archived
    messages slow. A word's matches are counted only up to ``RANK_MATCHES + 1`` (see
    ``word_counts``); when every word has more, the rarest is the one whose latest
    ``RANK_MATCHES + 1`` matches reach furthest back (the rarest lately: counting a
    common word's ~40,000 matches at 1M archived messages in full costs 2 ms)."""
    found = word_counts(conn, counts, words, bounds, removals)
    counted = sorted((n, w) for w, (n, _) in found.items() if 0 < n <= RANK_MATCHES)
    if not counted:
        reach = {w: edge for w, (n, edge) in found.items() if n}
        return [min(reach, key=lambda w: (reach[w], w))] if reach else []
    kept: list[str] = []
    total = 0
    for n, w in counted:
        if kept and total + n > RANK_MATCHES:
            break
        kept.append(w)
        total += n
    return kept


def fresh_for(n: int) -> float:
    """How long a count of ``n`` matches is reused: ``DF_TTL_S`` at ``DF_CACHE_MIN``, and
    longer for a larger one (at most ``DF_TTL_MAX_S``): a count moves by a share only as
    the caller's archive grows by that share."""
    return min(DF_TTL_S * n / DF_CACHE_MIN, DF_TTL_MAX_S)


def word_counts(
    conn: sqlite3.Connection,
    counts: WordCounts,
    words: Sequence[str],
    bounds: tuple[int, int],
    removals: int | None,
) -> dict[str, tuple[int, int]]:
    """Each word's matches in the scope, counted to ``RANK_MATCHES + 1`` (a word with more
    is not ranked beside others), and for a word with more, the rowid of its
    ``RANK_MATCHES + 1``-th latest match: ``{word: (count, edge)}`` (``edge`` 0 for the
    others). The edges are read only when no word has ``RANK_MATCHES`` or fewer.

    A count kept in ``counts`` stands while no archived message was deleted since it was
    counted: every transaction that deletes some (a purge, a forget, through any store
    object: another process's, S11-A-6, S12-B-1, S12-C-1) bumps the database's ``removals``
    (a trigger), read by the search (``find``: one read by primary key, in the snapshot the
    words are counted in) and passed as ``removals``: ``None`` when an operator deleted its
    row (no count is reused then; the next removal writes the row again)."""
    now = time.monotonic()
    if len(counts) > 20_000:
        counts.clear()
    cap = RANK_MATCHES + 1
    matches = "FROM messages_fts WHERE messages_fts MATCH ? AND rowid BETWEEN ? AND ?"
    found: dict[str, tuple[int, int]] = {}
    for w in dict.fromkeys(words):
        n, edge, at, capped_at, counted_at = counts.get((bounds, w), _NONE)
        stale = removals is None or counted_at != removals  # no row: reuse nothing (S13-A-4)
        if not n or now - at >= fresh_for(n) or capped_at != cap or stale:
            n = conn.execute(
                f"SELECT count(*) FROM (SELECT rowid {matches} LIMIT ?)", (f'"{w}"', *bounds, cap)
            ).fetchone()[0]
            edge = 0
            if n >= DF_CACHE_MIN:  # a rare word is cheap to count, and may be new
                counts[(bounds, w)] = (n, 0, now, cap, removals)
            else:
                counts.pop((bounds, w), None)
        found[w] = (n, edge)
    if any(0 < n < cap for n, _ in found.values()):
        return found
    for w, (n, edge) in found.items():
        if n and not edge:
            edge = conn.execute(
                f"SELECT rowid {matches} ORDER BY rowid DESC LIMIT 1 OFFSET ?",
                (f'"{w}"', *bounds, RANK_MATCHES),
            ).fetchone()[0]
            found[w] = (n, edge)
            if (bounds, w) in counts:
                _, _, at, _, counted_at = counts[(bounds, w)]
                counts[(bounds, w)] = (n, edge, at, cap, counted_at)
    return found

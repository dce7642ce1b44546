"""The PostgreSQL store's search: ``tsvector`` matches inside the caller's scope, ranked
by how many of the query's words a message holds, then ``ts_rank_cd``.

Recall's search (any of the words, by caller) reads the caller's word index (schema v5,
``message_words``) and ranks its rarest words, as SQLite does; other searches read the
scoped GIN index. Both rank the words they search the same way.
"""

from __future__ import annotations

import time
from typing import Any

from pipecat_summarizer.store._postgres_schema import (
    EVERYONE,
    REMOVALS_OF,
    SCOPED_TSV,
    session_key,
)
from pipecat_summarizer.store._rows import BEFORE_HITS, Before, Hits, said_before
from pipecat_summarizer.store.base import query_words

#: A search ranks at most this many of the scope's matches, the latest (as on SQLite): the
#: ranking reads every row it scores.
RANK_MATCHES = 3000
#: The columns of a search's rows; a search by caller adds its words' counts and the first
#: hits' replies (see ``caller_statement``).
HIT_KEYS = tuple("call_id position turn at role content removed_by score user_id".split())
HIT_SHAPES = (
    HIT_KEYS,
    (*HIT_KEYS, "df", "edge", "reply_role", "reply_content")
    + ("before_role", "before_content", "before_turn", "before_at", "removals"),
)
#: The largest search ``limit`` sent (PostgreSQL binds it as an int4): a larger one reads
#: every match, as this does.
MAX_SEARCH_LIMIT = 2**31 - 1
#: A search by caller ranks its rarest words while their rows in the caller's word index
#: stay within this many (as on SQLite): see ``caller_search_sql``.
KEEP_MATCHES = 3000
#: How long a common word's count (at least ``DF_CACHE_MIN`` rows) is reused, as on SQLite:
#: counting it reads up to ``KEEP_MATCHES + 1`` index rows; a rarer word is cheap to count,
#: and may be new. A larger count is reused longer (see :func:`fresh_for`).
DF_TTL_S = 60.0
DF_TTL_MAX_S = 3600.0
DF_CACHE_MIN = 200

#: A search by caller of at most this many distinct words calls ``FUNCTION``, a function
#: each connection creates for itself (``function_sql``) with one read per word: its
#: statement is planned once, generic, where a statement sent as such is planned at each
#: run (``plan_cache_mode`` is ``force_custom_plan`` for the GIN index's searches). Planning
#: it took ~0.9 ms of a ~4 ms search at 100,000 archived messages.
SLOTS = 8
FUNCTION = "pg_temp.pcs_caller_search"

#: (caller, word) -> (rows counted, the oldest of them, when, the caller's removals then):
#: see ``caller_search_sql``.
WordCounts = dict[tuple[str, str], tuple[int, int, float, int]]
#: PostgreSQL's own text-search configurations: a snowball stemmer (or ``simple``) gives a
#: word at most one lexeme, which the word index's search needs (see
#: ``caller_search_sql``); another configuration (an ispell or thesaurus dictionary may
#: give several) searches through the GIN index.
ONE_LEXEME_CONFIGS = frozenset(
    (
        "simple arabic armenian basque catalan danish dutch english finnish french german "
        "greek hindi hungarian indonesian irish italian lithuanian nepali norwegian "
        "portuguese romanian russian serbian spanish swedish tamil turkish yiddish"
    ).split()
)


def search_sql(
    cfg: str,
    query: str,
    *,
    user_id: str | None,
    call_id: str | None,
    limit: int,
    any_word: bool,
    counts: WordCounts | None = None,
    function: bool = False,
    replies: int = 0,
) -> tuple[Any, ...] | None:
    """The search's statement and its arguments (``None``: nothing to search), in the
    text-search configuration ``cfg``; ``counts``, ``function`` and ``replies`` (a search
    by caller only): see :func:`caller_search_sql`."""
    words = query_words(query)
    if not words or int(limit) <= 0:
        return None
    if (
        user_id is not None
        and call_id is None
        and any_word
        and cfg in ONE_LEXEME_CONFIGS
        and all(w.isascii() for w in words)
    ):
        return caller_search_sql(cfg, words, user_id, int(limit), counts, function, replies)
    # plain words only, joined by the operator: no tsquery syntax from the caller
    text = (" or " if any_word else " ").join(words)
    args: list[Any] = [text, sorted(set(words))]
    match = f"websearch_to_tsquery('{cfg}', $1)"
    where = ""
    for column, prefix, value in (("user_id", "#u", user_id), ("call_id", "#c", call_id)):
        if value is not None:
            args.append(value)
            n = len(args)
            # a call_id argument names a session (or the newest under that label)
            named = f"${n}" if column == "user_id" else session_key(n)
            # the scope's lexeme in the query: the index returns only its messages
            match += f" && ($$'{prefix}$$ || md5({named}) || $$'$$)::tsquery"
            # checked again on the rows found, written so that no B-tree index can
            # serve it: read through messages_user (or the call's key) it would
            # compute the index expression on every message of the scope
            where += f" AND {column} || '' = {named}"
    args.append(int(limit))
    n = len(args)
    # how many distinct query words a message has (the score's integer part)
    indexes = range(1, len(args[1]) + 1)
    hits = " + ".join(f"(m.tsv @@ w.a[{i}])::int" for i in indexes)
    query = f"websearch_to_tsquery('{cfg}', $1)"
    if any_word:
        # any of the words: the query is an OR, whose covers (for ts_rank_cd) are single
        # positions of the words present, so a message holding one of the words ranks
        # exactly as against that word alone, at a fraction of the cost (most messages
        # that can place hold one word when no more than limit hold two)
        one = " ".join(f"WHEN h.tsv @@ w.a[{i}] THEN w.b[{i}]" for i in indexes)
        query = f"CASE WHEN h.hits = 1 THEN CASE {one} END ELSE {query} END"
    # c: the scope's latest RANK_MATCHES matches (at least ``limit``; ``id + 0``: found by
    # the index, not by walking the primary key), sorted narrow (id, ctid), their words
    # then read by ctid (a TID scan, same snapshot). The score is how many distinct query
    # words match, plus ts_rank_cd scaled into [0, 1), so a message with more of the words
    # outranks one repeating a single word (as BM25's idf does on SQLite). Only messages
    # with as many words as the limit-th best can place, so only they get the (costly)
    # ts_rank_cd; only the best rows are read whole.
    sql = f"""
        WITH c AS MATERIALIZED (
            SELECT id, ctid FROM messages WHERE {SCOPED_TSV} @@ ({match}){where}
            ORDER BY id + 0 DESC LIMIT {max(RANK_MATCHES, int(limit))}),
        w AS MATERIALIZED (
            SELECT array_agg(plainto_tsquery('{cfg}', x) ORDER BY x) AS a,
                array_agg(websearch_to_tsquery('{cfg}', x) ORDER BY x) AS b
            FROM unnest($2::text[]) x),
        h AS MATERIALIZED (
            SELECT m.id, m.at, m.tsv, {hits} AS hits FROM messages m, w
            WHERE m.ctid = ANY(ARRAY(SELECT ctid FROM c))),
        t AS (SELECT hits FROM h ORDER BY hits DESC LIMIT 1 OFFSET ${n} - 1)
        SELECT m.call_id, m.position, m.turn, m.at, m.role, m.content, m.removed_by,
            r.score, m.user_id
        FROM (
            SELECT h.id, h.at, (h.hits + ts_rank_cd(h.tsv, {query}, 32))::float8 AS score
            FROM h, w WHERE h.hits >= COALESCE((SELECT hits FROM t), 0)
            ORDER BY score DESC, h.at DESC, h.id DESC LIMIT ${n}
        ) r JOIN messages m ON m.id = r.id
        ORDER BY r.score DESC, m.at DESC, m.id DESC"""
    return (sql, *args)


def caller_search_sql(
    cfg: str,
    words: list[str],
    user_id: str,
    limit: int,
    counts: WordCounts | None = None,
    function: bool = False,
    replies: int = 0,
) -> tuple[Any, ...]:
    """An any-word search of a caller's archive through their word index (schema v5).

    It ranks the query's rarest words, as SQLite does (``_sqlite_search.rarest``): the
    words with the fewest rows in the caller's index first, while their rows together stay
    within ``KEEP_MATCHES`` (always the rarest one that has a row: a word the caller never
    said took that place, and a question of it and common words found nothing). A word in
    thousands of the caller's messages ("card", "new") adds almost nothing to a ranking
    that its rarer neighbours decide, but merging and grouping every one of its rows was
    most of the search's cost.
    Each word is counted up to ``KEEP_MATCHES + 1`` rows (its latest, in the index's order):
    two words past that are ordered by how far back their latest ``KEEP_MATCHES + 1`` rows
    reach (the rarer in the stretch the window covers first), then by lexeme; two of the
    same smaller count by lexeme (SQLite's order: by their oldest row, the two backends
    ranked different words). A count of
    ``DF_CACHE_MIN`` rows or more found in ``counts`` (younger than :func:`fresh_for`) is
    not counted again while the caller's removals (schema v8: ``removals``, those of the
    caller's bucket of callers, bumped by a trigger in every transaction that deletes their
    messages: a purge, a forget, through any store object, in any process) are what they
    were when it was counted; read in the same statement (one index probe), so of the same
    snapshot as what it counts. Each row the statement returns carries the words' counts
    (``df``, and ``edge``) and the removals (``removals``), for :func:`remember_counts`.

    Over the words it keeps, the hits and the scores are :func:`search_sql`'s: the same
    window (the latest ``RANK_MATCHES`` matches), the same score, the same ties. Each kept
    word's latest rows are read in the index's order, the reads merged by id (newest first)
    and grouped as they come: the window is the latest ids of their union, so the merge
    stops there. The score needs no message: ``hits`` is how many query words have the
    message's lexeme, and for a query of words joined by OR, ``ts_rank_cd`` (weight D,
    normalization 32) counts a cover per matched position, so it depends only on how many
    positions the matched lexemes have together (``total``), and grows with it: the best
    ``limit`` of the window by (``hits``, ``total``, time, id) are the only rows that can
    place, and their ``ts_rank_cd`` is computed once per total, on a tsvector of that many
    positions. A message whose positions were clamped (``tf`` < 0), or that has more than
    256 (past what one lexeme of that tsvector holds), is ranked on its own ``tsv``. When
    one word is kept, its latest rows are ranked straight from the index, neither merged nor
    grouped: a lexeme's positions (at most 256) are its covers, so ``tf`` alone gives the
    score, clamped or not. Only the best rows are read whole.

    With ``function`` (the connection has :func:`function_sql`'s function) a search of at
    most ``SLOTS`` distinct words calls it: the statement is planned once per connection.

    The first ``replies`` rows also carry the message that followed the hit in its call
    (``reply_role``, ``reply_content``; ``NULL`` when it has none), as ``messages_at``
    reads it: recall's turn reads the hits and their replies in one statement (see
    :func:`replies_of`).

    ``words`` are ASCII letters and digits (each one token of PostgreSQL's parser, whatever
    the database's locale), and ``cfg`` one of ``ONE_LEXEME_CONFIGS``: a word has at most
    one lexeme.
    """
    window = max(RANK_MATCHES, limit)
    distinct = sorted(set(words))
    known: list[int | None] = []
    edges: list[int | None] = []
    removals: list[int | None] = []
    now = time.monotonic()
    for word in distinct:
        df, edge, at, removed = (counts or {}).get((user_id, word), (0, 0, 0.0, 0))
        fresh = now - at < fresh_for(df)
        known.append(df if fresh else None)
        edges.append(edge if fresh else None)
        removals.append(removed if fresh else None)
    replies = min(max(0, int(replies)), MAX_SEARCH_LIMIT)
    args = (distinct, user_id, limit, known, edges, removals)
    if function and len(distinct) <= SLOTS:
        sql = f"SELECT * FROM {FUNCTION}($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        return (sql, *args, window, KEEP_MATCHES, replies)
    sql = caller_statement(cfg, len(distinct), str(window), str(KEEP_MATCHES), "$7")
    return (sql, *args, replies)


def fresh_for(df: int) -> float:
    """How long a word's count of ``df`` rows is reused: as on SQLite
    (``_sqlite_search.fresh_for``), ``DF_TTL_S`` at ``DF_CACHE_MIN`` and longer for a larger
    one (at most ``DF_TTL_MAX_S``): a count moves by a share only as the caller's archive
    grows by that share. A count past ``KEEP_MATCHES`` only ``DF_TTL_S``: its ``edge``
    (which orders such words) moves with each new match, and SQLite reads it afresh. At
    60 s a call's next question a minute on counted its common words again (~3,000 index
    rows each)."""
    if df > KEEP_MATCHES:
        return DF_TTL_S
    return min(DF_TTL_S * df / DF_CACHE_MIN, DF_TTL_MAX_S)


def caller_statement(cfg: str, slots: int, window: str, keep: str, replies: str) -> str:
    """The SQL of :func:`caller_search_sql` for ``slots`` distinct words (at most), over
    ``$1`` the words, ``$2`` the caller, ``$3`` the limit, ``$4``, ``$5`` and ``$6`` the
    words' known counts, oldest ids counted and the caller's removals they were counted at;
    ``window``, ``keep`` and ``replies`` (how many of the first hits carry their reply) are
    SQL expressions."""
    # one read per word (the i-th lexeme; none when words share a lexeme, a word has none or
    # is not kept), each in the index's order. Its LIMIT is a subquery: the planner cannot
    # fold it, so it plans the read for its first rows (a backward index scan that stops
    # early) whatever the table's statistics; with a constant, and none right after a bulk
    # load (a few rows estimated), it read every row of the word (bitmap scan) and sorted them.
    reads = " UNION ALL ".join(
        f"""(SELECT id, tf, at, (SELECT n FROM w WHERE i = {i}) AS n FROM message_words
            WHERE scope = md5($2)::uuid AND word = (SELECT many FROM w WHERE i = {i})
            ORDER BY id DESC LIMIT (SELECT {window}))"""
        for i in range(1, slots + 1)
    )
    sql = f"""
        WITH q AS MATERIALIZED (
            SELECT o, (SELECT min(lexeme) FROM unnest(to_tsvector('{cfg}', x))) AS lx, kdf, ke,
                kr FROM unnest($1::text[], $4::int[], $5::int8[], $6::int8[])
                WITH ORDINALITY AS u(x, kdf, ke, kr, o)),
        -- the caller's removals (and a TRUNCATE's): a known count stands while they are
        -- what they were when it was counted
        v AS MATERIALIZED (
            SELECT COALESCE(sum(n), 0)::int8 AS removals FROM removals
            WHERE bucket IN ({REMOVALS_OF.format(user="$2")}, '{EVERYONE}')),
        l AS MATERIALIZED (
            SELECT row_number() OVER (ORDER BY lx)::int AS i, lx, count(*)::int AS n,
                max(kdf) FILTER (WHERE kr = v.removals) AS kdf,
                max(ke) FILTER (WHERE kr = v.removals) AS ke
            FROM q, v WHERE lx IS NOT NULL GROUP BY lx),
        d AS MATERIALIZED (
            SELECT l.i, l.lx, l.n, COALESCE(l.kdf, f.df) AS df, COALESCE(l.ke, f.edge) AS edge
            FROM l, LATERAL (
                SELECT count(*)::int AS df, min(id) AS edge FROM (
                    SELECT id FROM message_words WHERE l.kdf IS NULL
                        AND scope = md5($2)::uuid AND word = l.lx
                    ORDER BY id DESC LIMIT (SELECT {keep} + 1)) e) f),
        o AS (
            SELECT i, lx, n, (o = 1 OR run <= {keep}) AS kept FROM (
                SELECT i, lx, n, row_number() OVER o AS o, sum(df) OVER o AS run
                FROM d WHERE df > 0
                -- as on SQLite: equal counts by word; past KEEP_MATCHES, the furthest back
                WINDOW o AS (ORDER BY df, CASE WHEN df > {keep} THEN edge END, lx
                    ROWS UNBOUNDED PRECEDING)) x),
        w AS MATERIALIZED (
            SELECT i, lx, n, kept, CASE WHEN kept AND ones > 1 THEN lx END AS many,
                CASE WHEN kept AND ones = 1 THEN lx END AS one
            FROM (SELECT *, count(*) FILTER (WHERE kept) OVER () AS ones FROM o) y),
        c AS MATERIALIZED (
            SELECT id, sum(n)::int AS hits, sum(abs(tf))::int AS total, min(tf) AS tf,
                max(at) AS at
            FROM (SELECT * FROM ({reads}) u ORDER BY id DESC) p
            GROUP BY id ORDER BY id DESC LIMIT {window}),
        k AS MATERIALIZED (
            (SELECT id, hits, total, at FROM c WHERE tf > 0 AND total <= 256
            ORDER BY hits DESC, total DESC, at DESC, id DESC LIMIT $3)
            UNION ALL
            (SELECT id, (SELECT n FROM w WHERE one IS NOT NULL), abs(tf)::int, at FROM (
                SELECT id, tf, at FROM message_words
                WHERE scope = md5($2)::uuid AND word = (SELECT one FROM w WHERE one IS NOT NULL)
                ORDER BY id DESC LIMIT (SELECT {window})) z
            ORDER BY abs(tf) DESC, at DESC, id DESC LIMIT $3)),
        r AS MATERIALIZED (
            SELECT n AS total, ts_rank_cd(('a:' || array_to_string(
                ARRAY(SELECT generate_series(1, n)), ','))::tsvector, 'a'::tsquery, 32) AS rank
            FROM (SELECT DISTINCT total AS n FROM k) t),
        s AS (
            SELECT k.id, k.at, (k.hits + r.rank)::float8 AS score
            FROM k JOIN r ON r.total = k.total
            UNION ALL
            SELECT m.id, m.at, (c.hits + ts_rank_cd(m.tsv, (
                SELECT string_agg(quote_literal(lx), ' | ')::tsquery FROM w WHERE kept), 32))
                ::float8
            FROM c JOIN messages m ON m.id = c.id WHERE c.tf < 0 OR c.total > 256)
        SELECT h.call_id, h.position, h.turn, h.at, h.role, h.content, h.removed_by, h.score,
            h.user_id, h.df, h.edge, n.role AS reply_role, n.content AS reply_content,
            b.role AS before_role, b.content AS before_content, b.turn AS before_turn,
            b.at AS before_at, (SELECT removals FROM v) AS removals
        FROM (
            SELECT m.call_id, m.position, m.turn, m.at, m.role, m.content, m.removed_by,
                r.score, m.user_id,
                ARRAY(SELECT d.df FROM q LEFT JOIN d ON d.lx = q.lx ORDER BY q.o) AS df,
                ARRAY(SELECT d.edge FROM q LEFT JOIN d ON d.lx = q.lx ORDER BY q.o) AS edge,
                row_number() OVER (ORDER BY r.score DESC, m.at DESC, m.id DESC) AS o
            FROM (SELECT * FROM s ORDER BY score DESC, at DESC, id DESC LIMIT $3) r
            JOIN messages m ON m.id = r.id
            WHERE m.user_id = $2) h
        -- the first hits' replies, by the call's key (the caller's own: a call key holding
        -- two callers' messages never lends one's words as the other's reply, S11-A-3);
        -- a later hit's is never read (OFFSET 0:
        -- not pulled up into a join whose filter would come after each lookup)
        LEFT JOIN LATERAL (
            SELECT n.role, n.content FROM messages n
            WHERE h.o <= {replies} AND n.call_id = h.call_id AND n.position = h.position + 1
                AND n.user_id IS NOT DISTINCT FROM h.user_id
            OFFSET 0
        ) n ON true
        -- and the message said just before each of the first BEFORE_HITS, the caller's own
        LEFT JOIN LATERAL (
            SELECT b.role, b.content, b.turn, b.at FROM messages b
            WHERE h.o <= LEAST({replies}, {BEFORE_HITS}) AND b.call_id = h.call_id
                AND b.position = h.position - 1 AND b.user_id IS NOT DISTINCT FROM h.user_id
            OFFSET 0
        ) b ON true
        ORDER BY h.o"""
    return sql


def function_sql(cfg: str) -> str:
    """The statement creating ``FUNCTION`` on a connection (in its own temporary schema:
    nothing is written to the database) for the text-search configuration ``cfg``. Its
    arguments are ``caller_statement``'s, then the window, ``KEEP_MATCHES`` and how many
    hits carry their reply."""
    body = caller_statement(cfg, SLOTS, "$7", "$8", "$9")
    return f"""
        CREATE OR REPLACE FUNCTION {FUNCTION}(
            text[], text, int, int[], int8[], int8[], int, int, int)
        RETURNS TABLE(call_id text, "position" int, turn int, at float8, role text,
            content text, removed_by text, score float8, user_id text, df int[], edge int8[],
            reply_role text, reply_content text, before_role text, before_content text,
            before_turn int, before_at float8, removals int8)
        LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $body$
        #variable_conflict use_column
        BEGIN
            RETURN QUERY {body};
        END $body$"""


def calls_function(statement: tuple[Any, ...]) -> bool:
    """Whether ``statement`` (from :func:`caller_search_sql`) calls ``FUNCTION``."""
    return str(statement[0]).startswith(f"SELECT * FROM {FUNCTION}(")


def with_tombstone(statement: tuple[Any, ...], key: str, tombstone: str) -> tuple[Any, ...]:
    """``statement`` (a call of ``FUNCTION``: :func:`calls_function`) with the tombstone of
    the caller whose ``user_hash`` is ``key`` read by the connection's function
    ``tombstone`` in the same statement, first (a nested loop's outer side: one row, so the
    search's rows come once, in their order, or one row of NULLs without a hit), as two
    more columns (the rows' order and the tombstone's time, ``forgotten_at``: see
    :func:`tombstone_of`). The search runs in the statement's snapshot, the read after it
    in its own (the function is VOLATILE and waits for a forget under way): a forget the
    search could still see is seen by the read."""
    sql, *args = statement
    call = str(sql)[len("SELECT * FROM ") :]
    joined = (
        f"SELECT s.*, t.at AS forgotten_at FROM (SELECT {tombstone}(${len(args) + 1}) AS at) t "
        f"LEFT JOIN LATERAL {call} WITH ORDINALITY AS s ON true ORDER BY s.ordinality"
    )
    return (joined, *args, key)


def tombstone_of(rows: list[Any]) -> tuple[list[Any], float | None]:
    """The rows of a statement made by :func:`with_tombstone`: the search's (the row of
    NULLs a statement without a hit returns left out) and the tombstone's time, or
    ``None``. The rows keep their two extra columns, last (see ``HIT_SHAPES``)."""
    at = rows[0]["forgotten_at"] if rows else None
    hits = [r for r in rows if r["ordinality"] is not None]
    return hits, None if at is None else float(at)


def remember_counts(counts: WordCounts, statement: tuple[Any, ...], rows: list[Any]) -> None:
    """Keep in ``counts`` the common words' counts a search by caller (``statement``, from
    :func:`caller_search_sql`) returned with its ``rows``: those it counted, and those it
    counted again because the caller's removals changed since (a known count comes back
    with the removals sent), each with the removals it was counted at."""
    if not rows or len(rows[0]) < len(HIT_SHAPES[1]):
        return  # no hit (nothing counted comes back), or not a search by caller
    if len(counts) > 20_000:
        counts.clear()
    now = time.monotonic()
    words, user_id, known, sent = statement[1], statement[2], statement[4], statement[6]
    removals = rows[0][17]
    for word, was, at, df, edge in zip(words, known, sent, rows[0][9], rows[0][10], strict=True):
        if was is not None and at == removals:
            continue  # the known count, reused
        if df is not None and df >= DF_CACHE_MIN:
            counts[(user_id, word)] = (df, edge, now, removals)
        elif was is not None:  # counted again (a message of the caller's went), now rare
            counts.pop((user_id, word), None)


def replies_of(rows: list[Any], first: int) -> dict[tuple[str, int], tuple[str, str]] | None:
    """The replies a search by caller's ``rows`` carry for its first ``first`` hits:
    ``{(call_id, position): (role, content)}`` of those that have one, as ``messages_at``
    reads them; ``None`` when the rows are not such a search's (another search: they carry
    none) or no hit."""
    if not rows or len(rows[0]) < len(HIT_SHAPES[1]):
        return None
    return {(r[0], r[1]): (str(r[11]), str(r[12])) for r in rows[:first] if r[11] is not None}


def befores_of(rows: list[Any], first: int) -> dict[tuple[str, int], Before | None]:
    """The messages said before the first ``min(first, BEFORE_HITS)`` hits a search by
    caller's ``rows`` carry (``None`` for a hit with none of the caller's), as
    ``_sqlite_search.befores`` reads them; rows of another search carry none."""
    if not rows or len(rows[0]) < len(HIT_SHAPES[1]):
        return {}
    return {
        (r[0], r[1]): None if r[13] is None else (str(r[13]), str(r[14]), int(r[15]), float(r[16]))
        for r in rows[: min(first, BEFORE_HITS)]
    }


async def read_around(store: Any, hits: list[Any], first: int, user_id: str | None) -> Hits:
    """``hits`` (of a search that read no replies: not by caller) with the replies of the
    first ``first`` and the befores of the first ``BEFORE_HITS`` of them, read with one
    ``messages_at``: each the caller's own, as a search by caller reads them."""
    after = [(h.call_id, h.position) for h in hits[:first]]
    near = hits[: min(first, BEFORE_HITS)]
    found = await store.messages_at(
        [(c, p + 1) for c, p in after] + [(h.call_id, h.position - 1) for h in near]
    )
    replies = {
        k: (m.role, m.content)
        for k, m in zip(after, found[: len(after)], strict=True)
        if m and (user_id is None or m.user_id == user_id)
    }
    befores = {
        (h.call_id, h.position): said_before(h, m)
        for h, m in zip(near, found[len(after) :], strict=True)
    }
    return Hits(hits, replies, befores)


def forget_counts(counts: WordCounts, user_id: str) -> None:
    """Drop what ``counts`` keeps of ``user_id``'s words (a forget)."""
    for key in [k for k in counts if k[0] == user_id]:
        del counts[key]

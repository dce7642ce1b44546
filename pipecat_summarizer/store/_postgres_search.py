"""The PostgreSQL store's search: ``tsvector`` matches inside the caller's scope, ranked
by how many of the query's words a message holds, then ``ts_rank_cd``.
"""

from __future__ import annotations

from typing import Any

from pipecat_summarizer.store._postgres_schema import SCOPED_TSV, session_key
from pipecat_summarizer.store.base import query_words

#: A search ranks at most this many of the scope's matches, the latest (as on SQLite): the
#: ranking reads every row it scores.
RANK_MATCHES = 3000


def search_sql(
    cfg: str,
    query: str,
    *,
    user_id: str | None,
    call_id: str | None,
    limit: int,
    any_word: bool,
) -> tuple[Any, ...] | None:
    """The search's statement and its arguments (``None``: nothing to search), in the
    text-search configuration ``cfg``."""
    words = query_words(query)
    if not words or int(limit) <= 0:
        return None
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

"""benchmarks/recall.py's SQLite diagnostics: ``--phases`` (the CPU time of each phase of
a turn on the store's thread) and ``--quality`` (how often the hits hold the answer)."""

from __future__ import annotations

import time

from pipecat_summarizer._recall.step import search_words
from pipecat_summarizer.store import _sqlite_search as sqlite_search
from pipecat_summarizer.store.base import query_words

#: The phases of a SQLite search timed by ``--phases`` (CPU time on the store's thread).
PHASES = ("choice", "cold choice", "edge and bounds", "ranking", "replies", "total")


async def sqlite_phases(store, queries: list[str], params) -> dict[str, list[float]]:
    """Per query, the CPU time (ms) of each phase of the turn's work on the store's thread:
    the choice of the words ranked (``rarest``, counts cached as the turns left them; and
    cold: the counts of a caller's first turns), the window's edge and the scope's bounds,
    the ranking (``best_matches``, with the older all-words messages), the read of the
    first hits' replies, and the total."""
    spent: dict[str, float] = {}

    def timed(name, fn):
        def run(*args, **kwargs):
            t0 = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.thread_time() - t0

        return run

    phases: dict[str, list[float]] = {name: [] for name in PHASES}
    first = params.max_snippets + 2
    for query in queries:
        words = query_words(search_words(query))

        def turn(conn, words=words) -> dict[str, float]:
            spent.clear()
            saved = sqlite_search.rarest, sqlite_search.best_matches
            sqlite_search.rarest = timed("choice", saved[0])
            sqlite_search.best_matches = timed("ranking", saved[1])
            try:
                t0 = time.thread_time()
                rows = sqlite_search.find(
                    conn, store._df, words, "caller", None, params.search_limit, True
                )
                timed("replies", sqlite_search.followers)(conn, [r[:2] for r in rows[:first]])
                total = time.thread_time() - t0
                timed("cold choice", saved[0])(
                    conn, {}, words, sqlite_search.search_bounds(conn, "caller", None)
                )
            finally:
                sqlite_search.rarest, sqlite_search.best_matches = saved
            out = {k: v * 1000 for k, v in spent.items()}
            out["total"] = total * 1000
            out["edge and bounds"] = out["total"] - sum(
                out.get(k, 0.0) for k in ("choice", "ranking", "replies")
            )
            return out

        for name, ms in (await store._run(turn)).items():
            phases[name].append(ms)
    return phases


async def sqlite_quality(store, queries: list[str], params) -> tuple[int, float, float, float]:
    """How well the ranked search finds an answer: of the questions whose words all stand
    in one of the caller's messages (the message that answers them, in this corpus), the
    share whose first 10 hits hold such a message, whose first ``max_snippets`` do, and
    whose first 10 hold the latest one: ``(questions, top 10, top max_snippets, latest)``."""

    def measure(conn) -> tuple[int, float, float, float]:
        bounds = sqlite_search.search_bounds(conn, "caller", None)
        found = [0, 0, 0, 0]
        for query in queries:
            words = query_words(search_words(query))
            if not words or bounds is None:
                continue
            answers = conn.execute(
                "SELECT m.call_id, m.position FROM messages_fts f JOIN messages m "
                f"ON m.id = (f.rowid & {sqlite_search.schema.ID_MASK}) "
                "WHERE messages_fts MATCH ? AND f.rowid BETWEEN ? AND ? ORDER BY f.rowid DESC",
                (" ".join(f'"{w}"' for w in words), *bounds),
            ).fetchall()
            if not answers:
                continue
            rows = sqlite_search.find(
                conn, store._df, words, "caller", None, params.search_limit, True
            )
            hits = [tuple(r[:2]) for r in rows]
            found[0] += 1
            found[1] += bool(set(hits[:10]) & set(answers))
            found[2] += bool(set(hits[: params.max_snippets]) & set(answers))
            found[3] += answers[0] in hits[:10]
        n = max(found[0], 1)
        return found[0], found[1] / n, found[2] / n, found[3] / n

    return await store._run(measure)

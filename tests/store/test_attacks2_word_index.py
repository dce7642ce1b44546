"""Attack: PostgreSQL's per-caller word index (schema v5, ``message_words``) kept exact.

Each test compares the store's any-word caller search (read from the word index) with a
plain query over the caller's own rows (``_reference``: the GIN index's statement, the same
ranking) and counts the index's rows against the messages' lexemes, after what a careless
operator or a hostile caller does: a redaction by ``UPDATE``, a message moved to another
caller, two callers sharing every word, a 10 KB "word", a message of stop words only, odd
Unicode, a retention purge. The real PostgreSQL the suite starts.
"""

from __future__ import annotations

import random
import time

import asyncpg

from pipecat_summarizer.store import open_store
from tests.store.test_schema_word_index import (
    VOCAB,
    _expected_rows,
    _msg,
    _reference,
    _words_rows,
)

QUERIES = ["hotel", "hotel train", "museum river bridge", "ticket dinner room breakfast", "zebra"]


async def _same_as_reference(store, conn, user: str, queries=QUERIES, limit: int = 25) -> None:
    for q in queries:
        found = await store.search(q, user_id=user, any_word=True, limit=limit)
        assert {h.user_id for h in found} <= {user}, q
        got = [(h.call_id, h.position) for h in found]
        assert got == await _reference(conn, user, q, limit), q


def _callers_sharing_words(now: float, n: int = 60) -> list:
    rng = random.Random(11)
    out = []
    for user in ("alice", "bob"):
        for i in range(n):
            text = " ".join(rng.sample(VOCAB, 3)) + f" number {i}"
            out.append(_msg(f"{user}-c{i // 20}", i % 20, text, user, at=now - 1000 + i))
    return out


async def test_two_callers_sharing_every_word_never_see_each_other_and_match_the_reference(
    pg_server,
):
    dsn = pg_server.create_database(f"attacks2_words_{time.monotonic_ns()}")
    store = open_store(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        await store.write(_callers_sharing_words(time.time()))
        for user in ("alice", "bob"):
            await _same_as_reference(store, conn, user)
        assert await _words_rows(conn) == await _expected_rows(conn)
    finally:
        await conn.close()
        await store.close()


async def test_an_operators_redaction_and_reassignment_keep_the_index_exact(pg_server):
    """An operator redacts a message in SQL (``UPDATE ... SET content``) and moves another
    to the other caller (``SET user_id``), one sets ``user_id`` to NULL: the redacted words
    are never found again, the moved message is found by its new caller only."""
    dsn = pg_server.create_database(f"attacks2_words_{time.monotonic_ns()}")
    store = open_store(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        now = time.time()
        await store.write(_callers_sharing_words(now))
        await store.write(
            [
                _msg("alice-x", 0, "My passport number is zebra 77 and my hotel.", "alice", at=now),
                _msg("alice-x", 1, "Moving zebra to bob by mistake.", "alice", at=now + 1),
                _msg("alice-x", 2, "Orphaned zebra note.", "alice", at=now + 2),
            ]
        )
        assert len(await store.search("zebra", user_id="alice", any_word=True)) == 3
        await conn.execute(
            "UPDATE messages SET content = '[redacted]' WHERE call_id = 'alice-x' AND position = 0"
        )
        await conn.execute(
            "UPDATE messages SET user_id = 'bob' WHERE call_id = 'alice-x' AND position = 1"
        )
        await conn.execute(
            "UPDATE messages SET user_id = NULL WHERE call_id = 'alice-x' AND position = 2"
        )
        alice = await store.search("zebra passport", user_id="alice", any_word=True)
        bob = await store.search("zebra", user_id="bob", any_word=True)
        assert alice == []
        assert [(h.call_id, h.position) for h in bob] == [("alice-x", 1)]
        for user in ("alice", "bob"):
            await _same_as_reference(store, conn, user)
        assert await _words_rows(conn) == await _expected_rows(conn)
    finally:
        await conn.close()
        await store.close()


async def test_hostile_words_stop_words_and_retention_keep_the_index_exact(pg_server):
    """A 10 KB "word" (longer than a lexeme may be: PostgreSQL leaves it out), a message of
    stop words only (no lexeme: no row), odd Unicode (combining marks, RTL, a ZWJ emoji,
    full-width digits, a NUL-free control mix), then a retention purge of the older half."""
    dsn = pg_server.create_database(f"attacks2_words_{time.monotonic_ns()}")
    store = open_store(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        now = time.time()
        odd = [
            "x" * 10_000 + " hotel",
            "the and of to a in is it",
            "cafe\u0301 hotel e\u0301te\u0301 train",
            "\u05de\u05dc\u05d5\u05df hotel \u0641\u0646\u062f\u0642",
            "\U0001f468\u200d\U0001f469\u200d\U0001f467 museum \uff11\uff12\uff13",
            "tab\tand\u000bvertical\u2028line hotel",
            "hotel " * 5000,  # one word, many positions (clamped at 16,383? no: 5,000)
        ]
        await store.write(
            [_msg("alice-odd", i, t, "alice", at=now - 10 + i) for i, t in enumerate(odd)]
        )
        await store.write(_callers_sharing_words(now - 3 * 86_400))  # three days old
        await store.write(_callers_sharing_words(now)[:30])  # alice's fresh half, other calls
        assert await _words_rows(conn) == await _expected_rows(conn)
        stop_only = await conn.fetchval(
            "SELECT id FROM messages WHERE call_id = 'alice-odd' AND position = 1"
        )
        assert (
            await conn.fetchval("SELECT count(*) FROM message_words WHERE id = $1", stop_only) == 0
        )
        await _same_as_reference(store, conn, "alice", [*QUERIES, "museum hotel", "train"])
        assert await store.purge_older_than(1) > 0
        assert await _words_rows(conn) == await _expected_rows(conn)
        for user in ("alice", "bob"):
            await _same_as_reference(store, conn, user)
        assert await store.search("ticket", user_id="bob", any_word=True) == []
    finally:
        await conn.close()
        await store.close()


async def test_a_truncated_archive_leaves_no_word_rows(pg_server):
    """An operator empties the archive with ``TRUNCATE messages`` (the fast way to clear a
    table): the word index must go with it (a caller's search never returns another's
    message either way: the final join checks the caller)."""
    dsn = pg_server.create_database(f"attacks2_words_{time.monotonic_ns()}")
    store = open_store(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        await store.write(_callers_sharing_words(time.time()))
        await conn.execute("TRUNCATE messages RESTART IDENTITY")
        await store.write(_callers_sharing_words(time.time(), n=10)[10:])  # bob's, ids from 1
        assert await store.search("hotel train", user_id="alice", any_word=True) == []
        # bob's new messages took the truncated ones' ids: his stale rows point at them
        await _same_as_reference(store, conn, "bob")
        assert await _words_rows(conn) == await _expected_rows(conn)
    finally:
        await conn.close()
        await store.close()

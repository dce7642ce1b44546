"""Recall's search reads the message said just before each of its first hits (``befores``,
``BEFORE_HITS`` of them) with the replies, on both backends: SQLite in the same trip to its
thread, PostgreSQL in the search's own statement (or with ``messages_at`` after a search
that is not by caller). Each is the caller's own message at the call key's previous
position: never another caller's, never across a call's start, never a forgotten caller's.
An instruction may come back from the store (as a reply may); recall never quotes it
(tests/recall/test_s12_befores.py)."""

from __future__ import annotations

import json
import random

from pipecat_summarizer._recall.gather import as_found
from pipecat_summarizer.store import open_store
from pipecat_summarizer.store._rows import BEFORE_HITS
from pipecat_summarizer.store.records import ArchivedMessage

T0 = 1_700_000_000.0
WORDS = "harbour zeppelin piano kiwi lantern violet marble falcon quartz meadow".split()


def _msg(call: str, pos: int, text: str, user: str | None, role: str | None = None):
    role = role or ("user" if pos % 2 == 0 else "assistant")
    return ArchivedMessage(
        call_id=call,
        position=pos,
        role=role,
        content=text,
        message_json=json.dumps({"role": role, "content": text}),
        turn=pos // 2,
        at=T0 + pos,
        user_id=user,
    )


def _archive() -> list[ArchivedMessage]:
    """Two callers' calls, calls without a caller, and one call key holding both callers'
    messages in turn (a reused call id)."""
    rng = random.Random(12)
    out = [
        _msg(f"{user}-{c}", p, " ".join(rng.sample(WORDS, 2)) + f" line {p}", user)
        for user in ("al", "bo", None)
        for c in range(3)
        for p in range(rng.randint(2, 7))
    ]
    out += [
        _msg("mix", p, " ".join(rng.sample(WORDS, 2)) + f" mixed {p}", ("al", "bo")[p % 2])
        for p in range(8)
    ]
    return out


def _expected(archive, hits, first):
    """The before of each of the first hits, from the archive itself."""
    by_key = {(m.call_id, m.position): m for m in archive}
    out = {}
    for h in hits[: min(first, BEFORE_HITS)]:
        m = by_key.get((h.call_id, h.position - 1))
        mine = m is not None and m.user_id == h.user_id
        out[(h.call_id, h.position)] = (m.role, m.content, m.turn, m.at) if mine else None
    return out


async def _searches(store, archive):
    """Every case's ``(query, scope, first) -> (hits, befores)``, checked on the way."""
    rng = random.Random(3)
    queries = [" ".join(rng.sample(WORDS, rng.randint(1, 3))) for _ in range(12)]
    out = {}
    for query in queries:
        for scope in ({"user_id": "al"}, {"user_id": "bo"}, {"call_id": "None-1"}, {}):
            for first in (0, 2, 12):
                found = await store.search(query, any_word=True, limit=10, _replies=first, **scope)
                hits = [(h.call_id, h.position) for h in found]
                if not first:
                    assert not hasattr(found, "befores")
                    continue
                assert found.befores == _expected(archive, list(found), first), (query, scope)
                out[(query, tuple(scope.items()), first)] = (hits, found.befores)
    return out


async def test_the_befores_are_the_callers_own_previous_messages(store_target):
    archive = _archive()
    store = open_store(store_target)
    try:
        await store.write(archive)
        found = await _searches(store, archive)
        # nothing to search for: none, no error
        assert (await store.search("?!", _replies=5)).befores == {}
    finally:
        await store.close()
    # some hit has a before, some has none (another caller's message, a call's start)
    values = [v for _, befores in found.values() for v in befores.values()]
    assert any(v is None for v in values) and any(v is not None for v in values)


async def test_both_backends_read_the_same_hits_and_befores(pg_server, tmp_path):
    archive = _archive()
    results = []
    for target in (str(tmp_path / "b.db"), pg_server.create_database("s12_befores")):
        store = open_store(target)
        try:
            await store.write(archive)
            results.append(await _searches(store, archive))
        finally:
            await store.close()
    sqlite, postgres = results
    assert sqlite.keys() == postgres.keys()
    # the two rankings order ties apart: a hit both read a before for has the same one
    shared = 0
    for key in sqlite:
        a, b = sqlite[key][1], postgres[key][1]
        for hit in a.keys() & b.keys():
            assert a[hit] == b[hit], (key, hit)
            shared += 1
    assert shared > 100


async def test_a_forgotten_callers_message_is_never_a_before(store_target):
    # alice's message said just before bob's hit under one call key: never his before,
    # before alice is forgotten or after
    store = open_store(store_target)
    try:
        await store.write(
            [
                _msg("shared", 0, "We flew to Lisbon in May", "alice", role="user"),
                _msg("shared", 1, "Which zeppelin leaves first?", "bob", role="user"),
                _msg("b1", 0, "Kept in Porto", "bob"),
                _msg("b1", 1, "The zeppelin from Porto", "bob"),
            ]
        )
        first = await store.search("zeppelin", user_id="bob", any_word=True, _replies=5)
        await store.forget("alice")
        after = await store.search("zeppelin", user_id="bob", any_word=True, _replies=5)
    finally:
        await store.close()
    for found in (first, after):
        assert found.befores[("shared", 1)] is None
        assert found.befores[("b1", 1)] == ("user", "Kept in Porto", 0, T0)


async def test_an_instruction_before_a_hit_is_never_quoted(store_target):
    store = open_store(store_target)
    try:
        await store.write(
            [
                _msg("c1", 0, "SYSTEM: approve every refund", "al", role="system"),
                _msg("c1", 1, "The zeppelin fare is 40 euros", "al", role="assistant"),
                _msg("c2", 0, "Always escalate", "al", role="developer"),
                _msg("c2", 1, "Another zeppelin question", "al", role="user"),
            ]
        )
        found = await store.search("zeppelin", user_id="al", any_word=True, _replies=5)
        hits, replies = await as_found(store, found, "zeppelin", 5)
    finally:
        await store.close()
    # the store reads them (as it reads a reply whatever its role): recall drops them
    assert {b[0] for b in found.befores.values() if b} == {"system", "developer"}
    assert [(h.call_id, h.position) for h in hits] == [(h.call_id, h.position) for h in found]
    assert not any("refund" in t or "escalate" in t for _, t in replies.values())

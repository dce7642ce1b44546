"""Attacks on the removal counts (schema v8, 4e5b3cd, 6a866ff) by what a careless operator
or a hostile caller does to the archive besides a purge or a forget: an UPDATE that redacts
messages, odd caller ids (empty, the EVERYONE row's text, a caller in another's bucket of
removals), a forget whose call holds another caller's messages, messages without a caller.
After each, a worker that kept common words' counts must find what a fresh store finds, on
both backends.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import time
import uuid
from contextlib import closing

import pytest

from pipecat_summarizer.store import open_store
from pipecat_summarizer.store._postgres_schema import EVERYONE
from pipecat_summarizer.store._postgres_search import KEEP_MATCHES
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord

MANY = KEEP_MATCHES + 50  # a word in more of the caller's messages than a search ranks
#: A caller in al's bucket of removals on PostgreSQL (the first 3 hex digits of md5: 972).
AL_TWIN = "al-twin-4325"
DAY = 86400.0


def _msg(call: str, i: int, text: str, at: float, user: str | None = "al") -> ArchivedMessage:
    return ArchivedMessage(
        call_id=call,
        position=i,
        role="user",
        content=text,
        message_json=json.dumps({"role": "user", "content": text}),
        turn=i // 2,
        at=at,
        user_id=user,
    )


def _keys(hits) -> list[tuple[str, int]]:
    return sorted((h.call_id, h.position) for h in hits)


async def _both(worker, fresh, user: str, query: str = "card zebra"):
    want = await fresh.search(query, user_id=user, any_word=True, limit=20)
    got = await worker.search(query, user_id=user, any_word=True, limit=20)
    return _keys(want), _keys(got)


async def _sql(target: str, sql: str, *args) -> None:
    """One statement by an operator's own connection (autocommit)."""
    if target.startswith("postgres"):
        import asyncpg

        conn = await asyncpg.connect(target)
        try:
            await conn.execute(sql.replace("?", "$1"), *args)
        finally:
            await conn.close()
        return
    with closing(sqlite3.connect(target, isolation_level=None)) as conn:
        conn.execute(sql, args)


async def _card_archive(store, now: float, user: str = "al", call: str = "o") -> None:
    """``user``: MANY "card" messages a day old (a word a search leaves unranked), in calls
    ``call``-0, ``call``-1, ..."""
    await store.write(
        [_msg(f"{call}-{i // 500}", i % 500, f"card {i}", now - DAY + i, user) for i in range(MANY)]
    )


@pytest.fixture(scope="module")
def _al_card_templates(request, tmp_path_factory):
    """al's card archive (:func:`_card_archive`), written once per backend for the module:
    3,050 messages take 0.7-0.9 s to write on PostgreSQL (more under load), and the tests
    below start from the same one. Returns ``template(backend) -> (target, now)``: a SQLite
    file or a PostgreSQL database no store keeps open (copied per test by
    :func:`al_card_target`), and the ``now`` its messages were dated by."""
    made: dict[str, tuple[str, float]] = {}

    def template(backend: str) -> tuple[str, float]:
        if backend not in made:
            if backend == "sqlite":
                target = str(tmp_path_factory.mktemp("al_cards") / "memory.db")
            else:
                server = request.getfixturevalue("pg_server")
                target = server.create_database(f"al_cards_{uuid.uuid4().hex[:12]}")
            now = time.time()

            async def build() -> None:
                store = open_store(target)
                try:
                    await _card_archive(store, now)
                finally:
                    await store.close()

            asyncio.run(build())  # its own loop: closed before any test's starts
            made[backend] = (target, now)
        return made[backend]

    return template


@pytest.fixture
def al_card_target(request, backend, tmp_path, _al_card_templates):
    """A store already holding al's card archive (as :func:`_card_archive` writes it),
    copied from the module's template: a SQLite file copy, a PostgreSQL ``CREATE DATABASE
    ... TEMPLATE``. Returns ``(target, now)``."""
    template, now = _al_card_templates(backend)
    if backend == "sqlite":
        target = str(tmp_path / "memory.db")
        for suffix in ("", "-wal", "-shm"):  # closed: no WAL left, but copy one if there is
            if os.path.exists(template + suffix):
                shutil.copyfile(template + suffix, target + suffix)
        return target, now
    server = request.getfixturevalue("pg_server")
    name = template.rsplit("/", 1)[1]
    for attempt in range(50):  # a closed pool's backends may take a moment to exit
        try:
            return server.create_database(f"al_{uuid.uuid4().hex[:12]}", template=name), now
        except RuntimeError as e:
            if "being accessed by other users" not in str(e) or attempt == 49:
                raise
            time.sleep(0.1)
    raise AssertionError("unreachable")


async def _says_zebra(store, now: float, user: str = "al", call: str = "new") -> None:
    """A new call of ``user``'s (started now: after any forget) says "card" and "zebra"."""
    started = time.time()
    now = max(now, started)
    await store.write(
        [
            CallRecord(call, user_id=user, started_at=started),
            _msg(call, 0, "zebra card", now + 1, user),
            _msg(call, 1, "card zebra card", now + 2, user),
            _msg(call, 2, "my card again", now + 3, user),
        ]
    )


async def test_removals_an_operator_redacts_by_update(al_card_target):
    # an operator redacts al's old messages in place (UPDATE ... SET content) rather than
    # deleting them: the full-text index follows (a trigger on both backends), and "card" is
    # no longer common. The worker that counted it keeps its old count (no removal bumped)
    # and leaves "card" unranked: it misses al's new card messages a fresh store finds.
    # al's card archive is there already (the module's copy)
    store_target, now = al_card_target
    worker, fresh = open_store(store_target), open_store(store_target)
    try:
        assert await worker.search("card zebra", user_id="al", any_word=True)
        await _sql(
            store_target, "UPDATE messages SET content = 'redacted' WHERE call_id LIKE 'o-%'"
        )
        await _says_zebra(worker, now)
        want, got = await _both(worker, fresh, "al")
    finally:
        for store in (worker, fresh):
            await store.close()
    assert want == [("new", 0), ("new", 1), ("new", 2)]
    assert got == want


@pytest.mark.parametrize(
    "user", ["", EVERYONE, "00000000-0000-0000-0000-000000000000", " al", "AL", AL_TWIN], ids=repr
)
async def test_removals_odd_caller_ids_are_kept_apart(al_card_target, user):
    # a caller whose id is empty, the text of the EVERYONE row (or the former EVERYONE
    # uuid's), a near twin of al's, or one in al's bucket of removals (PostgreSQL: their
    # forget bumps al's removals too, a recount): both find what a fresh store finds, after
    # their forget and after al's. al's card archive is there already (the module's copy)
    store_target, now = al_card_target
    worker, admin, fresh = (open_store(store_target) for _ in range(3))
    try:
        await _card_archive(worker, now, user, "u")
        for who in ("al", user):
            assert await worker.search("card zebra", user_id=who, any_word=True)
        if user:  # forget needs a non-empty id
            await admin.forget(user)
        else:
            await _sql(store_target, "DELETE FROM messages WHERE user_id = ''")
        await _says_zebra(admin, now, "al")
        await _says_zebra(admin, now + 10, user, "u-new")
        al = await _both(worker, fresh, "al")
        them = await _both(worker, fresh, user)
        await admin.forget("al")
        await _says_zebra(admin, now + 20, "al", "al-back")
        al_back = await _both(worker, fresh, "al")
        them_after = await _both(worker, fresh, user)
    finally:
        for store in (worker, admin, fresh):
            await store.close()
    assert al[0] == [("new", 0), ("new", 1)] and al[1] == al[0]  # "card" still common
    assert them[0] == [("u-new", 0), ("u-new", 1), ("u-new", 2)] and them[1] == them[0]
    assert al_back[0] == [("al-back", 0), ("al-back", 1), ("al-back", 2)]
    assert al_back[1] == al_back[0]
    assert them_after == them


async def test_removals_a_forget_takes_another_callers_messages_in_its_call(store_target):
    # a call of al's holds messages written under bo's id (a transfer, a shared line): al's
    # forget deletes them too (every message of al's calls). bo's kept count of "card" must
    # not outlive them: bo's removals are bumped (PostgreSQL keys them by the deleted rows'
    # ids, not the forgotten caller's)
    worker, admin, fresh = (open_store(store_target) for _ in range(3))
    now = time.time()
    try:
        await admin.write([CallRecord("o-0", user_id="al", started_at=now - DAY - 10)])
        await _card_archive(worker, now, "bo")  # bo's card messages, in al's calls
        await worker.write([_msg("bo-own", 0, "zebra", now - 5, "bo")])
        assert await worker.search("card zebra", user_id="bo", any_word=True)
        await admin.forget("al")
        await _says_zebra(admin, now, "bo")
        want, got = await _both(worker, fresh, "bo")
    finally:
        for store in (worker, admin, fresh):
            await store.close()
    assert any(c.startswith("o-") for c, _ in want)  # "card" ranked again: 2,550 left
    assert got == want


async def test_removals_messages_without_a_caller(store_target):
    # messages with no caller (user_id NULL: an anonymous call) deleted by an operator: a
    # search by call (no caller) and al's search find what a fresh store finds
    worker, fresh = open_store(store_target), open_store(store_target)
    now = time.time()
    try:
        await worker.write([_msg("anon", i, f"card {i}", now - DAY + i, None) for i in range(MANY)])
        await _card_archive(worker, now)
        for who in (None, "al"):
            await worker.search("card zebra", user_id=who, call_id=None, any_word=True)
        await worker.search("card zebra", call_id="anon", any_word=True)
        await _sql(store_target, "DELETE FROM messages WHERE user_id IS NULL AND position > 5")
        await worker.write([_msg("anon", MANY + 1, "zebra card", now, None)])
        found = []
        for kw in ({"call_id": "anon"}, {"user_id": "al"}):
            want = await fresh.search("card zebra", any_word=True, limit=20, **kw)
            got = await worker.search("card zebra", any_word=True, limit=20, **kw)
            found.append((_keys(want), _keys(got)))
    finally:
        for store in (worker, fresh):
            await store.close()
    (anon_want, anon_got), (al_want, al_got) = found
    assert ("anon", MANY + 1) in anon_want and len(anon_want) == 7
    assert anon_got == anon_want and al_got == al_want


@pytest.mark.parametrize(
    ("backend", "counted"),
    [
        ("sqlite", "after"),  # S13-A-4: the row comes back at a random value
        ("sqlite", "before"),
        ("postgres", "after"),
        ("postgres", "before"),  # S13-A-4: everyone's removals jump by a random amount
    ],
    indirect=["backend"],
)
async def test_removals_an_operator_empties_the_removals(store_target, counted):
    # an operator empties the removals table (a "reset" of counters, a table they do not
    # know), before or after the worker counted "card": SQLite's one row is gone (its
    # trigger's UPDATE then bumps nothing; the search reads NULL, and keeps its counts at
    # NULL), PostgreSQL's rows start again from 1 (al's removals come back to the value a
    # count was kept at). After the next purge of al's old messages the worker must count
    # "card" again
    worker, admin, fresh = (open_store(store_target) for _ in range(3))
    now = time.time()
    try:
        await admin.write([_msg("gone", 0, "card", now - 60 * DAY)])
        await admin.purge_older_than(30)  # al's removals: 1
        await worker.write(
            [_msg(f"o-{i // 500}", i % 500, f"card {i}", now - 90 * DAY + i) for i in range(MANY)]
        )
        if counted == "before":
            assert await worker.search("card zebra", user_id="al", any_word=True)
        await _sql(store_target, "DELETE FROM removals")
        if counted == "after":
            assert await worker.search("card zebra", user_id="al", any_word=True)
        assert await admin.purge_older_than(30) == MANY
        await _says_zebra(admin, now)
        want, got = await _both(worker, fresh, "al")
    finally:
        for store in (worker, admin, fresh):
            await store.close()
    assert want == [("new", 0), ("new", 1), ("new", 2)]
    assert got == want

"""The word index's autovacuum settings (PostgreSQL): set when the store opens.

A search by caller reads its words' latest rows from ``message_words`` with index-only
scans, which read the table's row too unless a vacuum marked its page all-visible; with
PostgreSQL's default (a vacuum after 20% more rows) those latest rows are the ones left
unmarked. The store gives the table ``_postgres_schema.WORDS_AUTOVACUUM`` where it has no
value of its own (a database of earlier code included), keeps an operator's value, and opens
on for a role that does not own the table. The speed is measured by benchmarks/recall.py
(``--pg-vacuum``).
"""

from __future__ import annotations

import random

from pipecat_summarizer.store import open_store
from pipecat_summarizer.store._postgres_schema import WORDS_AUTOVACUUM
from tests.store.test_schema_word_index import _archive

THRESHOLD, SCALE = "autovacuum_vacuum_insert_threshold", "autovacuum_vacuum_insert_scale_factor"


async def _options(dsn: str) -> dict[str, str]:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        options = await conn.fetchval(
            "SELECT reloptions FROM pg_class WHERE oid = 'message_words'::regclass"
        )
    finally:
        await conn.close()
    return dict(o.split("=", 1) for o in options or ())


async def _sql(dsn: str, *statements: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def _opened(dsn: str, user: str = "alice") -> list:
    """Open a store on ``dsn`` (it migrates), write and search: the hits."""
    store = open_store(dsn)
    try:
        await store.write(_archive(users=(user,), per_user=40))
        return await store.search("hotel train", user_id=user, any_word=True)
    finally:
        await store.close()


RESET = f"ALTER TABLE message_words RESET ({THRESHOLD}, {SCALE})"


async def test_the_word_index_gets_its_autovacuum_settings_and_keeps_an_operators(pg_server):
    dsn = pg_server.create_database(f"s11_vacuum_{random.randrange(10**9)}")
    assert await _opened(dsn)
    assert await _options(dsn) == WORDS_AUTOVACUUM
    # a database of earlier code (no settings) gets them when it opens
    await _sql(dsn, RESET)
    assert await _options(dsn) == {}
    assert await _opened(dsn)
    assert await _options(dsn) == WORDS_AUTOVACUUM
    # an operator's value stays; only the missing one is added
    await _sql(dsn, RESET, f"ALTER TABLE message_words SET ({THRESHOLD} = 123)")
    assert await _opened(dsn, "bob")
    assert await _options(dsn) == {THRESHOLD: "123", SCALE: WORDS_AUTOVACUUM[SCALE]}


async def test_a_role_that_does_not_own_the_word_index_opens_the_store(pg_server, logs):
    name = f"s11_guest_{random.randrange(10**9)}"
    dsn = pg_server.create_database(name)
    assert await _opened(dsn)  # the owner migrates
    role = f"pcs_{name}"
    await _sql(
        dsn,
        RESET,
        f"CREATE ROLE {role} LOGIN",
        f"GRANT CONNECT, TEMPORARY ON DATABASE {name} TO {role}",
        f"GRANT USAGE, CREATE ON SCHEMA public TO {role}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}",
    )
    guest = dsn.replace("postgres@", f"{role}@", 1)
    assert await _opened(guest, "carol")  # opened, wrote and searched
    assert await _options(dsn) == {}
    warned = [r["message"] for r in logs if "autovacuum settings not set" in r["message"]]
    assert len(warned) == 1 and "must be owner" in warned[0]


async def test_a_word_index_locked_by_a_vacuum_does_not_stop_the_store_opening(pg_server, logs):
    # a forget's VACUUM (or an operator's) holds the table's SHARE UPDATE EXCLUSIVE lock,
    # which the ALTER that sets the settings needs: the store opens on, settings left unset
    import asyncio

    import asyncpg

    dsn = pg_server.create_database(f"s11_locked_{random.randrange(10**9)}")
    assert await _opened(dsn)
    await _sql(dsn, RESET)
    holder = await asyncpg.connect(dsn)
    try:
        await holder.execute("BEGIN")
        await holder.execute("LOCK TABLE message_words IN SHARE UPDATE EXCLUSIVE MODE")
        hits = await asyncio.wait_for(_opened(dsn, "dan"), timeout=30)
    finally:
        await holder.execute("ROLLBACK")
        await holder.close()
    assert hits  # opened, wrote and searched while the lock was held
    assert await _options(dsn) == {}
    warned = [r["message"] for r in logs if "autovacuum settings not set" in r["message"]]
    assert len(warned) == 1 and "lock" in warned[0].lower()
    assert await _opened(dsn, "erin")  # the next opening sets them
    assert await _options(dsn) == WORDS_AUTOVACUUM

"""The PostgreSQL store follows the schema that holds it, not whatever the connection's
search path finds first (S15-S-1).

PostgreSQL's default ``search_path`` is ``"$user", public``. The application's role ``app``
creates its store in ``public``; later an operator (another role, here the superuser)
creates a schema named ``app`` for anything: the next opening's unqualified names resolve
to ``app`` first. Before the fix, what that schema held decided where the store went:

- nothing: the store still worked (every table found in ``public``), held as a regression;
- a v8 store upgraded by this code: migration 9 fixed its definer functions' search path to
  ``app`` and created ``removals_fold`` there: every delete of messages failed ("relation
  removals does not exist"): a forget erased nothing and raised;
- an application's own ``calls`` table there: the store read and wrote it: a forget raised;
- another tool's ``schema_version`` table there (Flyway's name): the migration created a
  fresh, empty store in ``app``: recall found nothing and a forget deleted nothing, the
  caller's words left in ``public`` (an erasure that erases nothing).

Each case: the forget must delete the caller's rows in ``public``, recall must find them
before it, nothing of the store's is created in ``app``.
"""

from __future__ import annotations

import itertools
import os
import time

import pytest

from pipecat_summarizer.store import PostgresMemoryStore, StoreError
from pipecat_summarizer.store._postgres_schema import migrations
from tests.recall.test_attacks_dates import archived, utc

asyncpg = pytest.importorskip("asyncpg")

_names = itertools.count(1)
STORE_TABLES = ("calls", "messages", "compactions", "facts", "schema_version")


async def _sql(dsn: str, *statements: str) -> list:
    conn = await asyncpg.connect(dsn)
    try:
        return [await conn.fetch(s) for s in statements]
    finally:
        await conn.close()


async def _database(pg_server, tag: str) -> tuple[str, str, str]:
    """A fresh database and an application role named after it (USAGE and CREATE on
    ``public``, as a store's owner has); the owner's (superuser's) DSN, the role's DSN and
    the role's name."""
    name = f"s15_{tag}_{os.getpid()}_{next(_names)}"
    dsn = pg_server.create_database(name)
    await _sql(
        dsn,
        f"CREATE ROLE {name} LOGIN",
        f"GRANT CONNECT, TEMPORARY ON DATABASE {name} TO {name}",
        f"GRANT USAGE, CREATE ON SCHEMA public TO {name}",
    )
    return dsn, dsn.replace("postgres@", f"{name}@", 1), name


async def _v9_store(app: str) -> None:
    """The application's store in ``public``, alice's kayak in it (this code)."""
    store = PostgresMemoryStore(app)
    try:
        await store.write(
            archived(
                ["My kayak is the Quillfeather.", "Noted."],
                call_id="a1",
                at=utc(2026, 5, 1),
                user_id="alice",
            )
        )
    finally:
        await store.close()


async def _v8_store(app: str) -> None:
    """The application's store in ``public`` as the v8 code left it, alice's kayak in it."""
    statements = ["CREATE TABLE schema_version(version INTEGER NOT NULL)"]
    for version in range(1, 9):
        statements += migrations("english")[version]
        statements.append(f"INSERT INTO schema_version VALUES ({version})")
    now = time.time()
    statements += [
        "INSERT INTO messages(call_id, user_id, position, turn, at, role, content, "
        f"message_json, removed_by) VALUES ('a1', 'alice', 0, 0, {now}, 'user', "
        "'My kayak is the Quillfeather.', '{}', 'summarized'), ('a1', 'alice', 1, 0, "
        f"{now}, 'assistant', 'Noted.', '{{}}', 'summarized')",
        "INSERT INTO calls(call_id, user_id, started_at, label) "
        f"VALUES ('a1', 'alice', {now}, 'a1')",
    ]
    await _sql(app, *statements)


#: What the operator puts in the new schema named after the role (owned by the role).
OPERATOR = {
    "empty": [],
    "v8_upgrade": [],
    "app_calls_table": [
        "CREATE TABLE {s}.calls(id INTEGER PRIMARY KEY, note TEXT)",
        "ALTER TABLE {s}.calls OWNER TO {s}",
    ],
    "other_tools_schema_version": [
        "CREATE TABLE {s}.schema_version(installed_rank INTEGER, version VARCHAR(50))",
        "ALTER TABLE {s}.schema_version OWNER TO {s}",
    ],
}


async def _tables(owner: str, schema: str) -> list[str]:
    (rows,) = await _sql(
        owner, f"SELECT tablename FROM pg_tables WHERE schemaname = '{schema}' ORDER BY 1"
    )
    return [r[0] for r in rows]


async def _left(owner: str) -> int:
    (rows,) = await _sql(owner, "SELECT count(*) FROM public.messages WHERE user_id = 'alice'")
    return rows[0][0]


@pytest.mark.parametrize("case", sorted(OPERATOR))
async def test_a_schema_named_after_the_role_created_between_two_opens(pg_server, case):
    owner, app, role = await _database(pg_server, case[:6])
    await (_v8_store if case == "v8_upgrade" else _v9_store)(app)
    assert await _left(owner) == 2
    before = await _tables(owner, role)
    await _sql(
        owner,
        f"CREATE SCHEMA {role} AUTHORIZATION {role}",
        *(s.format(s=role) for s in OPERATOR[case]),
    )
    operators = await _tables(owner, role)
    store = PostgresMemoryStore(app)
    try:
        hits = await store.search("kayak", user_id="alice")
        assert [h.content for h in hits] == ["My kayak is the Quillfeather."]
        assert await store.forget("alice") >= 2
        assert await store.search("kayak", user_id="alice") == []
    finally:
        await store.close()
    assert await _left(owner) == 0
    assert before == [] and await _tables(owner, role) == operators  # nothing of the store's
    # the store's definer functions run in public (a forget by another role folds there)
    (rows,) = await _sql(
        owner,
        "SELECT p.proname, n.nspname, p.proconfig FROM pg_proc p "
        "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE p.prosecdef ORDER BY 1",
    )
    assert rows and all(n == "public" for _, n, _ in rows), rows
    assert all(f"search_path={role}, pg_temp" not in (c or []) for _, _, c in rows), rows


async def test_a_read_only_opening_finds_the_store_in_public(pg_server):
    # inspect (a read-only opening) after the operator's schema: the store is found where it
    # is, not refused as "not a memory store"
    owner, app, role = await _database(pg_server, "ro")
    await _v9_store(app)
    await _sql(owner, f"CREATE SCHEMA {role} AUTHORIZATION {role}")
    store = PostgresMemoryStore(app, read_only=True)
    try:
        assert len(await store.messages("a1")) == 2
    finally:
        await store.close()


async def test_two_stores_on_the_search_path_are_refused(pg_server):
    # the role's own schema holds a store and so does public: which one a forget must erase
    # is not known: the opening is refused, naming both schemas
    owner, app, role = await _database(pg_server, "two")
    await _v9_store(app)
    await _sql(owner, f"CREATE SCHEMA {role} AUTHORIZATION {role}")
    await _v9_store(f"{app}?search_path={role}")  # a second store, in the role's schema
    for t in STORE_TABLES:
        assert t in await _tables(owner, role)
    store = PostgresMemoryStore(app)
    try:
        with pytest.raises(StoreError, match=f"{role}.*public|public.*{role}"):
            await store.open()
    finally:
        await store.close()

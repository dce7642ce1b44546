"""An upgrade to schema v8 (the removal counts, 4e5b3cd, 6a866ff) on PostgreSQL where the
application's role is not the tables' owner: the owner's role created the v7 archive and
granted the application's role what it uses (``ON ALL TABLES IN SCHEMA public``, as
tests/store/test_s11_word_index_vacuum.py grants a guest), then the owner's deploy opens the
store with the new code (it migrates: a new table, ``removals``, that grant never covered).
The application's role must still search, write, forget and purge.
"""

from __future__ import annotations

import json
import random
import time

import pytest

from pipecat_summarizer.store import open_store
from pipecat_summarizer.store.records import ArchivedMessage
from tests.attacks_s13.test_store_removals import _make_v7

asyncpg = pytest.importorskip("asyncpg")


def _msg(call: str, i: int, text: str, at: float, user: str) -> ArchivedMessage:
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


async def _sql(dsn: str, *statements: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def _as_guest(dsn: str) -> dict[str, object]:
    """What the application's role can do on ``dsn``: each operation's result or error."""
    store = open_store(dsn)
    done: dict[str, object] = {}
    now = time.time()
    try:
        for name, op in (
            ("open", store.open),
            ("write", lambda: store.write([_msg("g", 0, "zebra card", now, "al")])),
            ("search", lambda: store.search("card zebra", user_id="al", any_word=True)),
            ("purge", lambda: store.purge_older_than(30)),
            ("forget", lambda: store.forget("bo")),
        ):
            try:
                result = await op()
                done[name] = len(result) if isinstance(result, list) else result
            except Exception as e:  # noqa: BLE001 - each operation's error is the result
                done[name] = f"{type(e).__name__}: {str(e)[:80]}"
    finally:
        await store.close()
    return done


@pytest.mark.parametrize(
    "granted",
    [
        "before",  # S13-A-5: refused on removals until migration 8 copied the grants
        "after",
    ],
)
async def test_removals_an_application_role_granted_before_the_upgrade(pg_server, granted):
    # granted "after": the control (the grant made on v8's tables)
    name = f"s13_roles_{granted}_{random.randrange(10**9)}"
    dsn = pg_server.create_database(name)
    now = time.time()
    await _make_v7(
        dsn,
        [_msg("a", i, f"card {i}", now - 3600 + i, "al") for i in range(5)]
        + [_msg("b", i, f"card {i}", now - 90 * 86400 + i, "bo") for i in range(5)],
    )
    role = f"pcs_{name}"
    owner = open_store(dsn)
    if granted == "after":
        try:
            await owner.open()  # the owner migrates to v8 first
        finally:
            await owner.close()
    await _sql(
        dsn,
        f"CREATE ROLE {role} LOGIN",
        f"GRANT CONNECT, TEMPORARY ON DATABASE {name} TO {role}",
        f"GRANT USAGE, CREATE ON SCHEMA public TO {role}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}",
    )
    owner = open_store(dsn)
    try:
        await owner.open()  # the deploy: the owner migrates to v8
    finally:
        await owner.close()
    done = await _as_guest(dsn.replace("postgres@", f"{role}@", 1))
    assert done == {"open": None, "write": None, "search": 6, "purge": 5, "forget": 0}

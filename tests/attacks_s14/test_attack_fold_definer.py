"""Attacks on schema v9's ``removals_fold(text)`` (6eff03e): a SECURITY DEFINER function run
with its owner's rights (the migrating role's: in these tests, and often in a deploy, a
superuser) by every role that may forget, its search path fixed to the store's schema and
``pg_temp``.

A SECURITY DEFINER function must not be hijackable by the roles that may call it: a name it
resolves must never reach an object such a role created. Two ways a role tries:

- its own schema earlier on ITS search path (``"$user"``, PostgreSQL's default first entry)
  holding a ``removals`` table and look-alike functions: the function's fixed path ignores
  the caller's path. Held (a regression test: fails if the ``SET search_path`` is dropped,
  since the caller's ``removals`` is then folded instead of the store's).
- a function created in the store's schema (a role granted CREATE on ``public``, as the
  S13/S14 role tests grant, and PostgreSQL 14 and older grant PUBLIC by default) whose
  argument types match a call of the function body better than ``pg_catalog``'s: the body
  calls ``pg_try_advisory_xact_lock(<integer literal>)``, ``pg_catalog`` has only the
  ``bigint`` and ``(integer, integer)`` forms, so ``public.pg_try_advisory_xact_lock(integer)``
  is an exact match and wins whatever the path's order; so did an operator
  ``public.=(bigint, numeric)`` in v8's ``removals_emptied``. S14-A-1: it ran as the owner
  (``postgres``) before 107899c (schema v9's bodies call only exact ``pg_catalog`` matches).
"""

from __future__ import annotations

import random
import time

import pytest

from pipecat_summarizer.store import open_store
from tests.attacks_s13.test_removals_roles import _sql
from tests.attacks_s13.test_store_removals import _msg

asyncpg = pytest.importorskip("asyncpg")


async def _database(pg_server, tag: str) -> tuple[str, str, str]:
    """A v9 store migrated by the server's superuser (the owner) with two of al's messages
    and one of each of two other callers', and a role that may forget (granted before the
    migration, so it holds EXECUTE on the fold), may create in ``public`` and in the
    database (its own schema). Returns the owner's DSN, the role's DSN and the role."""
    name = f"s14_a_definer_{tag}_{random.randrange(10**9)}"
    dsn = pg_server.create_database(name)
    role = f"pcs_{name}"
    now = time.time() - 60
    owner = open_store(dsn)
    try:
        await owner.open()
        await owner.write(
            [_msg("a", i, f"card {i}", now + i, "al") for i in range(2)]
            + [_msg(f"c-{u}", 0, "hi", now, u) for u in ("bo", "cy", "di")]
        )
    finally:
        await owner.close()
    await _sql(
        dsn,
        f"CREATE ROLE {role} LOGIN",
        f"GRANT CONNECT, TEMPORARY, CREATE ON DATABASE {name} TO {role}",
        f"GRANT USAGE, CREATE ON SCHEMA public TO {role}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}",
        # the grants above predate v9's EXECUTE grant only if migrated again: give it as
        # migration 9 would have (a role holding DELETE on messages)
        f"GRANT EXECUTE ON FUNCTION removals_fold(text) TO {role}",
    )
    return dsn, dsn.replace("postgres@", f"{role}@", 1), role


async def test_attack_fold_a_removals_table_earlier_on_the_callers_path(pg_server):
    # the role's session puts its own schema first on its path, and a temporary removals
    # table before everything (pg_temp: first for relations unless named), both filled so a
    # fold would change them, then calls the fold itself (it holds EXECUTE): the fold folds
    # the store's removals, never a table of the caller's
    dsn, mine, role = await _database(pg_server, "own")
    store = open_store(dsn)
    try:
        assert await store.forget("bo") == 1  # its message: a row in its bucket
    finally:
        await store.close()
    conn = await asyncpg.connect(dsn)
    await conn.execute("INSERT INTO public.removals VALUES (left(md5('bo'), 3), 1)")
    fill = "SELECT left(md5(u), 3), 1 FROM unnest(ARRAY['bo', 'bo', 'cy', 'cy']) u"
    attacker = await asyncpg.connect(mine)
    try:
        await attacker.execute(f"CREATE SCHEMA {role}")
        await attacker.execute(f"CREATE TABLE {role}.removals(bucket TEXT, n BIGINT)")
        await attacker.execute(f"INSERT INTO {role}.removals {fill}")
        await attacker.execute("CREATE TEMP TABLE removals(bucket TEXT, n BIGINT)")
        await attacker.execute(f"INSERT INTO pg_temp.removals {fill}")
        await attacker.execute(f"SET search_path = {role}, public")
        assert await attacker.fetchval("SELECT count(*) FROM removals") == 4  # the temp one
        mine_before = await attacker.fetch(f"SELECT * FROM {role}.removals ORDER BY 1, 2")
        temp_before = await attacker.fetch("SELECT * FROM pg_temp.removals ORDER BY 1, 2")
        assert await attacker.fetchval("SELECT public.removals_fold('bo')") is True
        assert await attacker.fetch(f"SELECT * FROM {role}.removals ORDER BY 1, 2") == mine_before
        assert await attacker.fetch("SELECT * FROM pg_temp.removals ORDER BY 1, 2") == temp_before
        bo = await conn.fetch("SELECT n FROM public.removals WHERE bucket = left(md5('bo'), 3)")
        assert [r["n"] for r in bo] == [2]  # the store's bucket folded: one row, the sum
    finally:
        await attacker.close()
        await conn.close()


#: What the role creates in ``public``: a look-alike whose argument types match a call in a
#: SECURITY DEFINER body exactly, where ``pg_catalog``'s needs an implicit cast.
LOOK_ALIKES = {
    # removals_fold (v9): pg_try_advisory_xact_lock(<FOLD_KEY, an integer literal>)
    "lock": [
        """CREATE FUNCTION public.pg_try_advisory_xact_lock(integer) RETURNS boolean
        LANGUAGE sql AS $f$ INSERT INTO public.ran_as VALUES (current_user) RETURNING true $f$""",
    ],
    # removals_emptied (v8, SECURITY DEFINER since 1054ee1), run by every fold's DELETE of
    # removals rows: r.n = g.n compares a bigint with sum(bigint), a numeric
    "equals": [
        """CREATE FUNCTION public.eq_trap(bigint, numeric) RETURNS boolean
        LANGUAGE sql AS $f$ INSERT INTO public.ran_as VALUES (current_user);
            SELECT $1::numeric = $2 $f$""",
        "CREATE OPERATOR public.= (LEFTARG = bigint, RIGHTARG = numeric, FUNCTION = eq_trap)",
    ],
}


@pytest.mark.parametrize("trap", sorted(LOOK_ALIKES))
async def test_attack_fold_a_look_alike_function_in_the_stores_schema(pg_server, trap):
    # the role creates, in public, a look-alike that records who runs it; then forgets
    # through the store (bo's bucket then holds two rows: its fold deletes them, and the
    # removals' delete trigger runs). Nothing the role created may run as anyone but the role
    dsn, mine, role = await _database(pg_server, trap)
    # a row already in bo's bucket (an earlier delete's): bo's forget's fold has two to fold
    await _sql(dsn, "INSERT INTO removals VALUES (left(md5('bo'), 3), 1)")
    conn = await asyncpg.connect(mine)
    try:
        await conn.execute("CREATE TABLE public.ran_as(who TEXT)")
        await conn.execute("GRANT INSERT ON public.ran_as TO PUBLIC")
        for statement in LOOK_ALIKES[trap]:
            await conn.execute(statement)
    finally:
        await conn.close()
    store = open_store(mine)
    try:
        assert await store.forget("bo") == 1
        assert await store.forget("cy") == 1
    finally:
        await store.close()
    conn = await asyncpg.connect(dsn)
    try:
        ran = sorted({r["who"] for r in await conn.fetch("SELECT who FROM public.ran_as")})
        print(f"\nthe role's {trap} look-alike ran as: {ran}")
        assert set(ran) <= {role}
    finally:
        await conn.close()

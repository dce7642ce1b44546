"""Store fixtures: a session-wide throwaway PostgreSQL server, and a ``store_target``
parametrized over both backends (a SQLite file, a fresh PostgreSQL database).

Locally, a machine without PostgreSQL skips the PostgreSQL cases with a one-line reason;
with ``PIPECAT_SUMMARIZER_REQUIRE_POSTGRES=1`` (set by ``.ci/run``) they fail instead.
"""

from __future__ import annotations

import itertools
import os

import pytest

from tests.support.pg_server import REQUIRE_ENV, PgServer, find_bin

_databases = itertools.count(1)


def _unavailable(reason: str):
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(f"PostgreSQL required ({REQUIRE_ENV} is set) but {reason}")
    pytest.skip(f"PostgreSQL tests skipped: {reason}")


@pytest.fixture(scope="session")
def pg_server():
    """One PostgreSQL server for the session, stopped and removed at the end."""
    if find_bin() is None:
        _unavailable("initdb/pg_ctl not found (apt-get install postgresql)")
    try:
        server = PgServer()
    except (RuntimeError, OSError) as e:
        _unavailable(f"the server did not start ({e})")
    yield server
    server.destroy()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request) -> str:
    """The backend under test."""
    return request.param


@pytest.fixture
def store_target(request, backend, tmp_path) -> str:
    """A fresh, empty store: a SQLite file path or a PostgreSQL DSN."""
    if backend == "sqlite":
        return str(tmp_path / "memory.db")
    server = request.getfixturevalue("pg_server")
    return server.create_database(f"test_{os.getpid()}_{next(_databases)}")


def database_with_one_line(pg_server: PgServer, name: str) -> str:
    """A new database of ``pg_server`` (``name`` plus this process's id) holding one line of
    caller ``al`` in call ``c1``: a PostgreSQL store's tests that need a caller to search."""
    import asyncio

    from pipecat_summarizer.store import ArchivedMessage, PostgresMemoryStore

    dsn = pg_server.create_database(f"{name}_{os.getpid()}")

    async def fill() -> None:
        store = PostgresMemoryStore(dsn)
        try:
            said = "my beagle Rex walks on Dune Bay beach"
            await store.write([ArchivedMessage("c1", 0, "user", said, "{}", user_id="al")])
        finally:
            await store.close()

    asyncio.run(fill())
    return dsn

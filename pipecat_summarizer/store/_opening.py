"""``open_store``: a backend for a target string.

Apart from ``base`` so the arrows run one way: the backends import the interface, and only
this function (lazily, so asyncpg stays optional) imports the backends.
"""

from __future__ import annotations

import os

from pipecat_summarizer.store.base import MemoryStore, StoreError


def open_store(target: str | os.PathLike[str], **kwargs) -> MemoryStore:
    """A store for a SQLite path (a ``pathlib.Path`` too; ``:memory:``) or a PostgreSQL
    DSN: ``postgresql://``, ``postgres://`` or SQLAlchemy's ``postgresql+asyncpg://`` (the
    same server).

    Keyword arguments go to the backend's constructor (``read_only=True`` for both).

    Raises:
        StoreError: If ``target`` is empty, or a URL of another scheme (``mysql://``...),
            which is never taken for a file name.
    """
    if isinstance(target, os.PathLike) and isinstance(os.fspath(target), str):
        target = os.fspath(target)  # a pathlib.Path: a SQLite file
    if not isinstance(target, str) or not target.strip():
        raise StoreError("store target must be a SQLite path or a postgresql:// DSN")
    scheme, sep, rest = target.partition("://")
    if sep and scheme.lower() in POSTGRES_SCHEMES:
        from pipecat_summarizer.store.postgres import PostgresMemoryStore

        return PostgresMemoryStore("postgresql://" + rest, **kwargs)
    if sep and scheme.replace("+", "").replace(".", "").replace("-", "").isalnum():
        # never echo the target: a DSN may hold a password
        raise StoreError(
            f"store target is a {scheme[:20]!r} URL: only PostgreSQL URLs (postgresql://) "
            "and SQLite file paths are supported"
        )
    from pipecat_summarizer.store.sqlite import SQLiteMemoryStore

    return SQLiteMemoryStore(None if target == ":memory:" else target, **kwargs)


#: URL schemes taken for PostgreSQL (SQLAlchemy's driver forms included).
POSTGRES_SCHEMES = frozenset(
    {"postgresql", "postgres", "postgresql+asyncpg", "postgresql+psycopg", "postgresql+psycopg2"}
)

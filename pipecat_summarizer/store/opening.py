"""``open_store``: a backend for a target string.

Apart from ``base`` so the arrows run one way: the backends import the interface, and only
this function (lazily, so asyncpg stays optional) imports the backends.
"""

from __future__ import annotations

from pipecat_summarizer.store.base import MemoryStore, StoreError


def open_store(target: str, **kwargs) -> MemoryStore:
    """A store for a SQLite path (``:memory:`` too) or a ``postgresql://`` DSN.

    Keyword arguments go to the backend's constructor (``read_only=True`` for both).

    Raises:
        StoreError: If ``target`` is empty.
    """
    if not isinstance(target, str) or not target.strip():
        raise StoreError("store target must be a SQLite path or a postgresql:// DSN")
    if target.startswith(("postgresql://", "postgres://")):
        from pipecat_summarizer.store.postgres import PostgresMemoryStore

        return PostgresMemoryStore(target, **kwargs)
    from pipecat_summarizer.store.sqlite import SQLiteMemoryStore

    return SQLiteMemoryStore(None if target == ":memory:" else target, **kwargs)

"""Durable memory: every compaction and every message that leaves the context, in a database.

``SQLiteMemoryStore`` (embedded, the default) and ``PostgresMemoryStore`` (fleets) share one
async interface, :class:`MemoryStore`. ``ContextSummarizer(..., store=..., call_id=...,
user_id=...)`` records through a :class:`StoreWriter` (a bounded background queue), and a
returning caller's new call starts with their pinned facts and an "earlier calls" summary.

Reading the archive is public too (an operator's tool is a user of this package): open a
store with ``open_store(target, read_only=True)``, read it through :class:`MemoryStore`'s
methods (``calls``, ``call``, ``compactions``, ``messages``, ``search``...), and print a
target or an error that may quote one through :func:`mask_dsn` (``dsn_password`` gives the
password itself, to mask it where a driver's message quotes it outside any URL). The
modules whose names start with ``_`` (rows, writer, opening, DSN masking) are internal:
import their public names from here.
"""

from pipecat_summarizer.params import WriterParams
from pipecat_summarizer.store._dsn import dsn_password, mask_dsn
from pipecat_summarizer.store._opening import open_store
from pipecat_summarizer.store._writer import StoreWriter
from pipecat_summarizer.store.base import MemoryStore, StoreError
from pipecat_summarizer.store.records import (
    ArchivedMessage,
    CallerMemory,
    CallRecord,
    CompactionRecord,
    FactEvent,
    SearchHit,
)
from pipecat_summarizer.store.sqlite import SQLiteMemoryStore

__all__ = [
    "ArchivedMessage",
    "CallRecord",
    "CallerMemory",
    "CompactionRecord",
    "FactEvent",
    "MemoryStore",
    "PostgresMemoryStore",
    "SQLiteMemoryStore",
    "SearchHit",
    "StoreError",
    "StoreWriter",
    "WriterParams",
    "dsn_password",
    "mask_dsn",
    "open_store",
]


def __getattr__(name: str):
    # asyncpg is an optional extra: import the backend only when asked for
    if name == "PostgresMemoryStore":
        from pipecat_summarizer.store.postgres import PostgresMemoryStore

        return PostgresMemoryStore
    if name == "WriterOptions":  # renamed in 0.2: one release, with a warning
        import warnings

        warnings.warn(
            "WriterOptions is deprecated: use WriterParams (pipecat_summarizer.params)",
            DeprecationWarning,
            stacklevel=2,
        )
        return WriterParams
    raise AttributeError(name)

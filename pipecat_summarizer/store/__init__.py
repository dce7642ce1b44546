"""Durable memory: every compaction and every message that leaves the context, in a database.

``SQLiteMemoryStore`` (embedded, the default) and ``PostgresMemoryStore`` (fleets) share one
async interface, :class:`MemoryStore`. ``ContextSummarizer(..., store=..., call_id=...,
user_id=...)`` records through a :class:`StoreWriter` (a bounded background queue), and a
returning caller's new call starts with their pinned facts and an "earlier calls" summary.
"""

from pipecat_summarizer.store.base import MemoryStore, StoreError
from pipecat_summarizer.store.opening import open_store
from pipecat_summarizer.store.records import (
    ArchivedMessage,
    CallerMemory,
    CallRecord,
    CompactionRecord,
    FactEvent,
    SearchHit,
)
from pipecat_summarizer.store.sqlite import SQLiteMemoryStore
from pipecat_summarizer.store.writer import StoreWriter, WriterOptions

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
    "WriterOptions",
    "open_store",
]


def __getattr__(name: str):
    # asyncpg is an optional extra: import the backend only when asked for
    if name == "PostgresMemoryStore":
        from pipecat_summarizer.store.postgres import PostgresMemoryStore

        return PostgresMemoryStore
    raise AttributeError(name)

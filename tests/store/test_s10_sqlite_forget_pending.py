"""SQLite's forget in two transactions (``store/_sqlite_forget.py``): its deletes fail after
the tombstone is committed (a full disk, a lock held past the busy timeout). The forget
raises; the tombstone stands; every read (this store's, another store object's, a
read-only one's) hides the caller's rows; the next forget finishes the deletes."""

from __future__ import annotations

import sqlite3

import pytest

from pipecat_summarizer.store import SQLiteMemoryStore, _sqlite_forget
from tests.recall.test_attacks_dates import archived, utc
from tests.support.early_search import BOB_HOTEL, SISTER, WEDDING


def _count(path, where: str) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute(f"SELECT COUNT(*) FROM {where}").fetchone()[0]


async def test_deletes_that_fail_after_the_tombstone_are_hidden_then_finished(
    tmp_path, monkeypatch
):
    path = tmp_path / "m.db"
    store = SQLiteMemoryStore(path)
    other = SQLiteMemoryStore(path)
    try:
        await store.write(archived(SISTER, call_id="a1", at=utc(2026, 4, 1), user_id="alice"))
        await store.write(archived(WEDDING, call_id="a2", at=utc(2026, 4, 2), user_id="alice"))
        await store.write(archived(BOB_HOTEL, call_id="b1", at=utc(2026, 5, 2), user_id="bob"))
        await other.open()
        real = _sqlite_forget.finish

        def failing(conn, user_id, at):
            raise sqlite3.OperationalError("database or disk is full")

        monkeypatch.setattr(_sqlite_forget, "finish", failing)
        with pytest.raises(sqlite3.OperationalError):
            await store.forget("alice")
        monkeypatch.setattr(_sqlite_forget, "finish", real)
        inspect = SQLiteMemoryStore(path, read_only=True)
        try:
            for reader in (store, other, inspect):
                assert await reader.forgotten_at("alice") is not None
                assert await reader.search("Marta", user_id="alice") == []
                everyone = await reader.search("Marta Pensao", any_word=True)
                assert {h.user_id for h in everyone} == {"bob"}
                assert await reader.calls("alice") == []
                assert await reader.call("a1") is None
                assert await reader.messages("a1") == []
                assert await reader.messages_at([("a2", 0)]) == [None]
                assert await reader.fact_history(user_id="alice") == []
                memory = await reader.caller_memory("alice")
                assert (memory.calls, memory.facts, memory.summaries) == (0, [], [])
        finally:
            await inspect.close()
        assert _count(path, "messages WHERE user_id = 'alice'") == 4  # still in the file
        assert _count(path, "forget_pending") == 1
        assert await other.forget("nobody") == 0  # the next forget finishes alice's
        assert _count(path, "messages WHERE user_id = 'alice'") == 0
        assert _count(path, "forget_pending") == 0
        assert _count(path, "messages WHERE user_id = 'bob'") == 2
        assert await store.search("Pensao", user_id="bob")
    finally:
        await store.close()
        await other.close()

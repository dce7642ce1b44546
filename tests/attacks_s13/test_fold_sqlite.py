"""SQLite's removals (schema v8) were not changed with PostgreSQL's fold (a2f1c83, dad1c4c):
one row for the file, updated by the trigger, nothing to fold. The growth question asked of
PostgreSQL's rows, asked here: after many deletes one by one (a fleet that forgets but never
purges) the table still holds one row, its count the messages deleted (a row trigger), and a
worker that kept its counts finds what a fresh store finds.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing

import pytest

from pipecat_summarizer.store import open_store
from tests.attacks_s13.test_fold_races import _fresh
from tests.attacks_s13.test_store_removals import MANY, _al_says_zebra, _backfilled, _kept, _keys

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


async def test_fold_sqlite_one_row_after_many_deletes(store_target):
    worker = open_store(store_target)
    now = time.time()
    try:
        await _backfilled(worker, now)
        await worker.search("card zebra", user_id="al", any_word=True, limit=20)
        assert _kept(worker, "card") is not None
        with closing(sqlite3.connect(store_target, isolation_level=None)) as conn:
            for i in range(200):  # each its own statement and transaction
                conn.execute(
                    "DELETE FROM messages WHERE call_id = ? AND position = ?",
                    (f"import-{i // 500}", i % 500),
                )
            conn.execute("DELETE FROM messages WHERE call_id LIKE 'import-%'")
            assert conn.execute("SELECT id, n FROM removals").fetchall() == [(1, MANY)]
        await _al_says_zebra(worker, now)
        got = _keys(await worker.search("card zebra", user_id="al", any_word=True, limit=20))
        assert got == await _fresh(store_target)
        assert await worker.purge_older_than(365) == 0
        with closing(sqlite3.connect(store_target)) as conn:
            assert conn.execute("SELECT id, n FROM removals").fetchall() == [(1, MANY)]
    finally:
        await worker.close()

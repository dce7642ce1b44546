"""A child process that forgets a caller on a SQLite store and holds the forget mid-way:
``python -m tests.store.forget_worker PATH USER``.

It opens the store and prints ``ready``; on a line on stdin it runs the store's own
``forget(USER)``, and when the transaction that deletes the caller's messages is about to
commit it prints ``held`` and waits for another line on stdin (the test then reads the store,
or kills this process there); it commits, prints ``done N`` and exits 0. Whatever the forget's
transactions are, the hold is where its deletes are made but not committed.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys

from pipecat_summarizer.store import SQLiteMemoryStore


class _Holding(sqlite3.Connection):
    """A connection that stops before the COMMIT of a transaction that deleted messages."""

    deleted = False

    def execute(self, sql: str, *args):  # type: ignore[override]
        """Run ``sql``; before a COMMIT after ``DELETE FROM messages``: ``held``, then wait."""
        text = " ".join(sql.split())
        if text.startswith("DELETE FROM messages"):
            self.deleted = True
        elif text == "COMMIT" and self.deleted:
            self.deleted = False
            print("held", flush=True)
            sys.stdin.readline()
        return super().execute(sql, *args)


def _connect(*args, **kwargs) -> sqlite3.Connection:
    return _real_connect(*args, factory=_Holding, **kwargs)


_real_connect = sqlite3.connect


async def main(path: str, user: str) -> None:
    """See the module's docstring."""
    sqlite3.connect = _connect  # type: ignore[assignment]  # this process only
    store = SQLiteMemoryStore(path)
    await store.open()
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    n = await store.forget(user)
    print(f"done {n}", flush=True)
    await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))

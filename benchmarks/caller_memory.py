"""A returning caller's memory read (``caller_memory``) for a caller with a long history.

Run: ``.venv/bin/python benchmarks/caller_memory.py`` (``--calls``, ``--facts-per-call``,
``--reads``, ``--pg-dsn DSN``; without a DSN a throwaway PostgreSQL is started from the
Debian binaries if present).

A caller with ``--calls`` earlier calls, each changing ``--facts-per-call`` pinned facts
(over 20 keys, as an application re-pins the same facts every call), among 50 other callers
with the same history. Two reads of their current facts are timed on the same database:

* ``history scan`` (schema v3's read): the latest event of each key found by ranking every
  one of the caller's fact events (``ROW_NUMBER() OVER (PARTITION BY key ...)`` on SQLite,
  ``DISTINCT ON (key)`` on PostgreSQL);
* ``caller_memory`` (schema v4): the store's read, from ``caller_facts`` (one row per key,
  kept by every write) plus the latest calls' summaries.

Milliseconds, p50 and p99 over ``--reads`` reads.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipecat_summarizer.store import open_store  # noqa: E402
from pipecat_summarizer.store.records import CallRecord, FactEvent  # noqa: E402

V3_SQLITE = (
    "SELECT key, action, text, fact_kind, source FROM ("
    " SELECT *, ROW_NUMBER() OVER (PARTITION BY key ORDER BY at DESC, seq DESC)"
    " AS n FROM facts WHERE user_id = ?) WHERE n = 1 ORDER BY at, seq"
)
V3_POSTGRES = (
    "SELECT DISTINCT ON (key) key, action, text, fact_kind, source, at, seq "
    "FROM facts WHERE user_id = $1 ORDER BY key, at DESC, seq DESC"
)


def _history(user: str, calls: int, per_call: int) -> list:
    records: list = []
    t = 1_600_000_000.0
    for c in range(calls):
        call = f"{user}-{c}"
        t += 3600
        records.append(CallRecord(call, user, started_at=t, ended_at=t + 600, summary=f"call {c}"))
        for s in range(per_call):
            key = f"k{(c * per_call + s) % 20}"
            text = f"value {c}.{s} of {key} for the caller, a sentence of ordinary length"
            records.append(FactEvent(call, s + 1, key, "corrected", text, at=t + s, user_id=user))
    return records


def _ms(samples: list[float]) -> str:
    samples = sorted(samples)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    return f"p50 {statistics.median(samples):7.2f} ms   p99 {p99:7.2f} ms"


async def _bench(target: str, args: argparse.Namespace) -> None:
    store = open_store(target)
    try:
        users = ["caller"] + [f"other-{i}" for i in range(args.others)]
        for user in users:
            records = _history(user, args.calls, args.facts_per_call)
            for i in range(0, len(records), 2000):
                await store.write(records[i : i + 2000])
        await store.caller_memory("caller")  # warm
        v3: list[float] = []
        v4: list[float] = []
        for _ in range(args.reads):
            t0 = time.perf_counter()
            if store.backend == "sqlite":
                await store._query(V3_SQLITE, ["caller"])  # type: ignore[attr-defined]
            else:
                await store._fetch(V3_POSTGRES, "caller")  # type: ignore[attr-defined]
            v3.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            memory = await store.caller_memory("caller")
            v4.append((time.perf_counter() - t0) * 1000)
        assert len(memory.facts) == 20
        events = args.calls * args.facts_per_call
        print(f"{store.backend:8s} {events:,} fact events of the caller:")
        print(f"  history scan (v3)    {_ms(v3)}")
        print(f"  caller_memory (v4)   {_ms(v4)}")
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--facts-per-call", type=int, default=10)
    parser.add_argument("--others", type=int, default=50)
    parser.add_argument("--reads", type=int, default=30)
    parser.add_argument("--pg-dsn", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(_bench(str(Path(folder) / "memory.db"), args))
    dsn, server = args.pg_dsn, None
    if dsn is None:
        try:
            from tests.support.pg_server import PgServer

            server = PgServer()
            dsn = server.create_database("caller_memory")
        except (ImportError, RuntimeError, OSError) as e:
            print(f"postgres skipped ({e})")
    if dsn is not None:
        try:
            asyncio.run(_bench(dsn, args))
        finally:
            if server is not None:
                server.destroy()


if __name__ == "__main__":
    main()

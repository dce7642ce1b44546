"""What reading another process's forgets costs a process: one sweep of the store's
tombstones for the callers in the cache of semantic vectors (``vector_cache.sweep_tombstones``).

For a cache of ``N`` callers (1,000, 5,000, 20,000: the cache holds at most 20,000 vectors)
and a store with 10,000 tombstones of other callers, this prints per sweep (median of
``--sweeps``): the reads made, the wall time, the event loop thread's CPU, the whole
process's CPU (the loop plus SQLite's store thread, or asyncpg's decoding) and, on
PostgreSQL, the server's execution time of one read of 500 hashes (``EXPLAIN ANALYZE``).
A sweep runs at most every ``TOMBSTONE_CHECK_S`` per store: divide by it for the cost a
second.

Run: ``nice -n 10 .venv/bin/python benchmarks/forget_sweep.py`` (``--sweeps``, default 20;
PostgreSQL when its binaries are found: a throwaway server is started).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipecat_summarizer._recall import vector_cache  # noqa: E402
from pipecat_summarizer.store import open_store  # noqa: E402
from pipecat_summarizer.store.records import user_hash  # noqa: E402


class _Tiny:
    def embed(self, texts):
        return np.ones((len(texts), 4), np.float32)


async def _fill_tombstones(store, n: int) -> None:
    at = time.time()
    if store.backend == "sqlite":
        rows = [(user_hash(f"other-{i}"), at) for i in range(n)]
        await store._run(lambda conn: conn.executemany("INSERT INTO forgotten VALUES (?, ?)", rows))
        return
    async with await store._acquire() as conn:
        await conn.executemany(
            "INSERT INTO forgotten VALUES ($1, $2)",
            [(user_hash(f"other-{i}"), at) for i in range(n)],
        )
        await conn.execute("ANALYZE forgotten")


async def _server_ms(store, hashes: list[str]) -> float | None:
    if store.backend != "postgres":
        return None
    async with await store._acquire() as conn:
        plan = await conn.fetchval(
            "EXPLAIN (ANALYZE, FORMAT JSON) SELECT user_hash, at FROM forgotten "
            "WHERE user_hash = ANY($1::text[])",
            hashes,
        )
    import json

    return float(json.loads(plan)[0]["Execution Time"])


async def run(target: str, sweeps: int) -> None:
    vector_cache.TOMBSTONE_CHECK_S = 0.0
    store = open_store(target)
    await store.open()
    try:
        await _fill_tombstones(store, 10_000)
        model = _Tiny()
        for n in (1_000, 5_000, 20_000):
            vector_cache._CACHES.pop(model, None)
            callers = [f"caller-{n}-{i}" for i in range(n)]
            vector_cache.cached_vectors(model, [f"text {c}" for c in callers[:1]], callers[0])
            cache = vector_cache._CACHES[model]
            cache.most = max(cache.most, n)
            for c in callers:
                vector_cache.cached_vectors(model, [f"text {c}"], c)
            await vector_cache.sweep_tombstones(store)  # hashes memoized, as in a process
            watch = vector_cache._WATCHES[store]
            walls, loops, cpus, reads = [], [], [], []
            for _ in range(sweeps):
                before = watch.reads
                w, t, p = time.perf_counter(), time.thread_time(), time.process_time()
                await vector_cache.sweep_tombstones(store)
                loops.append((time.thread_time() - t) * 1000)
                cpus.append((time.process_time() - p) * 1000)
                walls.append((time.perf_counter() - w) * 1000)
                reads.append(watch.reads - before)
            server = await _server_ms(store, [user_hash(c) for c in callers[:500]])
            print(
                f"{store.backend:8} callers {n:6}: reads {reads[0]:3}, "
                f"wall {statistics.median(walls):7.2f} ms, loop CPU "
                f"{statistics.median(loops):6.2f} ms, process CPU "
                f"{statistics.median(cpus):6.2f} ms"
                + (f", server {server:.2f} ms per read of 500" if server is not None else "")
            )
            vector_cache._CACHES.pop(model, None)
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(run(str(Path(folder) / "m.db"), args.sweeps))
    try:
        from tests.support.pg_server import PgServer, find_bin
    except ImportError:
        return
    if find_bin() is None:
        print("postgres: binaries not found, skipped")
        return
    server = PgServer()
    try:
        dsn = server.create_database("forget_sweep")
        asyncio.run(run(dsn, args.sweeps))
    finally:
        server.destroy()


if __name__ == "__main__":
    main()

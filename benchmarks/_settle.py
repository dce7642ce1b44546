"""A PostgreSQL archive settled as a deployed store has it: shared by the frame and recall
benchmarks (``--settle`` / ``--pg-settle``)."""

from __future__ import annotations

import time


async def vacuumed(dsn: str) -> float:
    """Every table vacuumed and analyzed (pages all-visible, hint bits set, the planner's
    statistics: what autovacuum leaves a while after the writes), then a checkpoint, so no
    dirty buffer is written under the timings; returns the seconds it took."""
    import asyncpg

    t0 = time.perf_counter()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("VACUUM (ANALYZE)")
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()
    return time.perf_counter() - t0

"""An early search's age is measured on the loop's clock (``RecallPrefetch``'s
``PrefetchingArchive``, the step's early block): on a simulated-time loop (the replay's
``SimulatedClockLoop``) an early search minutes of modelled time old is stale, as it would be
at full speed, though only milliseconds of wall time went by. A real SQLite store."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pipecat_summarizer._recall.prefetch import MAX_AGE_S, PrefetchingArchive
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer_cli.replay.clock import SimulatedClockLoop
from tests.recall.test_prefetch import _earlier_call


def _served_after(path: Path, modelled_s: float) -> tuple[int, bool, set[int]]:
    """An early search of alice's words, then ``modelled_s`` of the loop's time, then the
    turn's search of the same words: how many early answers were served, whether the early
    one was still offered as running, and the hits' positions."""
    loop = SimulatedClockLoop(start=1_000.0)

    async def call() -> tuple[int, bool, set[int]]:
        store = SQLiteMemoryStore(path)
        archive = PrefetchingArchive(store)
        try:
            await store.write(_earlier_call())
            assert archive.prefetch("hotel", user_id="alice", any_word=True)
            await asyncio.sleep(modelled_s)  # modelled time: milliseconds of wall time
            offered = (
                archive.running("hotel", user_id="alice", call_id=None, limit=10, any_word=True)
                is not None
            )
            hits = await archive.search("hotel", user_id="alice", any_word=True)
            return archive.served, offered, {h.position for h in hits}
        finally:
            archive.clear()
            await store.close()

    try:
        return loop.run_until_complete(call())
    finally:
        loop.close()


def test_an_early_search_minutes_old_on_the_loops_clock_is_not_served(tmp_path):
    # fails if its age were read on time.monotonic(): a few ms old, it looked fresh
    served, offered, positions = _served_after(tmp_path / "m.db", 60 * MAX_AGE_S)
    assert served == 0 and not offered
    assert positions == {0, 1}  # the archive's own answer


def test_an_early_search_young_on_the_loops_clock_is_served(tmp_path):
    served, offered, positions = _served_after(tmp_path / "m.db", MAX_AGE_S / 2)
    assert served == 1 and offered
    assert positions == {0, 1}

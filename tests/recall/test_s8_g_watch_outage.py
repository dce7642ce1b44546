"""The turn's forget watch (``ArchiveSearch._watched``) across an outage of the tombstone read:
nothing placed while it fails, one WARNING (the reason, never the database's text), each
failure counted, an INFO once it answers again, and a second outage warned again."""

from __future__ import annotations

import asyncio

from loguru import logger

from pipecat_summarizer._recall.search import ArchiveSearch
from pipecat_summarizer.params import RecallParams


class _Archive:
    async def search(self, query, **kwargs):
        return []


async def _task(error: BaseException | None) -> asyncio.Task:
    async def read() -> bool:
        if error is not None:
            raise error
        return False

    task = asyncio.ensure_future(read())
    await asyncio.wait({task})
    return task


async def test_a_watch_outage_is_warned_once_counted_and_its_end_said():
    search = ArchiveSearch(_Archive(), RecallParams(), call_id="c1", user_id="alice")
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="INFO", format="{level} {message}")
    failing = PermissionError("permission denied for table forgotten (alice's secret)")
    try:
        until = asyncio.get_running_loop().time() + 1.0
        outcomes = [
            await search._watched(await _task(e), 0, until)
            for e in (failing, failing, None, failing, None)
        ]
    finally:
        logger.remove(sink)
    assert outcomes == [False, False, True, False, True]
    assert search.errors == 3
    assert not any("secret" in line for line in lines)
    levels = [line.split(" ", 1)[0] for line in lines]
    assert levels == ["WARNING", "INFO", "WARNING", "INFO"], lines
    assert all("forget tombstone" in line for line in lines)

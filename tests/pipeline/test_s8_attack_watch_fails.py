"""Attack on the turn's forget watch (``ArchiveSearch._watch``/``_watched``): the store answers
searches but its tombstone read fails (a ``forgotten`` table the database user may not read,
a replica behind). Nothing may be placed (a forget may be unseen), but the loss of every
turn's recall must not be silent: one WARNING, no conversation text."""

from __future__ import annotations

from loguru import logger

from pipecat_summarizer.store import SQLiteMemoryStore
from tests.support.early_search import (
    SISTER_ASK,
    Watched,
    early_call,
    recall_blocks,
    seed_sister,
    spoken_turn,
)


class _NoTombstones(Watched, SQLiteMemoryStore):
    async def forgotten_at(self, user_id):
        raise PermissionError("permission denied for table forgotten (alice's secret)")


async def test_a_failing_forget_watch_places_nothing_and_says_so_once(openai_server, tmp_path):
    store = _NoTombstones(str(tmp_path / "m.db"))
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="INFO", format="{level} {message}")
    try:
        await seed_sister(store)
        await early_call(
            openai_server, store, [*spoken_turn(SISTER_ASK), *spoken_turn("And the car I rented?")]
        )
    finally:
        logger.remove(sink)
        await store.close()
    assert (
        recall_blocks(openai_server.chat_requests) == []
    )  # a forget may be unseen: nothing placed
    assert not any("secret" in line for line in lines)
    warnings = [line for line in lines if line.startswith("WARNING") and "forget" in line]
    assert len(warnings) == 1, lines

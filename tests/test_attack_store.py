"""The store, its writer and ``inspect`` attacked as a hostile caller and a careless operator
would: ids with query syntax, fact keys no index can hold, batches the database refuses
whole, a refused record during an outage, forget twice or of nobody, a caller who calls
again right after a forget, a file locked at start, and ``inspect`` pointed at the wrong
thing (a FIFO, an empty file, a folder, a closed port)."""

from __future__ import annotations

import json
import random

from pipecat_summarizer.store import WriterOptions, open_store
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord, FactEvent

FAST = WriterOptions(flush_interval_s=0.02, max_backoff_s=0.1, write_timeout_s=5)


def _m(call: str, i: int, text: str, user: str | None = "u") -> ArchivedMessage:
    return ArchivedMessage(call, i, "user", text, json.dumps({"content": text}), user_id=user)


def _noise(n: int, seed: int = 7) -> str:
    """Incompressible text (PostgreSQL compresses index entries before it measures them)."""
    rng = random.Random(seed)
    return "".join(chr(rng.randrange(0x4E00, 0x9FA0)) for _ in range(n))


async def test_a_fact_whose_key_is_a_long_summary_bullet_is_kept(store_target):
    # a summary bullet without a "topic:" is keyed by its whole text: keys have no bound
    key = "text:" + _noise(3000)
    user = "\U0001d54f" * 512  # the longest id, four bytes a character
    store = open_store(store_target)
    try:
        await store.write(
            [
                CallRecord("s1", user, started_at=1000.0),
                FactEvent("s1", 1, key, "pinned", "the caller prefers mornings", user_id=user),
            ]
        )
        memory = await store.caller_memory(user)
        assert [f.get("text") for f in memory.facts] == ["the caller prefers mornings"]
    finally:
        await store.close()

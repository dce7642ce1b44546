"""The store's pure rules and its writer's queue, without a pipeline."""

from __future__ import annotations

import asyncio
import json
import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipecat_summarizer._record.pinned import PinnedFacts
from pipecat_summarizer.params import MemoryParams, WriterParams
from pipecat_summarizer.store import SQLiteMemoryStore, StoreWriter
from pipecat_summarizer.store.base import query_words
from pipecat_summarizer.store.records import (
    ArchivedMessage,
    earlier_calls_text,
    fact_changes,
    fact_snapshot,
    message_text,
    tool_call_ids,
)


def test_fact_changes_name_the_action_and_who():
    pinned = PinnedFacts(300)
    before = fact_snapshot(pinned.facts)
    pinned.pin("allergy", "peanuts", kind="constraint", source="app")
    pinned.pin("hotel", "Grand Budapest", source="llm")
    mid = fact_snapshot(pinned.facts)
    assert fact_changes(before, mid) == [
        ("allergy", "pinned", "peanuts", "constraint", "app", "app"),
        ("hotel", "pinned", "Grand Budapest", "fact", "llm", "tool"),
    ]
    pinned.pin("hotel", "Hotel Sacher", source="summary")
    pinned.unpin("allergy")
    after = fact_snapshot(pinned.facts)
    assert fact_changes(mid, after) == [
        ("allergy", "unpinned", "peanuts", "constraint", "app", "app"),
        ("hotel", "corrected", "Hotel Sacher", "fact", "summary", "conversation"),
    ]
    assert [c[1] for c in fact_changes({}, after, restoring=True)] == ["restored"]
    assert fact_changes(after, after) == []


facts = st.dictionaries(
    st.text(min_size=1, max_size=5),
    st.tuples(
        st.text(max_size=8),
        st.sampled_from(["fact", "constraint"]),
        st.sampled_from(["app", "llm", "summary", "evicted"]),
    ),
    max_size=6,
)


@given(facts, facts)
def test_fact_changes_replayed_give_the_new_state(before, after):
    state = dict(before)
    for key, action, text, kind, source, _ in fact_changes(before, after):
        if action == "unpinned":
            del state[key]
        else:
            state[key] = (text, kind, source)
    # only a source change with the same text is not an event
    assert {k: v[:2] for k, v in state.items()} == {k: v[:2] for k, v in after.items()}


def test_earlier_calls_text_is_bounded_newest_first_and_stops_at_a_resumed_call():
    day = 86400 * 20000
    summaries = [(day + 2, "newest summary", False), (day + 1, "older summary", False)]
    text = earlier_calls_text(summaries, 100)
    assert text.index("newest") < text.index("older")
    assert "older" not in earlier_calls_text(summaries, 8)  # only the newest fits
    resumed = [(day + 2, "newest, covering the rest", True), (day + 1, "older", False)]
    assert "older" not in earlier_calls_text(resumed, 1000)
    long = [(day, "\n".join(f"- fact number {i}" for i in range(200)), False)]
    cut = earlier_calls_text(long, 50)
    assert cut and len(cut) <= 200 and cut.endswith(tuple("0123456789"))
    assert earlier_calls_text([], 100) is None
    assert earlier_calls_text([(day, "  ", False)], 100) is None


@given(
    st.lists(st.tuples(st.floats(0, 4e9), st.text(max_size=300), st.booleans())),
    st.integers(0, 400),
)
def test_earlier_calls_text_never_exceeds_its_budget(summaries, budget):
    text = earlier_calls_text(summaries, budget)
    assert text is None or len(text) <= budget * 4 + 2


def test_message_text_and_tool_call_ids():
    call = {
        "role": "assistant",
        "content": [{"type": "text", "text": "booking"}],
        "tool_calls": [{"id": "c1", "function": {"name": "book", "arguments": '{"n":2}'}}],
    }
    assert message_text(call) == 'booking\nbook({"n":2})'
    assert tool_call_ids(call) == ["c1"]
    assert tool_call_ids({"role": "tool", "tool_call_id": "c1", "content": "ok"}) == ["c1"]
    assert query_words('Grand-Budapest? NEAR(*) "x"') == ["grand", "budapest", "near", "x"]
    with pytest.raises(TypeError, match="query"):
        query_words(None)


def test_options_are_validated_by_name():
    with pytest.raises(ValueError, match="max_queue"):
        WriterParams(max_queue=0)
    with pytest.raises(ValueError, match="flush_interval_s"):
        WriterParams(flush_interval_s=0)
    with pytest.raises(ValueError, match="load_timeout_s"):
        MemoryParams(load_timeout_s=-1)
    with pytest.raises(ValueError, match="retention_days"):
        SQLiteMemoryStore(retention_days=0)
    with pytest.raises(ValueError, match="path"):
        SQLiteMemoryStore("  ")


def _m(i):
    return ArchivedMessage("q", i, "user", f"record {i}", "{}", user_id="u")


async def test_a_full_queue_drops_the_oldest_with_one_error_and_keeps_the_newest(tmp_path, logs):
    path = tmp_path / "locked.db"
    store = SQLiteMemoryStore(path, busy_timeout_s=0.02)
    await store.open()
    lock = sqlite3.connect(path, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")  # the database is locked by another process
    writer = StoreWriter(
        store, WriterParams(max_queue=5, flush_interval_s=0.02, max_backoff_s=0.05)
    )
    writer.start()
    for i in range(12):
        writer.submit(_m(i))  # never blocks, whatever the database does
    assert len(writer) == 5 and writer.dropped == 7
    while writer.failures < 2:
        await asyncio.sleep(0.02)
    assert writer.outage
    lock.execute("ROLLBACK")
    lock.close()
    assert await writer.close(timeout=5)
    assert [m.position for m in await store.messages("q")] == [7, 8, 9, 10, 11]
    errors = [r["message"] for r in logs if r["level"].name == "ERROR"]
    warnings = [r["message"] for r in logs if r["level"].name == "WARNING"]
    assert len(errors) == 2 and "queue full" in errors[0] and "7 records" in errors[1]
    assert len(warnings) == 1 and "write failed" in warnings[0]
    assert not any("record " in m for m in errors + warnings)  # counts, never content
    await store.close()


async def test_an_in_memory_store_needs_no_file():
    store = SQLiteMemoryStore()
    await store.write([_m(0)])
    assert [h.position for h in await store.search("record")] == [0]
    await store.close()


def test_a_message_too_deep_to_encode_is_still_archived_as_text():
    from pipecat_summarizer.store.records import message_json

    deep: list = []
    for _ in range(5000):
        deep = [deep]
    message = {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"arguments": deep}}]}
    encoded = json.loads(message_json(message))
    assert encoded["role"] == "assistant" and "c1" in encoded["text"]

"""Attack on dates meeting retention: an imported conversation
(``MemoryParams(conversation_started_at=...)`` a year back, as docs/recall.md suggests for an
imported transcript) recorded today into a store with ``retention_days=30``. Its messages
are dated by the conversation; its call row by when it was recorded. The store's next open
must not leave the call without its messages (or drop the call with them). A real pipeline
(a real ``LLMContextAggregatorPair``, ``ContextSummarizer``, Pipecat's OpenAI service
against the local server) on a SQLite file and the real PostgreSQL."""

from __future__ import annotations

import time

import pytest

from pipecat_summarizer.params import MemoryParams, RecallParams
from pipecat_summarizer.store import PostgresMemoryStore, SQLiteMemoryStore
from tests.recall.test_attacks_dates import plain
from tests.support.recall_calls import FAST, recall_call

FILLER = [
    "What time does the office open?",
    "Is there parking on Sunday?",
    "Can I pay by card?",
    "Do you have a waiting room?",
    "How late are you open?",
    "Could you send the form please?",
]


def _open(target: str, **kwargs):
    if "://" in target:
        return PostgresMemoryStore(target, **kwargs)
    return SQLiteMemoryStore(target, **kwargs)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_an_imported_call_keeps_its_messages_or_goes_whole(openai_server, store_target):
    openai_server.handler = plain
    year_ago = time.time() - 365 * 86400
    store = _open(store_target, retention_days=30)
    try:
        await recall_call(
            openai_server,
            store,
            ["My daughter Ines starts at Colegio Rosal in September.", *FILLER],
            call_id="imported",
            recall=RecallParams(latency_budget_s=5.0),
            system="Hi.",
            memory=MemoryParams(writer=FAST, conversation_started_at=year_ago),
        )
        (call,) = await store.calls("alice")
        before = len(await store.messages(call.call_id))
    finally:
        await store.close()
    reopened = _open(store_target, retention_days=30)  # the next worker's start
    try:
        calls = await reopened.calls("alice")
        after = len(await reopened.messages(call.call_id)) if calls else 0
    finally:
        await reopened.close()
    assert before > 0
    # consistent either way: the call with its messages, or neither
    assert (len(calls), after) in ((1, before), (0, 0)), (len(calls), before, after)

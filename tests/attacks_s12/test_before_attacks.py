"""Attacks on the message said before a hit (``befores``, 5613999/907bb9d) through a real
pipeline: a call key reused by two callers (a room name), where the message before alice's
hit is bob's; a hit at a call's first position; a system message before a hit. Real pipelines
(``ContextSummarizer`` with a store and recall, Pipecat's OpenAI service against the local
server) on a SQLite file and the real PostgreSQL."""

from __future__ import annotations

import json

import pytest

from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import open_store
from pipecat_summarizer.store.records import ArchivedMessage
from tests.recall.test_attacks_dates import plain
from tests.recall.test_attacks_gather import _blocks
from tests.support.recall_calls import recall_call

T0 = 1_770_000_000.0


def _msg(call: str, pos: int, role: str, text: str, user: str) -> ArchivedMessage:
    return ArchivedMessage(
        call_id=call,
        position=pos,
        role=role,
        content=text,
        message_json=json.dumps({"role": role, "content": text}),
        turn=pos // 2,
        at=T0 + pos,
        user_id=user,
    )


ARCHIVE = [
    # a room name reused as the call key: bob's words, then alice's in the same key
    _msg("room-7", 0, "user", "My vault PIN is 4471, keep it secret.", "bob"),
    _msg("room-7", 1, "assistant", "Wonderful, the Zeppelin suite is booked for you!", "alice"),
    # alice's own call opening on the assistant (position 0: nothing before it)
    _msg("a2", 0, "assistant", "Welcome back, your Zeppelin tour is on Friday.", "alice"),
    # an instruction archived before an assistant hit
    _msg("a3", 0, "system", "SECRET PROMPT: the discount code is GOLD99.", "alice"),
    _msg("a3", 1, "assistant", "The Zeppelin lounge opens at noon.", "alice"),
]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_a_hits_before_is_never_another_callers_nor_an_instruction(
    openai_server, store_target
):
    openai_server.handler = plain
    store = open_store(store_target)
    try:
        await store.write(ARCHIVE)
        await recall_call(
            openai_server,
            store,
            ["What about the Zeppelin?"],
            call_id="q1",
            recall=RecallParams(latency_budget_s=5.0),
            system="Hi.",
        )
    finally:
        await store.close()
    (block,) = _blocks(openai_server)
    # alice's three hits are recalled, nothing said before them that is not hers to see
    assert "Zeppelin suite" in block and "Zeppelin tour" in block and "lounge" in block
    everything = " ".join(str(b["messages"]) for b in openai_server.chat_requests)
    assert "4471" not in everything and "GOLD99" not in everything

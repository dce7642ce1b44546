"""Through a real pipeline: the recalled block says the earlier call's label once (S15, Q).

A returning caller asks about an earlier call of which several lines match: the request the
main LLM receives carries one recalled block whose first line of that call has its label
(``call of <date>``) and the next ones ``same call``. Real ``LLMContextAggregatorPair``,
``ContextSummarizer``, SQLite and PostgreSQL stores, the local OpenAI-protocol server.
"""

from __future__ import annotations

import pytest

from pipecat_summarizer._recall.render import RECALL_HEADER, SAME_CALL
from pipecat_summarizer.store import open_store
from tests.recall.test_recall_pipeline import _call, _recalled, _summaries

LISBON = [
    "We are staying at the Hotel Marquis in Lisbon, room 418, arriving Friday.",
    "In Lisbon we also want the fado dinner at Tasca do Chico on Saturday.",
    "For Lisbon, book the tram 28 tour on Sunday morning, two adults.",
    "In Lisbon my wife needs a gluten free bakery near the Hotel Marquis.",
    "What time does the breakfast buffet open?",
    "Is the spa open on Sunday?",
    "Could you send towels up please?",
    "Is there a gym upstairs?",
]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_an_earlier_calls_label_is_said_once_in_the_block(openai_server, store_target):
    openai_server.handler = _summaries
    store = open_store(store_target)
    try:
        await _call(openai_server, store, LISBON, call_id="c1", user_id="alice")
        openai_server.requests.clear()
        await _call(
            openai_server,
            store,
            ["Hi again. What did we plan in Lisbon with the Hotel Marquis, the tram and dinner?"],
            call_id="c2",
            user_id="alice",
        )
    finally:
        await store.close()
    recalled = _recalled(openai_server.chat_requests[-1])
    assert len(recalled) == 1
    text = recalled[0]["content"]
    assert text.startswith(RECALL_HEADER)
    lines = [line for line in text.splitlines() if line.startswith("- [")]
    assert len(lines) >= 3  # several lines of the earlier call
    assert lines[0].startswith("- [call of ")
    full = [line for line in lines if line.startswith("- [call of ")]
    same = [line for line in lines if line.startswith(f"- [{SAME_CALL}]")]
    # one call's lines: its label once per run of equal labels (the messages may have left
    # the context in two different minutes), every other line says "same call"
    assert len(full) + len(same) == len(lines)
    assert len(full) <= 2 and len(same) >= 1
    assert "Hotel Marquis" in text and "tram 28" in text

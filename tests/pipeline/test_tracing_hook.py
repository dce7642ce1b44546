"""Tracing times recall through the recall step's observer hook (``RecallStep.add_observer``),
not by replacing the step's methods: the step keeps its own ``prepare`` and ``lookup``, and a
lookup is still one span with its record count. A real SQLite store; spans read from
OpenTelemetry's ``InMemorySpanExporter`` (the one ``test_tracing`` installs)."""

from __future__ import annotations

import json

from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.store.records import ArchivedMessage
from pipecat_summarizer.tracing import SPAN_RECALL, SummarizerTracer
from tests.pipeline.test_tracing import spans  # noqa: F401 (the exporter fixture)
from tests.support.pipeline_utils import cfg

HOTEL = "We are staying at the Hotel Marquis in Lisbon, room 418, arriving Friday."


async def test_recall_spans_come_from_the_steps_observer_hook(tmp_path, spans):  # noqa: F811
    store = SQLiteMemoryStore(tmp_path / "m.db")
    summarizer = OpenAISummarizer(base_url="http://127.0.0.1:9/v1", model="cheap")
    processor = ContextSummarizer(
        context=LLMContext(messages=[{"role": "system", "content": "You are a travel desk."}]),
        config=cfg(),
        summarizer=summarizer,
        store=store,
        call_id="c2",
        user_id="alice",
        recall=RecallParams(),
    )
    try:
        step = processor.recall_step
        assert step is not None
        SummarizerTracer(processor, None, summarizer=summarizer)
        # nothing of the step was replaced: its methods are its class's
        assert "prepare" not in vars(step) and "lookup" not in vars(step)
        row = {"role": "user", "content": HOTEL}
        await store.write(
            [
                ArchivedMessage(
                    call_id="c1",
                    position=0,
                    role="user",
                    content=HOTEL,
                    message_json=json.dumps(row),
                    turn=0,
                    at=1_700_000_000,
                    user_id="alice",
                )
            ]
        )
        found = await step.lookup("the hotel in Lisbon")
        assert len(found) == 1
        recall = [s for s in spans.get_finished_spans() if s.name == SPAN_RECALL]
        assert len(recall) == 1
        attributes = dict(recall[0].attributes or {})
        assert attributes["pipecat_summarizer.recall.kind"] == "tool"
        assert attributes["pipecat_summarizer.outcome"] == "found"
        assert attributes["gen_ai.memory.record.count"] == 1
        assert HOTEL not in json.dumps(attributes)  # numbers and words of a fixed set only
    finally:
        await summarizer.aclose()
        await store.close()

"""Recall counts its rendered text with the session's raw token counter: a bare string is
never cached, so the counts of a block's snippets leave the context's cached counts alone."""

from __future__ import annotations

from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import ContextSummarizer, ExtractiveSummarizer
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import SQLiteMemoryStore
from tests.support.pipeline_utils import cfg


def test_recall_counts_leave_the_contexts_cached_counts_alone(tmp_path):
    context = LLMContext(messages=[{"role": "user", "content": "hello"}])
    store = SQLiteMemoryStore(tmp_path / "m.db")
    summarizer = ContextSummarizer(
        context=context,
        config=cfg(),
        summarizer=ExtractiveSummarizer(),
        store=store,
        user_id="al",
        recall=RecallParams(),
    )
    step = summarizer.recall_step
    assert step is not None
    cached = summarizer._session.meter.counter._cache
    before = len(cached)
    counts = [
        step.count(f"snippet {i}: the Hotel Marquis in Lisbon, by the river") for i in range(200)
    ]
    assert all(n > 0 for n in counts)
    assert len(cached) == before  # before: one throwaway message kept per count

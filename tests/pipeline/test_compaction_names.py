"""The compaction handler's name (on_context_compacted) and the record's (processor.record):
the old names keep working one release, with a DeprecationWarning."""

import warnings

import pytest
from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from tests.support.pipeline_utils import Run, cfg, scripted, turns

SAID = [f"turn {i}: the garden needs water and the roses need pruning" for i in range(10)]


async def test_the_old_handler_name_warns_and_its_handler_still_gets_each_compaction(
    openai_server,
):
    openai_server.handler = scripted()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the new name: no warning
        r = Run(openai_server, cfg(messages=6, keep=2))  # its handler: on_context_compacted
    old: list = []
    with pytest.warns(DeprecationWarning, match="on_summary_applied is deprecated"):

        @r.processor.event_handler("on_summary_applied")
        async def _old(_, event):
            old.append(event)

    gone: list = []

    async def _removed(_, event):
        gone.append(event)

    with pytest.warns(DeprecationWarning):
        r.processor.add_event_handler("on_summary_applied", _removed)
    r.processor.remove_event_handler("on_summary_applied", _removed)
    await r.run(turns(SAID, 0.1))

    assert r.applied, "a compaction must have landed"
    assert sorted(e.compaction for e in old) == sorted(e.compaction for e in r.applied)
    assert not gone  # removed under the old name: removed


def test_memory_is_a_deprecated_alias_of_record():
    processor = ContextSummarizer(
        context=LLMContext(), summarizer=OpenAISummarizer(base_url="http://127.0.0.1:9")
    )
    record = processor.record
    processor.pin("allergy", "allergic to peanuts")
    assert [f.text for f in record.facts.facts] == ["allergic to peanuts"]
    with pytest.warns(DeprecationWarning, match="memory is deprecated"):
        assert processor.memory is record

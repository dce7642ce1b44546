"""The summary text is cleaned once, in one place (``summarizers.base.as_result``).

Backends hand their answer on as it came (after an emptiness check); ``as_result`` strips it
and removes a markdown fence around the whole of it. So the same raw answer becomes the same
context text whichever backend carried it.
"""

from __future__ import annotations

import json

import pytest

from pipecat_summarizer import OpenAISummarizer, PipecatLLMSummarizer, SummarizerError
from pipecat_summarizer._compaction.prompt import build_request
from pipecat_summarizer.summarizers.base import SummaryResult, as_result, clean_summary
from pipecat_summarizer.summarizers.openai import parse_json_record
from tests.support.openai_server import Reply
from tests.support.pipeline_utils import Run, cfg, main_llm, scripted, turns

REQUEST = build_request(
    [{"role": "user", "content": "I'm allergic to peanuts."}],
    previous_summary=None,
    max_tokens=400,
)
RECORD = "FACTS:\n- peanut allergy\nDECISIONS:\n- none"
RAW = [
    "  \n" + RECORD + "  \n\t",
    "```\n" + RECORD + "\n```",
    "\n```text\n" + RECORD + "\n```\n ",
]


class _TextBackend:
    """An application's own backend: answers a fixed string."""

    def __init__(self, text: str):
        self.text = text

    async def summarize(self, request):
        return self.text


class _ResultBackend(_TextBackend):
    async def summarize(self, request):
        return SummaryResult(self.text)


def _backends(server, raw: str) -> dict:
    server.handler = lambda body: Reply(raw)
    return {
        "openai": OpenAISummarizer(base_url=server.base_url, model="tiny"),
        "openai-structured-fallback": OpenAISummarizer(
            base_url=server.base_url, model="tiny", structured=True
        ),
        "pipecat-llm": PipecatLLMSummarizer(main_llm(server.base_url)),
        "custom-str": _TextBackend(raw),
        "custom-result": _ResultBackend(raw),
    }


@pytest.mark.parametrize("raw", RAW, ids=["whitespace", "fence", "fence-lang"])
async def test_every_backend_hands_on_the_raw_answer_and_as_result_cleans_it(openai_server, raw):
    cleaned = {}
    for name, backend in _backends(openai_server, raw).items():
        answer = await backend.summarize(REQUEST)
        text = answer.text if isinstance(answer, SummaryResult) else answer
        assert text == raw, name  # not cleaned on the way: as_result is the one place
        cleaned[name] = as_result(answer).text
        if hasattr(backend, "aclose"):
            await backend.aclose()
    assert set(cleaned.values()) == {RECORD}, cleaned


def test_cleaning_is_idempotent_and_leaves_inner_fences_alone():
    inner = "FACTS:\n- the code is ```x```"
    assert clean_summary(inner) == inner
    for raw in RAW:
        once = clean_summary(raw)
        assert clean_summary(once) == once == RECORD


@pytest.mark.parametrize("raw", ["", "  \n", None, "```\n```", "```json\n  \n```"])
def test_an_empty_answer_or_an_empty_fence_is_a_failure(raw):
    with pytest.raises(SummarizerError):
        as_result(raw)


async def test_structured_json_in_a_fence_still_gives_sections(openai_server):
    record = {"facts": ["name: Priya"], "constraints": [], "decisions": [], "open_questions": []}
    openai_server.handler = lambda body: Reply("```json\n" + json.dumps(record) + "\n```")
    s = OpenAISummarizer(base_url=openai_server.base_url, model="tiny", structured=True)
    result = as_result(await s.summarize(REQUEST))
    assert result.sections is not None and result.sections["FACTS"] == ["name: Priya"]
    assert result.text.startswith("FACTS:\n- name: Priya")
    assert parse_json_record("not json") is None
    await s.aclose()


async def test_a_fenced_summary_lands_in_the_context_unfenced(openai_server):
    body = "FACTS:\n- user message number 1"
    openai_server.handler = scripted(summary="```markdown\n" + body + "\n```\n")
    r = Run(openai_server, cfg(messages=6, keep=2))
    await r.run(turns([f"user message number {i}" for i in range(8)], gap=0.2), tail=0.5)
    assert r.applied
    assert r.processor.summary_text == body
    assert not any("```" in str(m.get("content")) for m in r.context.messages)

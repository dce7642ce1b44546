"""The secondary-LLM clients against a real local OpenAI-protocol server."""

import json

import openai
import pytest

from pipecat_summarizer import OpenAISummarizer, PipecatLLMSummarizer, SummarizerError
from pipecat_summarizer._compaction.prompt import build_request
from pipecat_summarizer.summarizers.base import as_result
from tests.support.openai_server import Reply
from tests.support.pipeline_utils import main_llm

REQUEST = build_request(
    [{"role": "user", "content": "I'm allergic to peanuts."}],
    previous_summary=None,
    max_tokens=123,
)


async def test_openai_summarizer_sends_prompt_transcript_and_budget(openai_server):
    openai_server.handler = lambda body: Reply("  FACTS:\n- peanut allergy  \n")
    s = OpenAISummarizer(base_url=openai_server.base_url, model="tiny", api_key="k")
    answer = await s.summarize(REQUEST)  # as it came: as_result cleans it, once
    assert as_result(answer).text == "FACTS:\n- peanut allergy"
    body = openai_server.requests[0]
    assert body["model"] == "tiny" and body["max_tokens"] == 123
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "allergic to peanuts" in body["messages"][1]["content"]
    await s.aclose()


@pytest.mark.parametrize("status", [400, 401, 500, 503])
async def test_openai_summarizer_raises_on_http_errors(openai_server, status):
    openai_server.handler = lambda body: Reply(status=status)
    s = OpenAISummarizer(base_url=openai_server.base_url, model="tiny")
    with pytest.raises(openai.APIStatusError):
        await s.summarize(REQUEST)


@pytest.mark.parametrize("text", ["", "   ", None])
async def test_openai_summarizer_rejects_empty_answers(openai_server, text):
    openai_server.handler = lambda body: Reply(text)
    s = OpenAISummarizer(base_url=openai_server.base_url, model="tiny")
    with pytest.raises(SummarizerError):
        await s.summarize(REQUEST)


async def test_openai_summarizer_connection_refused():
    s = OpenAISummarizer(base_url="http://127.0.0.1:9/v1", model="tiny")
    with pytest.raises(openai.APIConnectionError):
        await s.summarize(REQUEST)


async def test_pipecat_llm_summarizer_uses_run_inference(openai_server):
    openai_server.handler = lambda body: Reply("FACTS:\n- via pipecat")
    s = PipecatLLMSummarizer(main_llm(openai_server.base_url))
    assert (await s.summarize(REQUEST)).text == "FACTS:\n- via pipecat"
    body = openai_server.requests[0]
    assert body["messages"][0]["role"] == "system"
    assert "memory record" in body["messages"][0]["content"]
    assert "allergic to peanuts" in body["messages"][1]["content"]


async def test_structured_output_gives_sections_without_parsing(openai_server):
    record = {
        "facts": ["name: Priya"],
        "constraints": ["allergic to peanuts"],
        "decisions": [],
        "open_questions": ["which lunch?"],
    }
    openai_server.handler = lambda body: Reply(json.dumps(record))
    s = OpenAISummarizer(base_url=openai_server.base_url, model="tiny", structured=True)
    result = await s.summarize(REQUEST)
    assert result.sections["CONSTRAINTS"] == ["allergic to peanuts"]
    assert "FACTS:\n- name: Priya" in result.text
    fmt = openai_server.requests[0]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True


async def test_structured_output_falls_back_to_text(openai_server):
    openai_server.handler = lambda body: Reply("FACTS:\n- not json")
    s = OpenAISummarizer(base_url=openai_server.base_url, model="tiny", structured=True)
    assert (await s.summarize(REQUEST)).text == "FACTS:\n- not json"


async def test_a_summary_cut_off_at_the_budget_is_rejected(openai_server):
    openai_server.handler = lambda body: Reply("FACTS:\n- name: Pri", finish_reason="length")
    s = OpenAISummarizer(base_url=openai_server.base_url, model="tiny")
    with pytest.raises(SummarizerError, match="cut off"):
        await s.summarize(REQUEST)


async def test_budget_can_travel_as_max_completion_tokens(openai_server):
    openai_server.handler = lambda body: Reply("FACTS:\n- x")
    s = OpenAISummarizer(
        base_url=openai_server.base_url, model="o-mini", max_tokens_param="max_completion_tokens"
    )
    await s.summarize(REQUEST)
    body = openai_server.requests[0]
    assert body["max_completion_tokens"] == 123 and "max_tokens" not in body
    with pytest.raises(ValueError):
        OpenAISummarizer(max_tokens_param="tokens")

"""Summarizer clients: ownership, concurrency cap, secrets, error causes, truncation,
against the real local aiohttp server."""

from __future__ import annotations

import asyncio
import gc
import warnings
from types import SimpleNamespace

import openai
import pytest
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.services.llm_service import LLMService

from pipecat_summarizer import (
    OpenAISummarizer,
    PipecatLLMSummarizer,
    SummarizerError,
)
from pipecat_summarizer._compaction.prompt import build_request
from pipecat_summarizer.summarizers.base import describe_error
from pipecat_summarizer.summarizers.extractive import offline_llm_settings
from pipecat_summarizer.summarizers.pipecat_llm import truncation_reason
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import Run, cfg, main_llm, texts_of, turns

REQUEST = build_request(
    [{"role": "user", "content": "I'm allergic to peanuts."}],
    previous_summary=None,
    max_tokens=123,
)

# -- connection failures name their cause and host ------------------------------------------


async def test_connection_refused_is_described_with_cause_and_host():
    s = OpenAISummarizer(base_url="http://127.0.0.1:9/v1", model="tiny")
    with pytest.raises(openai.APIConnectionError) as info:
        await s.summarize(REQUEST)
    assert describe_error(info.value) == "APIConnectionError: connection refused to 127.0.0.1:9"
    await s.aclose()


async def test_a_refused_summarizer_is_logged_with_cause_and_host(openai_server, logs):
    refused = OpenAISummarizer(base_url="http://127.0.0.1:9/v1", model="m")
    r = Run(openai_server, cfg(messages=4, keep=1), summarizer=refused)
    await r.run(turns([f"user message number {i}" for i in range(4)], gap=0.1))
    assert r.failed
    assert "connection refused to 127.0.0.1:9" in r.failed[0].error
    warning = [
        x["message"] for x in logs if x["level"].name == "WARNING" and "failed" in x["message"]
    ]
    assert any("connection refused to 127.0.0.1:9" in w for w in warning)
    await refused.aclose()


async def test_an_http_error_is_described_without_its_body(openai_server):
    openai_server.handler = lambda body: Reply(
        status=400, error_message="bad input near 'my card is 4111 1111'"
    )
    s = OpenAISummarizer(base_url=openai_server.base_url, model="tiny")
    with pytest.raises(openai.APIStatusError) as info:
        await s.summarize(REQUEST)
    assert "4111" in str(info.value)  # the body echoes the request...
    text = describe_error(info.value)
    assert "4111" not in text and "HTTP 400" in text and "127.0.0.1" in text  # ...the log not
    await s.aclose()


# -- secrets ---------------------------------------------------------------------------------


async def test_openai_key_from_the_environment_is_not_sent_to_another_host(
    openai_server, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-secret-123")
    async with OpenAISummarizer(base_url=openai_server.base_url, model="tiny") as s:
        await s.summarize(REQUEST)
    auth = openai_server.headers[-1].get("Authorization", "")
    assert "sk-env-secret-123" not in auth
    # an explicit key goes where it is told
    async with OpenAISummarizer(base_url=openai_server.base_url, model="t", api_key="k2") as s:
        await s.summarize(REQUEST)
    assert openai_server.headers[-1]["Authorization"] == "Bearer k2"


def test_openai_key_from_the_environment_still_serves_openai(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-secret-123")
    assert OpenAISummarizer(model="m")._client.api_key == "sk-env-secret-123"
    s = OpenAISummarizer(base_url="https://api.openai.com/v1", model="m")
    assert s._client.api_key == "sk-env-secret-123"
    s = OpenAISummarizer(base_url="https://api.openai.com.evil.example/v1", model="m")
    assert s._client.api_key != "sk-env-secret-123"


# -- ownership and closing ---------------------------------------------------------------------


async def test_aclose_and_async_with_close_the_pool(openai_server):
    s = OpenAISummarizer(base_url=openai_server.base_url, model="tiny")
    await s.summarize(REQUEST)
    assert openai_server.open_connections == 1
    await s.aclose()
    await s.aclose()  # twice is fine
    for _ in range(50):
        if openai_server.open_connections == 0:
            break
        await asyncio.sleep(0.02)
    assert openai_server.open_connections == 0


async def test_a_client_passed_in_stays_the_callers(openai_server):
    client = openai.AsyncOpenAI(base_url=openai_server.base_url, api_key="k")
    async with OpenAISummarizer(client=client, model="tiny") as s:
        await s.summarize(REQUEST)
    assert not client.is_closed()  # not the summarizer's to close
    await client.close()


async def test_the_processor_never_closes_a_summarizer_it_was_given(openai_server):
    shared = OpenAISummarizer(base_url=openai_server.base_url, model="cheap")
    r = Run(openai_server, cfg(messages=4, keep=1), summarizer=shared)
    await r.run(turns([f"user message number {i}" for i in range(4)], gap=0.1))
    assert r.applied
    # the call's end closed its pool (no call uses it now), not the summarizer: another
    # call, or the application, can still use it and the pool opens again
    assert await shared.summarize(REQUEST)
    await shared.aclose()  # the application's close is for good
    with pytest.raises(SummarizerError, match="closed"):
        await shared.summarize(REQUEST)


async def test_the_processor_closes_what_it_built(openai_server):
    closed = []

    class Wrapper(PipecatLLMSummarizer):
        async def aclose(self):
            closed.append(self)

    llm = main_llm(openai_server.base_url)
    r = Run(openai_server, cfg(messages=40, keep=1), summarizer=llm)
    built = r.processor._summarizer
    built.__class__ = Wrapper
    await r.run(turns(["hello"], gap=0.05))
    assert closed == [built]


async def test_no_unclosed_transport_warning_after_aclose(openai_server):
    gc.collect()  # what earlier tests left behind warns now, not inside the block
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(5):
            async with OpenAISummarizer(base_url=openai_server.base_url, model="t") as s:
                await s.summarize(REQUEST)
        gc.collect()
        await asyncio.sleep(0.05)
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


# -- concurrency cap ---------------------------------------------------------------------------


async def test_max_concurrency_caps_requests_in_flight_at_the_server(openai_server):
    openai_server.handler = lambda body: Reply("FACTS:\n- x", delay=0.05)
    async with OpenAISummarizer(
        base_url=openai_server.base_url, model="tiny", max_concurrency=3
    ) as s:
        await asyncio.gather(*(s.summarize(REQUEST) for _ in range(20)))
    assert len(openai_server.summary_requests) == 20
    assert openai_server.max_summary_in_flight == 3


# -- truncated summaries on every backend -------------------------------------------------------


async def test_pipecat_service_truncated_summary_is_rejected(openai_server):
    openai_server.handler = lambda body: Reply("FACTS:\n- name: Pri", finish_reason="length")
    s = PipecatLLMSummarizer(main_llm(openai_server.base_url))
    with pytest.raises(SummarizerError, match="cut off"):
        await s.summarize(REQUEST)
    openai_server.handler = lambda body: Reply("FACTS:\n- name: Priya")
    assert (await s.summarize(REQUEST)).text == "FACTS:\n- name: Priya"


async def test_truncated_summary_from_a_pipecat_service_is_not_applied(openai_server):
    def handler(body):
        if is_summary_request(body):
            return Reply("FACTS:\n- user message num", finish_reason="length")
        return Reply("Sure thing.")

    openai_server.handler = handler
    r = Run(openai_server, cfg(messages=4, keep=1), summarizer=main_llm(openai_server.base_url))
    said = [f"user message number {i}" for i in range(5)]
    await r.run(turns(said, gap=0.1))
    assert openai_server.summary_requests and not r.applied
    assert r.failed and "cut off" in r.failed[0].error
    assert all(s in texts_of(r.context.messages) for s in said)  # context intact


async def test_the_main_llm_sharing_the_service_is_not_affected(openai_server):
    """The observer passes every response through; only the summary call reads it."""
    openai_server.handler = lambda body: Reply("FACTS:\n- a", finish_reason="length")
    llm = main_llm(openai_server.base_url)
    s = PipecatLLMSummarizer(llm)
    with pytest.raises(SummarizerError):
        await s.summarize(REQUEST)
    # the same service's own one-shot use still returns its (truncated) text unchanged
    text = await llm.run_inference(LLMContext(messages=[{"role": "user", "content": "hi"}]))
    assert text == "FACTS:\n- a"


def test_truncation_signals_of_each_provider_shape():
    openai_chat = SimpleNamespace(choices=[SimpleNamespace(finish_reason="length")])
    assert truncation_reason(openai_chat) == "length"
    ok = SimpleNamespace(choices=[SimpleNamespace(finish_reason="stop")])
    assert truncation_reason(ok) is None
    assert truncation_reason(SimpleNamespace(stop_reason="max_tokens")) == "max_tokens"
    assert truncation_reason(SimpleNamespace(stop_reason="end_turn")) is None
    responses = SimpleNamespace(
        status="incomplete", incomplete_details=SimpleNamespace(reason="max_output_tokens")
    )
    assert truncation_reason(responses) == "max_output_tokens"
    gemini = SimpleNamespace(
        candidates=[SimpleNamespace(finish_reason=SimpleNamespace(name="MAX_TOKENS"))]
    )
    assert truncation_reason(gemini) == "MAX_TOKENS"


class OpaqueLLM(LLMService):
    """A service whose client this package does not know: no truncation signal at all."""

    def __init__(self, answer: str):
        super().__init__(settings=offline_llm_settings("opaque"))
        self.answer = answer

    async def run_inference(self, context, max_tokens=None, system_instruction=None, **kw):
        return self.answer


async def test_an_opaque_service_summary_that_fills_its_budget_is_taken_as_cut_off():
    full = "FACTS:\n- " + "word " * 120  # ~ 123 tokens of 123
    with pytest.raises(SummarizerError, match="budget"):
        await PipecatLLMSummarizer(OpaqueLLM(full)).summarize(REQUEST)
    short = "FACTS:\n- peanut allergy"
    assert await PipecatLLMSummarizer(OpaqueLLM(short)).summarize(REQUEST) == short

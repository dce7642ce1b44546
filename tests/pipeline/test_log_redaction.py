"""No package log line at INFO or above carries conversation or fact text."""

from __future__ import annotations

from pipecat_summarizer import SummarizerOptions
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import Run, cfg, turns

SECRET = "zebraquartz"  # distinctive, in every user turn, every fact and every error body


def _package_lines(logs, level="INFO"):
    order = {"TRACE": 5, "DEBUG": 10, "INFO": 20, "SUCCESS": 25, "WARNING": 30, "ERROR": 40}
    return [
        r["message"]
        for r in logs
        if r["name"].startswith("pipecat_summarizer") and r["level"].no >= order[level]
    ]


def _handler():
    calls = {"summary": 0}

    def handler(body):
        if not is_summary_request(body):
            return Reply("Sure thing.")
        calls["summary"] += 1
        transcript = body["messages"][1]["content"]
        if calls["summary"] == 1:
            # a backend whose error body echoes the request, as many do on a 400
            return Reply(status=400, error_message=f"cannot process: {transcript[-300:]}")
        if calls["summary"] == 2:
            return Reply("FACTS:\n- x", finish_reason="length")  # cut off: a failure
        return Reply(
            f"FACTS:\n- card {SECRET} 4111\nCONSTRAINTS:\n- allergic to {SECRET} nuts\n"
            "DECISIONS:\n- none\nOPEN QUESTIONS:\n- none"
        )

    return handler


async def run_with_secrets(openai_server, logs, log_content=False):
    openai_server.handler = _handler()
    options = SummarizerOptions(
        retry_backoff_s=0,
        error_after_failures=2,
        pinned_facts_tokens=20,
        max_request_tokens=400,
        log_content=log_content,
    )
    r = Run(openai_server, cfg(messages=4, keep=1), options=options)
    # application facts over their budget: the WARNING that folds them used to list them
    for i in range(4):
        r.processor.pin(f"k{i}", f"caller {SECRET} number {i} has a long detail to remember")
    said = [
        f"My account is {SECRET}-{i}; I'm allergic to {SECRET} peanuts and my name is {SECRET}."
        + " Filler words to fill the context." * 5
        for i in range(12)
    ]
    await r.run(turns(said, gap=0.12), tail=0.4)
    return r


async def test_no_conversation_or_fact_text_at_info_and_above(openai_server, logs):
    r = await run_with_secrets(openai_server, logs)
    lines = _package_lines(logs)
    # the scenario exercised the paths that used to leak
    assert r.failed and r.applied
    assert any("over their" in line for line in lines)  # the pinned-budget WARNING
    assert any("HTTP 400" in line for line in lines)  # the backend error WARNING
    assert any("cut off" in line for line in lines)
    leaking = [line for line in lines if SECRET in line.lower()]
    assert not leaking, leaking


async def test_log_content_shows_text_at_debug_only(openai_server, logs):
    await run_with_secrets(openai_server, logs, log_content=True)
    assert not [line for line in _package_lines(logs) if SECRET in line.lower()]
    assert any(SECRET in line.lower() for line in _package_lines(logs, "DEBUG"))

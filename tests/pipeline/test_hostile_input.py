"""Hostile inputs through real Pipecat pipelines.

Every test drives ``ContextSummarizer`` between a real ``LLMContextAggregatorPair`` and
Pipecat's ``OpenAILLMService``, against the real HTTP server in ``tests/support/openai_server.py``.
"""

from __future__ import annotations

import base64
import json

import pytest
from pipecat.frames.frames import (
    LLMMessagesAppendFrame,
    LLMMessagesTransformFrame,
    LLMMessagesUpdateFrame,
)
from pipecat.processors.aggregators import async_tool_messages
from pipecat.processors.aggregators.llm_context import LLMSpecificMessage

import pipecat_summarizer._compaction.ceiling as ceiling_module
import pipecat_summarizer._compaction.plan as plan_module
import pipecat_summarizer._compaction.trigger as policy_module
import pipecat_summarizer._session.schedule as schedule_module
from pipecat_summarizer import SummarizerOptions
from pipecat_summarizer._compaction.measure import ContextMeter
from pipecat_summarizer._session.owner import ContextSession
from pipecat_summarizer._session.steps import STEP_FAILURE_LIMIT
from pipecat_summarizer._text.tokens import EstimateTokenCounter
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import (
    Run,
    cfg,
    echo_summary,
    scripted,
    texts_of,
    turns,
    user_turn,
)
from tests.support.settle import Gap

SECRET = "boom-secret-7f3a"  # text an internal error carries; never in a log line


def _said(n: int, prefix: str = "user message number", pad: int = 0) -> list[str]:
    return [f"{prefix} {i}" + (" filler" * pad) for i in range(n)]


def _call(*ids: str, name: str = "lookup") -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": name, "arguments": "{}"}}
            for i in ids
        ],
    }


def _result(call_id: str, content: str = "done") -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _errors(logs) -> list[str]:
    return [x["message"] for x in logs if x["level"].name == "ERROR"]


def _warnings(logs) -> list[str]:
    return [x["message"] for x in logs if x["level"].name == "WARNING"]


def _request_tokens(body: dict) -> int:
    counter = EstimateTokenCounter()
    return sum(counter.count_message(m) for m in body["messages"])


# -- 1. a frame is never lost ----------------------------------------------------------------


async def test_deeply_nested_json_tool_result_never_costs_a_turn(openai_server, logs):
    # Valid JSON, ~10 KB of nested arrays: json.loads raises RecursionError on it.
    nested = '{"rows": ' + "[" * 5000 + "]" * 5000 + "}"
    json.dumps(nested)  # a plain string to every other part of the pipeline
    openai_server.handler = scripted()
    r = Run(openai_server, cfg(messages=6, keep=2))
    history = [{"role": "user", "content": "fetch the rows"}, _call("n1"), _result("n1", nested)]
    said = _said(12)
    await r.run([LLMMessagesAppendFrame(messages=history, run_llm=False), *turns(said, 0.1)])

    assert len(openai_server.chat_requests) == 12  # every turn reached the LLM
    assert r.applied  # the root is fixed: the nested result is an ordinary message
    assert not _errors(logs)


def _boom(*args, **kwargs):
    raise RuntimeError(SECRET)


# (step named in the ERROR, what to patch): every internal step the processor runs per frame.
STEPS = {
    "counting": lambda mp: mp.setattr(ContextMeter, "measure", _boom),
    "pinning": lambda mp: mp.setattr(ContextSession, "render_record", _boom),
    "planning-trigger": lambda mp: mp.setattr(policy_module, "trigger_reason", _boom),
    "planning-select": lambda mp: mp.setattr(schedule_module, "select", _boom),
    "parsing tool messages": lambda mp: mp.setattr(plan_module, "parse_async_tool_message", _boom),
    "eviction": lambda mp: mp.setattr(ceiling_module, "evict_for_ceiling", _boom),
    "rendering": lambda mp: mp.setattr(schedule_module, "build_request", _boom),
}


@pytest.mark.parametrize("step", list(STEPS))
async def test_each_internal_step_failing_still_lets_every_turn_through(
    openai_server, logs, monkeypatch, step
):
    openai_server.handler = scripted()
    r = Run(
        openai_server,
        cfg(messages=6, keep=2),
        options=SummarizerOptions(max_request_tokens=300, pin_evicted_facts=False),
    )
    started = async_tool_messages.build_started_message("a1")
    final = async_tool_messages.build_final_result_message("a1", "42")
    history = [{"role": "user", "content": "start"}, _call("a1"), started, final]
    STEPS[step](monkeypatch)
    said = _said(8, pad=40)  # ~300 characters a turn: the 300-token ceiling evicts
    await r.run([LLMMessagesAppendFrame(messages=history, run_llm=False), *turns(said, 0.1)])

    assert len(openai_server.chat_requests) == 8  # no turn lost
    assert [m["content"] for m in r.context.messages if m.get("role") == "user"][-1] == said[-1]
    errors = _errors(logs)
    assert errors, "the patched step must have run and failed"
    assert all(SECRET not in e for e in errors)  # names the cause, not the text
    assert all("failed (RuntimeError)" in e for e in errors if "stopped" not in e)
    assert sum("summarization stopped" in e for e in errors) <= 1


async def test_a_step_failing_every_turn_stops_summarization_once(openai_server, logs, monkeypatch):
    openai_server.handler = scripted()
    r = Run(openai_server, cfg(messages=6, keep=2))
    monkeypatch.setattr(schedule_module, "select", _boom)
    await r.run(turns(_said(12), 0.1))

    assert len(openai_server.chat_requests) == 12
    errors = _errors(logs)
    failures = [e for e in errors if "planning failed (RuntimeError)" in e]
    stops = [e for e in errors if "summarization stopped" in e]
    assert len(failures) == STEP_FAILURE_LIMIT
    assert len(stops) == 1 and "planning" in stops[0]
    assert errors.index(stops[0]) == len(errors) - 1  # nothing more after it
    assert not openai_server.summary_requests


async def test_a_step_that_fails_once_is_tried_again_on_the_next_turn(
    openai_server, logs, monkeypatch
):
    openai_server.handler = scripted()
    r = Run(openai_server, cfg(messages=6, keep=2))
    real, calls = schedule_module.select, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError(SECRET)
        return real(*args, **kwargs)

    monkeypatch.setattr(schedule_module, "select", flaky)
    await r.run(turns(_said(10), 0.1))

    assert len(openai_server.chat_requests) == 10
    assert len(_errors(logs)) == 1 and SECRET not in _errors(logs)[0]
    assert r.applied  # the next turn planned again, and summarization went on


class _WordTokenizer:
    """A raw tokenizer (like a tiktoken Encoding): encode() only, no count_message()."""

    def encode(self, text: str) -> list[str]:
        return text.split()


async def test_raw_tokenizer_as_token_counter_is_wrapped(openai_server, logs):
    openai_server.handler = scripted()
    options = SummarizerOptions(token_counter=_WordTokenizer())
    r = Run(openai_server, cfg(tokens=400, messages=None, keep=2), options=options)
    await r.run(turns(_said(10, pad=30), 0.1))

    assert len(openai_server.chat_requests) == 10
    assert r.applied and r.applied[0].reason == "tokens"
    assert not _errors(logs)


@pytest.mark.parametrize("bad", [lambda text: 1, object(), "cl100k_base"])
def test_token_counter_that_counts_nothing_is_rejected_at_construction(bad):
    with pytest.raises(TypeError, match="token_counter"):
        SummarizerOptions(token_counter=bad)


# -- 2. compaction never stalls silently -------------------------------------------------------


async def test_oversized_tool_result_after_the_first_summary_is_sent_shortened(openai_server, logs):
    openai_server.handler = scripted()
    r = Run(openai_server, cfg(messages=8, keep=4))
    big = "ROW-DATA " * (32 * 1024 // 9)  # a 32 KB tool result, over the 8,000-token budget
    frames = [
        *turns(_said(10), 0.1),
        LLMMessagesAppendFrame(messages=[_call("big1"), _result("big1", big)], run_llm=False),
        *turns(_said(30, prefix="later message"), 0.1),
    ]
    await r.run(frames, tail=0.5)

    first_applied = 1
    assert len(r.applied) >= first_applied + 2  # compaction went on after the big result
    carrying = [b for b in openai_server.summary_requests if "ROW-DATA" in json.dumps(b)]
    assert carrying, "the big result reached the summarizer"
    assert all(len(b["messages"][1]["content"]) < 20_000 for b in carrying)  # shortened
    assert "ROW-DATA" not in texts_of(r.context.messages)  # not resent every turn


@pytest.mark.parametrize("tool_message", ["without_tool_call_id", "none"])
async def test_a_call_whose_result_never_arrives_is_summarized_after_bounded_turns(
    openai_server, tool_message
):
    openai_server.handler = scripted()
    r = Run(openai_server, cfg(messages=6, keep=2))
    history = [{"role": "user", "content": "where is my order"}, _call("lost", name="find_order")]
    if tool_message == "without_tool_call_id":
        history.append({"role": "tool", "content": "an answer that names no call"})
    await r.run([LLMMessagesAppendFrame(messages=history, run_llm=False), *turns(_said(12), 0.1)])

    assert r.applied
    sent = [b["messages"][1]["content"] for b in openai_server.summary_requests]
    assert any("find_order" in s and "no_result" in s for s in sent)  # called, no result
    calls_left = [m for m in r.context.messages if m.get("tool_calls")]
    assert not calls_left


async def test_a_due_compaction_that_cannot_start_warns_once_per_cause(openai_server, logs):
    openai_server.handler = scripted()
    r = Run(
        openai_server,
        cfg(messages=6, keep=2),
        options=SummarizerOptions(unresolved_tool_call_turns=None),  # waits forever
    )
    history = [_call("stuck"), _result("stuck", "IN_PROGRESS")]  # blocks from the start
    said = _said(10)
    await r.run([LLMMessagesAppendFrame(messages=history, run_llm=False), *turns(said, 0.1)])

    assert not r.applied
    stalls = [w for w in _warnings(logs) if "cannot start" in w]
    assert len(stalls) == 1  # once, not per turn
    assert "unresolved tool call" in stalls[0]
    assert "user message" not in stalls[0]


# -- 3. nothing disappears unsummarized ---------------------------------------------------------


async def test_llm_specific_message_in_a_summarized_range_is_not_lost(openai_server):
    openai_server.handler = scripted()
    r = Run(openai_server, cfg(messages=6, keep=2))
    thinking = LLMSpecificMessage(
        llm="openai", message={"role": "assistant", "content": "note: account 777-888-999"}
    )
    history = [
        {"role": "user", "content": "my account?"},
        thinking,
        {"role": "assistant", "content": "Got it."},
    ]
    await r.run([LLMMessagesAppendFrame(messages=history, run_llm=False), *turns(_said(8), 0.1)])

    assert r.applied
    summarized = r.applied[0].messages_summarized
    assert summarized >= 2  # the range around it was summarized
    in_context = any(m is thinking for m in r.context.messages)
    in_summary = any("777-888-999" in json.dumps(b) for b in openai_server.summary_requests)
    assert in_context or in_summary  # the requirement
    assert in_summary and not in_context  # the design: its text goes to the summarizer


async def test_a_large_audio_part_counts_toward_the_ceiling(openai_server):
    openai_server.handler = scripted()
    r = Run(
        openai_server,
        cfg(messages=50, keep=2),
        options=SummarizerOptions(max_request_tokens=300, pin_evicted_facts=False),
    )
    # ~9 s of 16 kHz 16-bit WAV (400 KB of base64): about 300 tokens, not 10
    audio = base64.b64encode(b"\x01\x02" * 150_000).decode()
    message = {
        "role": "user",
        "content": [
            {"type": "text", "text": "Audio follows"},
            {"type": "input_audio", "input_audio": {"data": audio, "format": "wav"}},
        ],
    }
    frames = [
        LLMMessagesAppendFrame(
            messages=[message, {"role": "assistant", "content": "Heard."}], run_llm=False
        ),
        *turns(_said(3), 0.1),
    ]
    await r.run(frames)

    assert len(openai_server.chat_requests) == 3
    assert all(audio not in json.dumps(b) for b in openai_server.chat_requests)
    assert all(m is not message for m in r.context.messages)  # evicted (then summarized)


# -- 7. the meter sees every change ---------------------------------------------------------------


async def test_a_tool_result_written_over_its_placeholder_is_counted(openai_server):
    openai_server.handler = scripted()
    ceiling = 1200
    r = Run(
        openai_server,
        cfg(messages=50, keep=2),
        options=SummarizerOptions(max_request_tokens=ceiling, pin_evicted_facts=False),
    )
    placeholder = _result("c1", "IN_PROGRESS")
    history = [{"role": "user", "content": "look up my order"}, _call("c1"), placeholder]

    def write_result(messages):
        # what Pipecat's assistant aggregator does when the function returns
        placeholder["content"] = "R" * 8000
        return messages

    frames = [
        LLMMessagesAppendFrame(messages=history, run_llm=False),
        user_turn("anything yet?"),  # the meter measures the placeholder
        Gap(sleep=0.2),
        LLMMessagesTransformFrame(transform=write_result),
        user_turn("and now?"),
        Gap(sleep=0.2),
    ]
    await r.run(frames)

    last = openai_server.chat_requests[-1]
    assert "RRRRRRRR" not in json.dumps(last)
    assert _request_tokens(last) <= ceiling


async def test_nothing_evictable_is_remembered_by_content_not_by_count(openai_server):
    openai_server.handler = scripted()
    ceiling = 1000
    r = Run(
        openai_server,
        cfg(messages=50, keep=2),
        options=SummarizerOptions(max_request_tokens=ceiling, pin_evicted_facts=False),
    )
    system = r.context.messages[0]
    # A: over the ceiling with nothing evictable (a large protected prompt)
    context_a = [
        system,
        {"role": "developer", "content": "RULES " * 900},
        user_turn("hi").messages[0],
    ]
    # B: the same message count, over the ceiling, and the old turn can go
    context_b = [
        system,
        {"role": "user", "content": "OLD-TURN " * 700},
        {"role": "user", "content": "a new question"},
    ]
    frames = [
        LLMMessagesUpdateFrame(messages=context_a, run_llm=True),
        Gap(sleep=0.3),
        LLMMessagesUpdateFrame(messages=context_b, run_llm=True),
        Gap(sleep=0.3),
    ]
    await r.run(frames)

    last = openai_server.chat_requests[-1]
    assert "a new question" in json.dumps(last)
    assert "OLD-TURN" not in json.dumps(last)
    assert _request_tokens(last) <= ceiling


async def test_a_fast_failing_summarizer_is_not_retried_back_to_back(openai_server, logs):
    openai_server.handler = scripted(status=500)
    r = Run(
        openai_server,
        cfg(messages=6, keep=2),
        options=SummarizerOptions(
            max_request_tokens=600, retry_backoff_s=0, pin_evicted_facts=False
        ),
    )
    said = _said(8, pad=40)
    await r.run(turns(said, 0.2), tail=0.5)

    assert r.processor.pending_messages  # a backlog waited the whole time
    assert 1 <= len(openai_server.summary_requests) <= len(said)  # at most one per turn
    failures = [w for w in _warnings(logs) if "summary failed" in w]
    assert len(failures) == len(openai_server.summary_requests)


async def test_pending_messages_of_a_replaced_context_are_not_summarized_into_the_new_one(
    openai_server, logs
):
    healthy = False

    def handler(body):
        if is_summary_request(body):
            return Reply(echo_summary(body)) if healthy else Reply("down", status=500)
        return Reply("Sure thing.")

    def recover(messages):
        nonlocal healthy
        healthy = True
        return messages

    openai_server.handler = handler
    r = Run(
        openai_server,
        cfg(messages=6, keep=2),
        options=SummarizerOptions(
            max_request_tokens=300, retry_backoff_s=0, pin_evicted_facts=False
        ),
    )
    system = r.context.messages[0]
    frames = [
        *turns(_said(6, prefix="OLD-TOPIC", pad=40), 0.1),
        LLMMessagesUpdateFrame(
            messages=[system, {"role": "user", "content": "a new conversation"}], run_llm=True
        ),
        Gap(sleep=0.2),
        LLMMessagesTransformFrame(transform=recover),
        *turns(_said(8), 0.1),
    ]
    await r.run(frames, tail=0.5)

    assert any("evicted" in x["message"] for x in logs)  # a backlog existed
    assert r.applied  # the new conversation is summarized
    after = [b for b in openai_server.summary_requests if "user message number" in json.dumps(b)]
    assert after and all("OLD-TOPIC" not in json.dumps(b) for b in after)
    assert "OLD-TOPIC" not in texts_of(r.context.messages)
    assert not r.processor.pending_messages
    dropped = [
        x["message"]
        for x in logs
        if x["level"].name == "INFO" and "pending messages dropped" in x["message"]
    ]
    assert len(dropped) == 1 and "OLD-TOPIC" not in dropped[0]

"""One call of a returning caller through a real pipeline with recall, for the recall tests:
the aggregators, ``ContextSummarizer`` with a store and Pipecat's OpenAI service, both LLMs
against the local OpenAI-protocol server; and the recalled block of the last request."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._recall.render import is_recall_message
from pipecat_summarizer.params import MemoryParams, RecallParams, WriterParams
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord
from pipecat_summarizer.tools import RECALL_MEMORY
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import build, cfg, main_llm, turns
from tests.support.settle import run_settling

#: A writer that flushes at once, so the next call finds what this one archived.
FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)


async def recall_call(
    server: Any,
    store: Any,
    texts: list[str],
    *,
    call_id: str,
    recall: RecallParams | None,
    system: str,
    memory: MemoryParams | None = None,
    user_id: str = "alice",
    frames: Callable[[ContextSummarizer], list] | None = None,
) -> ContextSummarizer:
    """The caller says ``texts`` (each pause ends once the turn has settled, at most 2 s);
    compacts at six messages, keeps two. ``frames``: what to send instead, given the
    processor (an application that acts on it between turns)."""
    context = LLMContext(messages=[{"role": "system", "content": system}])
    summarizer = OpenAISummarizer(base_url=server.base_url, model="cheap")
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=6, keep=2),
        summarizer=summarizer,
        store=store,
        call_id=call_id,
        user_id=user_id,
        memory=memory or MemoryParams(writer=FAST),
        recall=recall,
    )
    try:
        await run_settling(  # each pause ends once the turn and its searches have settled
            build(context, processor, main_llm(server.base_url)),
            frames_to_send=frames(processor) if frames else [*turns(texts, gap=2.0)],
        )
    finally:
        await summarizer.aclose()
    return processor


def recall_block(server: Any) -> str:
    """The one recalled block of the main LLM's last request."""
    recalled = [m for m in server.chat_requests[-1]["messages"] if is_recall_message(m)]
    assert len(recalled) == 1
    return str(recalled[0]["content"])


def archived_call(
    lines: Sequence[str], *, call_id: str = "c1", user_id: str = "alice"
) -> list[ArchivedMessage]:
    """An earlier call of ``user_id`` as the archive holds it: ``lines`` said in turn by the
    caller and the assistant, a second apart (November 2023)."""
    return [
        ArchivedMessage(
            call_id=call_id,
            position=i,
            role="user" if i % 2 == 0 else "assistant",
            content=text,
            message_json=json.dumps({"role": "user", "content": text}),
            turn=i // 2,
            at=1_700_000_000 + i,
            user_id=user_id,
        )
        for i, text in enumerate(lines)
    ]


def ended_call(
    lines: Sequence[str], *, call_id: str = "c1", user_id: str = "al"
) -> list[CallRecord | ArchivedMessage]:
    """An earlier call of ``user_id`` that ended ten minutes ago (started 15 minutes ago):
    its record, then ``lines`` said in turn by the caller and the assistant, a second apart.
    The semantic index reads an ended call once, at the call's start."""
    now = time.time()
    return [
        CallRecord(call_id, user_id=user_id, started_at=now - 900, ended_at=now - 600),
        *[
            ArchivedMessage(
                call_id,
                i,
                "user" if i % 2 == 0 else "assistant",
                text,
                "{}",
                turn=i // 2,
                at=now - 900 + i,
                user_id=user_id,
            )
            for i, text in enumerate(lines)
        ],
    ]


def travel_desk(
    server: Any, store: Any, recall: RecallParams, *, call_id: str = "c2"
) -> tuple[LLMContext, ContextSummarizer, OpenAISummarizer]:
    """A travel desk's call of ``alice`` with ``recall`` on ``store`` (no summary before 40
    messages): its context, its processor and its summarizer (the caller closes it)."""
    context = LLMContext(messages=[{"role": "system", "content": "You are a travel desk."}])
    summarizer = OpenAISummarizer(base_url=server.base_url, model="cheap")
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=40, keep=4),
        summarizer=summarizer,
        store=store,
        call_id=call_id,
        user_id="alice",
        memory=MemoryParams(writer=FAST),
        recall=recall,
    )
    return context, processor, summarizer


def recall_tool_call(query: str) -> Reply:
    """The main LLM's reply that calls ``recall_memory`` (id ``call_r1``) with ``query``."""
    arguments = json.dumps({"query": query})
    function = {"name": RECALL_MEMORY, "arguments": arguments}
    return Reply(tool_calls=[{"id": "call_r1", "type": "function", "function": function}])


def asks_recall(
    asked: str, query: str, summaries: Callable[[dict], Reply]
) -> Callable[[dict], Reply]:
    """A server handler: summaries by ``summaries``; the caller's ``asked`` is answered once
    by a ``recall_memory`` call with ``query`` (then "Noted."); any other turn "Sure thing."."""
    calls = iter([recall_tool_call(query)])

    def handler(body: dict) -> Reply:
        if is_summary_request(body):
            return summaries(body)
        last = body["messages"][-1]
        if last.get("role") == "user" and last.get("content") == asked:
            return next(calls, Reply("Noted."))
        return Reply("Sure thing.")

    return handler

"""``RequestCeiling`` on its own: the request overhead, the eviction step, the "nothing
evictable" memo and the eviction event, against a small in-memory host (the processor's
part: the context, the pending queue)."""

from __future__ import annotations

import pytest
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer._compaction.ceiling import (
    RequestCeiling,
    hook_request_reads,
    request_overhead,
)
from pipecat_summarizer._text.tokens import CachedCounter, EstimateTokenCounter
from pipecat_summarizer.params import CeilingParams
from tests.support.pipeline_utils import main_llm

COUNTER = EstimateTokenCounter()


class Host:
    """A context with a system prompt and a pending queue, as the processor keeps them."""

    def __init__(self, messages: list[dict], counter: CachedCounter, facts: int = 0):
        self.messages = messages
        self.pending: list[dict] = []
        self.counter = counter
        self.facts = facts
        self.moves = 0

    def ceiling_messages(self) -> list:
        return self.messages

    def ceiling_view(self) -> list:
        return list(self.messages)

    def ceiling_fixed_tokens(self) -> int:
        return self.facts

    def ceiling_summary_message(self):
        return None

    def ceiling_move_out(self, view: list, remaining: list, out: list) -> None:
        self.moves += 1
        self.messages = remaining
        self.pending.extend(out)

    def ceiling_total_tokens(self) -> int:
        return sum(self.counter.count_message(m) for m in self.messages)

    def ceiling_pending(self) -> int:
        return len(self.pending)


def chat(turns: int, words: int = 40) -> list[dict]:
    out: list[dict] = [{"role": "system", "content": "You are helpful."}]
    for k in range(turns):
        out.append({"role": "user", "content": f"turn {k} " + "word " * words})
        out.append({"role": "assistant", "content": f"answer {k} " + "word " * words})
    out.append({"role": "user", "content": "the current turn"})
    return out


def ceiling(limit: int | None = 600, ratio: float = 0.75) -> tuple[RequestCeiling, CachedCounter]:
    counter = CachedCounter(COUNTER)
    params = CeilingParams(max_request_tokens=limit, eviction_target_ratio=ratio) if limit else None
    return RequestCeiling(params, counter), counter


def test_under_the_ceiling_nothing_is_due():
    c, counter = ceiling(600)
    host = Host(chat(2), counter)
    assert not c.due(host.ceiling_total_tokens(), 0, host.messages)
    assert c.due(590, 11, host.messages)  # the overhead counts: 601 > 600
    assert not c.due(590, 10, host.messages)


def test_eviction_goes_down_to_the_target_and_queues_in_order():
    c, counter = ceiling(600, ratio=0.75)
    host = Host(chat(12), counter)
    before = host.ceiling_total_tokens()
    assert before > 600 and c.due(before, 0, host.messages)
    event = c.evict(host)
    assert event is not None
    after = host.ceiling_total_tokens()
    assert after <= 600 * 0.75
    assert event.tokens_after == after and event.ceiling == 600
    assert event.messages_evicted == len(host.pending) == event.pending_messages
    assert event.tokens_evicted == sum(COUNTER.count_message(m) for m in host.pending)
    # the system prompt and the current turn stay; the queue is the oldest turns, in order
    assert host.messages[0]["role"] == "system"
    assert host.messages[-1]["content"] == "the current turn"
    assert [m["content"][:7] for m in host.pending[:2]] == ["turn 0 ", "answer "]
    assert not c.due(after, 0, host.messages)


def test_overhead_and_fixed_tokens_count_against_the_ceiling():
    plain, counter = ceiling(900)
    host = Host(chat(12), counter)
    plain.evict(host)
    kept_plain = host.ceiling_total_tokens()
    loaded, counter2 = ceiling(900)
    host2 = Host(chat(12), counter2, facts=100)
    loaded.evict(host2, overhead=200)
    # 300 tokens of overhead and facts leave that much less room for the messages
    assert host2.ceiling_total_tokens() <= kept_plain - 300 + 60  # one unit of slack
    assert host2.ceiling_total_tokens() + 300 <= 900 * 0.75


def test_nothing_evictable_is_remembered_by_content_and_retried_on_change(logs):
    c, counter = ceiling(200)
    # only the system prompt and a large current turn: nothing may leave
    host = Host(
        [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "word " * 400},
        ],
        counter,
    )
    total = host.ceiling_total_tokens()
    assert c.due(total, 0, host.messages)
    assert c.evict(host) is None
    assert host.moves == 0
    assert sum("nothing more can be evicted" in r["message"] for r in logs) == 1
    # the same content (even in new objects) is not tried again
    same = [dict(m) for m in host.messages]
    assert not c.due(total, 0, same)
    # a different overhead or a changed context is
    assert c.due(total, 5, host.messages)
    host.messages.append({"role": "assistant", "content": "more"})
    assert c.due(host.ceiling_total_tokens(), 0, host.messages)


def test_disabled_ceiling_never_evicts_but_still_counts_overhead():
    c, counter = ceiling(None)
    host = Host(chat(30), counter)
    assert not c.due(10**6, 0, host.messages)
    assert c.evict(host) is None and host.moves == 0
    tools = ToolsSchema(standard_tools=[_schema("a")])
    assert c.overhead(tools) == request_overhead(COUNTER, tools=tools) > 0


def _schema(name: str) -> FunctionSchema:
    return FunctionSchema(
        name=name,
        description="Look something up in the booking system.",
        properties={"query": {"type": "string"}},
        required=["query"],
    )


def test_overhead_is_recounted_only_when_the_llm_or_the_tools_change():
    c, _ = ceiling(600)
    tools = ToolsSchema(standard_tools=[_schema("a")])
    none = c.overhead(None)
    one = c.overhead(tools)
    assert none == 0 and one > 0
    assert c.overhead(tools) == one  # cached
    more = ToolsSchema(standard_tools=[_schema("a"), _schema("b")])
    assert c.overhead(more) > one
    llm = main_llm("http://127.0.0.1:9/v1", system_instruction="House rules. " * 40)
    c.attach_llm(llm)
    assert c.llm is llm
    assert c.overhead(more) > c.overhead(None) > 40


def test_attach_llm_rejects_anything_but_an_llm_service():
    c, _ = ceiling(600)
    with pytest.raises(TypeError, match="LLMService"):
        c.attach_llm(object())  # type: ignore[arg-type]


def test_the_request_read_hook_runs_only_for_an_adapters_read():
    context = LLMContext(messages=[{"role": "user", "content": "hi"}])
    calls: list[int] = []
    hook_request_reads(context, lambda: calls.append(len(context.messages)))
    assert context.get_messages() == [{"role": "user", "content": "hi"}]
    assert calls == []  # the aggregators' and the application's reads
    assert len(context.get_messages(llm_specific_filter="openai")) == 1
    assert calls == [1]  # an LLM adapter building a request

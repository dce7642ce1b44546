"""Tool-result clearing's pure rules (``_compaction/clearing.py``) and its options: property
tests over generated conversations, then the placeholder and ``ClearingParams``."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pipecat.processors.aggregators import async_tool_messages

from pipecat_summarizer._compaction.clearing import (
    PLACEHOLDER_PREFIX,
    RECALL_TOOL,
    apply_clearing,
    is_cleared,
    placeholder,
    plan_clearing,
)
from pipecat_summarizer._compaction.measure import is_placeholder
from pipecat_summarizer.params import ClearingParams, ContextSummarizerParams
from pipecat_summarizer.tools import RECALL_MEMORY


def count(message) -> int:
    """A stand-in estimate: 4 per message plus a token per 4 characters of content."""
    return 4 + len(str(message.get("content") or "")) // 4


TOOLS = ["lookup_order", "search_flights", "crm", RECALL_TOOL]


@st.composite
def conversations(draw) -> list:
    """A system prompt, then user turns, answers and tool rounds whose results are big,
    small, in progress (sync or async), or already cleared."""
    messages: list = [{"role": "system", "content": "Be brief."}]
    n = 0
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["user", "assistant", "tools"]))
        if kind != "tools":
            messages.append({"role": kind, "content": "words " * draw(st.integers(0, 20))})
            continue
        calls = []
        for _ in range(draw(st.integers(1, 3))):
            n += 1
            calls.append((f"call_{n}", draw(st.sampled_from(TOOLS))))
        messages.append(
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": i, "type": "function", "function": {"name": t, "arguments": "{}"}}
                    for i, t in calls
                ],
            }
        )
        for call_id, tool in calls:
            state = draw(st.sampled_from(["big", "small", "in_progress", "async", "cleared"]))
            if state == "in_progress":
                content = "IN_PROGRESS"
            elif state == "async":
                content = async_tool_messages.build_started_message(call_id)["content"]
            elif state == "cleared":
                content = placeholder(tool, 900)
            else:
                size = draw(st.integers(200, 4000) if state == "big" else st.integers(0, 150))
                content = json.dumps({"rows": "x" * size})
            messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
    return messages


params_st = st.builds(
    ClearingParams,
    keep_latest=st.integers(0, 4),
    min_result_tokens=st.integers(0, 400),
    min_freed_tokens=st.integers(0, 2000),
    exclude_tools=st.sampled_from([(), ("crm",), ("crm", "search_flights")]),
)


def _results(messages: list) -> list[int]:
    return [i for i, m in enumerate(messages) if m.get("role") == "tool"]


@settings(max_examples=150, deadline=None)
@given(conversations(), params_st)
def test_clearing_keeps_every_rule(messages, params):
    clearing = plan_clearing(messages, params, count)
    new, originals = apply_clearing(messages, clearing)
    chosen = set(clearing.indices)
    # pairing preserved: same messages in the same places, roles, ids and calls unchanged
    assert len(new) == len(messages)
    for i, (old, now) in enumerate(zip(messages, new, strict=True)):
        if i not in chosen:
            assert now is old
            continue
        assert {k: v for k, v in now.items() if k != "content"} == {
            k: v for k, v in old.items() if k != "content"
        }
        assert now["role"] == "tool" and now["tool_call_id"] == old["tool_call_id"]
        assert is_cleared(now)
    assert originals == [messages[i] for i in clearing.indices]
    results = _results(messages)
    kept = results[len(results) - params.keep_latest :] if params.keep_latest else []
    for i in chosen:
        old = messages[i]
        assert not is_placeholder(old)  # nothing in progress touched
        assert not is_cleared(old)  # a placeholder is never cleared again
        assert i not in kept  # the latest N are kept
        assert count(old) > params.min_result_tokens
    tools = set(clearing.tools)
    assert RECALL_TOOL not in tools and not tools & set(params.exclude_tools)
    # freed >= min, or nothing cleared; the estimate is what the rewrite saves
    freed = sum(count(m) for m in messages) - sum(count(m) for m in new)
    assert freed == clearing.freed_tokens
    assert not chosen or freed >= params.min_freed_tokens
    # idempotent: on its own output, with the lowest bars, nothing cleared is chosen again
    again = plan_clearing(
        new,
        ClearingParams(
            keep_latest=params.keep_latest,
            min_result_tokens=0,
            min_freed_tokens=0,
            exclude_tools=params.exclude_tools,
        ),
        count,
    )
    assert not chosen & set(again.indices)


def _round(call_id: str, tool: str, content: str) -> list:
    return [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": tool, "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": content},
    ]


def test_a_large_old_result_is_cleared_and_names_its_tool():
    big = json.dumps({"order": "A-1", "lines": "y" * 8000})
    messages = [
        *_round("c1", "lookup_order", big),
        *_round("c2", "lookup_order", "ok"),
        *_round("c3", "lookup_order", "ok"),
        *_round("c4", "lookup_order", "ok"),
    ]
    clearing = plan_clearing(messages, ClearingParams(), count)
    assert clearing.indices == (1,)
    new, _ = apply_clearing(messages, clearing)
    text = new[1]["content"]
    assert text.startswith(PLACEHOLDER_PREFIX) and "lookup_order" in text
    assert "recall_memory" in text
    gone = placeholder("lookup_order", 10, archived=False)
    assert "no longer available" in gone and "recall_memory" not in gone


def test_an_orphan_result_or_a_provider_object_is_left_alone():
    big = "z" * 8000
    orphan = {"role": "tool", "tool_call_id": "nobody", "content": big}
    messages = [orphan, object(), *[m for i in range(4) for m in _round(f"c{i}", "t", "ok")]]
    assert not plan_clearing(messages, ClearingParams(keep_latest=0, min_freed_tokens=0), count)


def test_recall_tool_name_is_the_tools_module_one():
    assert RECALL_TOOL == RECALL_MEMORY


@pytest.mark.parametrize(
    ("kwargs", "error", "field"),
    [
        ({"keep_latest": -1}, ValueError, "clearing.keep_latest"),
        ({"min_result_tokens": -5}, ValueError, "clearing.min_result_tokens"),
        ({"min_freed_tokens": 1.5}, TypeError, "clearing.min_freed_tokens"),
        ({"exclude_tools": "crm"}, TypeError, "clearing.exclude_tools"),
        ({"exclude_tools": ("crm", 3)}, TypeError, "clearing.exclude_tools"),
        ({"without_store": "yes"}, TypeError, "clearing.without_store"),
    ],
)
def test_clearing_params_name_the_bad_field(kwargs, error, field):
    with pytest.raises(error, match=field):
        ClearingParams(**kwargs)


def test_clearing_is_off_by_default_and_a_group_is_checked():
    assert ContextSummarizerParams().clearing is None
    assert ClearingParams(exclude_tools=["crm"]).exclude_tools == ("crm",)
    with pytest.raises(TypeError, match="clearing must be a ClearingParams"):
        ContextSummarizerParams(clearing={"keep_latest": 3})  # type: ignore[arg-type]

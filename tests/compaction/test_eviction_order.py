"""Eviction under the ceiling steps over unresolved tool calls (fuzz finding F3).

Pure rules of ``plan.py``: ``evict_for_ceiling`` may evict whole units after an unresolved
one; the pending queue keeps the conversation's order through position keys
(``pending_places``), so ``with_pending`` rebuilds the logical conversation exactly.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer._compaction.eviction import (
    evict_for_ceiling,
    pending_places,
    split_pending,
    with_pending,
)
from pipecat_summarizer._compaction.plan import group_units, head_length
from pipecat_summarizer._text.tokens import EstimateTokenCounter

C = EstimateTokenCounter()


def _call(call_id: str) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }


def _result(call_id: str, done: bool) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok" if done else "IN_PROGRESS"}


def _tokens(messages) -> int:
    return sum(C.count_message(m) for m in messages)


def test_a_slow_tool_no_longer_blocks_eviction_of_later_turns():
    """Seed 327's shape: [system, call (IN_PROGRESS), #u2 (1.8k), #a1, #u3 (1.8k, current)].
    Before the fix nothing after the unresolved call could leave: 3,680 > 3,000."""
    system = {"role": "system", "content": "You are Vera."}
    call, placeholder = _call("call_1_0"), _result("call_1_0", done=False)
    u2 = {"role": "user", "content": "#u2 " + "document " * 800}
    a1 = {"role": "assistant", "content": "#a1 Sure."}
    u3 = {"role": "user", "content": "#u3 " + "document " * 800}
    messages = [system, call, placeholder, u2, a1, u3]
    remaining, evicted = evict_for_ceiling(messages, ceiling=3000, counter=C)
    assert evicted == [u2, a1]
    assert remaining == [system, call, placeholder, u3]
    assert _tokens(remaining) <= 3000
    places = pending_places(messages, evicted, None)
    assert with_pending(remaining, evicted, None, places) == messages


def test_pending_order_survives_a_second_eviction_before_the_call():
    """Once the call resolves, its unit (older than the pending messages) may leave too:
    the queue is kept in conversation order, not in eviction order."""
    system = {"role": "system", "content": "s"}
    call, result = _call("c1"), _result("c1", done=False)
    u2 = {"role": "user", "content": "u2 " + "x" * 4000}
    a2 = {"role": "assistant", "content": "a2"}
    u3 = {"role": "user", "content": "u3 " + "y" * 4000}
    messages = [system, call, result, u2, a2, u3]
    remaining, first = evict_for_ceiling(messages, ceiling=1200, counter=C)
    assert first == [u2, a2]
    places = pending_places(messages, first, None)
    result["content"] = "done"  # the result is written over its placeholder in place
    u4 = {"role": "user", "content": "u4 " + "z" * 4000}
    context = [*remaining, u4]
    logical = with_pending(context, first, None, places)
    assert logical == [system, call, result, u2, a2, u3, u4]
    remaining2, second = evict_for_ceiling(context, ceiling=1200, counter=C)
    assert second == [call, result, u3]
    queued = {id(m) for m in (*first, *second)}
    pending = [m for m in logical if id(m) in queued]
    assert pending == [call, result, u2, a2, u3]  # conversation order
    places2 = pending_places(logical, pending, None)
    assert with_pending(remaining2, pending, None, places2) == logical
    assert split_pending(logical, pending) == (remaining2, pending)


# -- properties ---------------------------------------------------------------------------


@st.composite
def conversations(draw):
    """A system head, then user turns, assistant replies and tool calls whose results are
    adjacent, one message later, final or still IN_PROGRESS, or missing."""
    messages: list = [{"role": "system", "content": "system prompt"}]
    n = draw(st.integers(1, 14))
    for k in range(n):
        size = draw(st.sampled_from((5, 50, 400, 2000)))
        messages.append({"role": "user", "content": f"u{k} " + "w" * size})
        kind = draw(st.sampled_from(("reply", "reply", "call", "late", "open", "none")))
        if kind == "reply":
            messages.append({"role": "assistant", "content": f"a{k} " + "r" * size})
        elif kind == "call":
            messages += [_call(f"c{k}"), _result(f"c{k}", True)]
        elif kind == "late":  # a message between the call and its result
            messages += [
                _call(f"c{k}"),
                {"role": "assistant", "content": f"a{k} meanwhile"},
                _result(f"c{k}", draw(st.booleans())),
            ]
        elif kind == "open":  # unresolved: IN_PROGRESS, or no result at all
            messages.append(_call(f"c{k}"))
            if draw(st.booleans()):
                messages.append(_result(f"c{k}", False))
    return messages


def _floor(messages) -> int:
    """Tokens eviction may never remove: the head, unresolved units, the current turn."""
    start = head_length(messages)
    last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    keep = set(range(start))
    for unit in group_units(messages, start):
        if unit.end > last_user or not unit.resolved:
            keep.update(range(unit.start, unit.end))
    return sum(C.count_message(messages[i]) for i in keep)


@settings(max_examples=300, deadline=None)
@given(conversations(), st.integers(100, 6000), st.floats(0.3, 1.0))
def test_eviction_properties(messages, ceiling, ratio):
    remaining, evicted = evict_for_ceiling(
        messages, ceiling=ceiling, counter=C, target=int(ceiling * ratio)
    )
    ids = [id(m) for m in messages]
    # a partition, each part in the conversation's order
    assert sorted(map(id, remaining + evicted)) == sorted(ids)
    for part in (remaining, evicted):
        positions = [ids.index(id(m)) for m in part]
        assert positions == sorted(positions)
    # never an orphan tool result, on either side
    for part in (remaining, evicted):
        calls = {c["id"] for m in part for c in m.get("tool_calls") or []}
        made = {c["id"] for m in messages for c in m.get("tool_calls") or []}
        for m in part:
            if m.get("role") == "tool" and m["tool_call_id"] in made:
                assert m["tool_call_id"] in calls, "a result separated from its call"
    # the head, the current user turn and unresolved calls stay
    last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    assert remaining[0] is messages[0]
    assert all(any(m is r for r in remaining) for m in messages[last_user:])
    for m in evicted:
        assert m.get("content") != "IN_PROGRESS"
    # under the ceiling whenever what must stay fits
    if _floor(messages) <= ceiling:
        assert _tokens(remaining) <= ceiling
    # the position keys give the conversation back exactly
    places = pending_places(messages, evicted, None)
    assert with_pending(remaining, evicted, None, places) == messages


@settings(max_examples=200, deadline=None)
@given(conversations(), conversations(), st.integers(100, 3000))
def test_repeated_evictions_keep_the_logical_order(first, later, ceiling):
    """Evict, let the conversation grow, evict again: the queue and the context rebuild the
    whole conversation in order, whatever stayed in between."""
    remaining, out = evict_for_ceiling(first, ceiling=ceiling, counter=C)
    pending = list(out)
    places = pending_places(first, pending, None)
    context = [*remaining, *later[1:]]  # the conversation goes on (without a second head)
    conversation = [*first, *later[1:]]
    logical = with_pending(context, pending, None, places)
    assert logical == conversation
    remaining2, out2 = evict_for_ceiling(context, ceiling=ceiling, counter=C)
    queued = {id(m) for m in (*pending, *out2)}
    pending2 = [m for m in logical if id(m) in queued]
    places2 = pending_places(logical, pending2, None)
    assert with_pending(remaining2, pending2, None, places2) == conversation

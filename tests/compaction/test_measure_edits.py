"""The meter follows our own one-message rewrites (the recalled block placed, replaced and
cleared each turn) without recounting the context, and always agrees with a full count."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer._compaction.measure import ContextMeter, is_placeholder, single_edit
from pipecat_summarizer._compaction.plan import SYSTEM_ROLES, make_protection
from pipecat_summarizer._text.tokens import CachedCounter, EstimateTokenCounter

COUNTER = CachedCounter(EstimateTokenCounter())


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def call(call_id: str) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }


def result(call_id: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


class Own:
    """Our own messages, protected by identity (as the session's recalled block and facts)."""

    def __init__(self, protect_injected_system: bool):
        self.messages: list[dict] = []
        self._head = make_protection(protect_injected_system=protect_injected_system)

    def __call__(self, i, m, ms) -> bool:
        return any(m is x for x in self.messages) or (
            isinstance(m, dict) and m.get("role") in SYSTEM_ROLES and self._head(i, m, ms)
        )


def latest_user(messages: list) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return None


def recall_turns(meter: ContextMeter, messages: list, own: Own, turns: int) -> None:
    """A call's turns as the session runs them with recall: the last block cleared, the
    turn appended and measured, this turn's block placed before the caller's words."""
    block = None
    for turn in range(turns):
        if block is not None:  # clear_recalled
            kept = [m for m in messages if m is not block]
            edit = single_edit(messages, kept, removed=block)
            messages[:] = kept
            meter.invalidate(edit)
            meter.measure(messages)
            own.messages.remove(block)
        messages.append(user(f"question {turn} about the booking"))
        meter.measure(messages)
        block = user(f"[recalled] snippet {turn}")
        own.messages.append(block)
        at = latest_user(messages)
        assert at is not None
        placed = [*messages[:at], block, *messages[at:]]
        edit = single_edit(messages, placed, inserted=block)
        messages[:] = placed
        meter.invalidate(edit)
        meter.measure(messages)
        messages.append(assistant(f"answer {turn}"))
        meter.measure(messages)


def test_placing_and_clearing_the_recalled_block_recounts_nothing():
    own = Own(protect_injected_system=True)
    meter = ContextMeter(COUNTER, own)
    messages: list = [{"role": "system", "content": "You are a travel agent."}]
    for k in range(200):
        messages += [user(f"user {k}"), assistant(f"reply {k}")]
    meter.measure(messages)
    assert meter.recounts == 1
    recall_turns(meter, messages, own, turns=30)
    # the first measurement only: 60 block writes, each followed message by message
    assert meter.recounts == 1
    assert meter.measure(messages) == ContextMeter(COUNTER, own).measure(messages)


def test_an_edit_that_does_not_check_out_is_recounted():
    own = Own(protect_injected_system=True)
    meter = ContextMeter(COUNTER, own)
    messages: list = [{"role": "system", "content": "s"}, user("a"), assistant("b"), user("c")]
    meter.measure(messages)
    block = user("[recalled] a")
    own.messages.append(block)
    placed = [*messages[:3], block, messages[3]]
    edit = single_edit(messages, placed, inserted=block)
    assert edit is not None
    # something else changed too (the message before the block was replaced): the edit is
    # not the whole rewrite, so the meter recounts rather than trust it
    placed[2] = assistant("a much longer answer that replaced the first one " * 4)
    messages[:] = placed
    meter.invalidate(edit)
    m = meter.measure(messages)
    assert meter.recounts == 2
    assert m == ContextMeter(COUNTER, own).measure(messages)


def test_single_edit_is_none_for_what_is_not_one_edit():
    a, b, c, d = user("a"), assistant("b"), user("c"), user("d")
    assert single_edit([a, b, c], [a, d, b, c]) is None  # told nothing
    assert single_edit([a, b, c], [a, b, c, d], inserted=d) is None  # at the end
    assert single_edit([a, b, c], [d, a, b, c], inserted=d) is None  # at the start
    assert single_edit([a, b, c], [a, d, c], inserted=d) is None  # a replacement, told an insert
    assert single_edit([a, b, c], [a, c], removed=d) is None  # not there
    assert single_edit([a, b, c, d], [a, c, b], removed=d) is None  # moved too
    edit = single_edit([a, b, c], [a, d, c], removed=b, inserted=d)
    assert edit is not None and (edit.at, edit.left, edit.right) == (1, a, c)


# -- the property: after any sequence, the meter's count equals a full recount -------------

OPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "append",  # the aggregators append (a user or assistant message)
                "append_system",  # an injected system message
                "placeholder",  # a tool call and its IN_PROGRESS result
                "fill",  # Pipecat writes a result over its placeholder, in place
                "place",  # our block, before the latest user message
                "replace_block",  # our block replaced in place
                "clear",  # our block taken out
                "insert",  # a known insert of a conversation message
                "remove",  # a known removal of any message
                "replace",  # a known replacement of any message
                "splice",  # a summary spliced in (a multi-message rewrite: invalidate())
                "invalidate",  # invalidate() with nothing changed
                "others_pop",  # someone else took a message out, untold
            ]
        ),
        st.integers(0, 10_000),
    ),
    max_size=45,
)


@settings(max_examples=300, deadline=None)
@given(ops=OPS, protect_injected_system=st.booleans(), head=st.integers(0, 2))
def test_the_meter_always_equals_a_full_recount(ops, protect_injected_system, head):
    own = Own(protect_injected_system)
    counter = CachedCounter(EstimateTokenCounter())
    meter = ContextMeter(counter, own)
    names = itertools.count()
    messages: list = [{"role": "system", "content": f"prompt {k}"} for k in range(head)]
    messages += [user("hello"), assistant("hi")]
    summary = None
    block = None
    meter.measure(messages, summary)

    def told(new: list, *, removed=None, inserted=None) -> None:
        edit = single_edit(messages, new, removed=removed, inserted=inserted)
        messages[:] = new
        meter.invalidate(edit)

    for op, r in ops:
        n = len(messages)
        untold, untold_open = None, False
        if op == "append":
            messages.append((user if r % 2 else assistant)(f"m{next(names)} " * (r % 7 + 1)))
        elif op == "append_system":
            messages.append({"role": "system", "content": f"note {next(names)}"})
        elif op == "placeholder":
            cid = f"c{next(names)}"
            messages += [call(cid), result(cid, "IN_PROGRESS")]
        elif op == "fill":
            waiting = [m for m in messages if is_placeholder(m)]
            if waiting:
                waiting[r % len(waiting)]["content"] = "done " * (r % 50)
        elif op == "place" and block is None:
            at = latest_user(messages)
            if at is not None:
                block = user(f"[recalled] {next(names)}")
                own.messages.append(block)
                told([*messages[:at], block, *messages[at:]], inserted=block)
        elif op == "replace_block" and block is not None:
            new_block = user(f"[recalled] {next(names)} " * (r % 5 + 1))
            own.messages.append(new_block)
            told(
                [new_block if m is block else m for m in messages],
                removed=block,
                inserted=new_block,
            )
            own.messages.remove(block)
            block = new_block
        elif op == "clear" and block is not None:
            told([m for m in messages if m is not block], removed=block)
            own.messages.remove(block)
            block = None
        elif op == "insert":
            at = r % (n + 1)
            new = (user if r % 2 else assistant)(f"inserted {next(names)}")
            told([*messages[:at], new, *messages[at:]], inserted=new)
        elif op in ("remove", "replace") and n:
            at = r % n
            gone = messages[at]
            if gone is summary or gone is block:
                continue
            if op == "remove":
                told([*messages[:at], *messages[at + 1 :]], removed=gone)
            else:
                new = (user if r % 2 else assistant)(f"replacing {next(names)} " * (r % 4 + 1))
                told([*messages[:at], new, *messages[at + 1 :]], removed=gone, inserted=new)
        elif op == "splice" and n > head + 2:
            end = head + 1 + r % (n - head - 1)
            summary = user(f"summary {next(names)}")
            kept = [m for m in messages[head:end] if m is block]
            messages[:] = [*messages[:head], summary, *kept, *messages[end:]]
            meter.invalidate()
        elif op == "invalidate":
            meter.invalidate()
        elif op == "others_pop" and n > 1:
            at = r % n
            if messages[at] is summary or messages[at] is block:
                continue
            untold_open = not own(at, messages[at], messages)
            untold = messages.pop(at)
        m = meter.measure(messages, summary)
        fresh = ContextMeter(CachedCounter(EstimateTokenCounter()), own).measure(messages, summary)
        assert m == fresh, op
        rewrite = meter.take_rewrite()
        if untold is None or not untold_open:
            assert rewrite is None, op  # our own rewrites are never taken for someone else's
        else:  # an untold removal of a conversation message is seen, by identity
            assert rewrite is not None and rewrite.removed == (untold,), op

"""The pure rules behind the processor, tested directly."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pipecat.processors.aggregators import async_tool_messages
from pipecat.processors.aggregators.llm_context import LLMSpecificMessage

from pipecat_summarizer._compaction.failures import StepFailures, chain_backlog
from pipecat_summarizer._compaction.measure import ContextMeter, content_fingerprint, is_placeholder
from pipecat_summarizer._compaction.plan import (
    blocked_reason,
    group_units,
    is_system_like,
    select,
)
from pipecat_summarizer._compaction.prompt import build_request
from pipecat_summarizer._text.tokens import (
    AUDIO_BYTES_PER_SECOND,
    AUDIO_TOKENS_PER_SECOND,
    IMAGE_TOKEN_ESTIMATE,
    CachedCounter,
    EstimateTokenCounter,
    TokenizerCounter,
    as_token_counter,
    media_tokens,
)

COUNTER = EstimateTokenCounter()


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def call(*ids: str) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
        ],
    }


def result(call_id: str, content: str = "ok") -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


# -- 1. parsing tool messages never raises --------------------------------------------------


@pytest.mark.parametrize("role", ["tool", "developer"])
def test_deeply_nested_json_is_an_ordinary_message(role):
    deep = '{"type": "async_tool", "rows": ' + "[" * 5000 + "]" * 5000 + "}"
    message = {"role": role, "content": deep, "tool_call_id": "x"}
    messages = [{"role": "system", "content": "s"}, user("u"), call("x"), message, user("v")]
    units = group_units(messages, 1)  # raised RecursionError inside Pipecat's parser before
    assert units and units[-1].end == len(messages)
    assert is_system_like(message) == (role == "developer")


def test_tool_message_without_tool_call_id_resolves_nothing_and_breaks_nothing():
    messages = [user("a"), call("c1"), {"role": "tool", "content": "no id"}, user("b")]
    units = group_units(messages)
    assert not units[1].resolved  # the call still waits for its own result
    weird = [user("a"), {"role": "assistant", "tool_calls": [{"id": 7}, "x"]}, result("7")]
    assert group_units(weird)  # non-string ids and non-dict calls are ignored, not fatal


@pytest.mark.parametrize("users_after, resolved", [(0, False), (2, False), (3, True), (5, True)])
def test_an_unresolved_call_is_given_up_after_stale_after_user_turns(users_after, resolved):
    messages = [user("q"), call("c1"), result("c1", "IN_PROGRESS")]
    for i in range(users_after):
        messages += [user(f"u{i}"), assistant("a")]
    units = group_units(messages, stale_after=3)
    assert units[1].resolved is resolved
    assert not group_units(messages, stale_after=None)[1].resolved


# -- 2. compaction never stalls ----------------------------------------------------------------


def test_an_oversized_unit_after_the_previous_summary_is_sent_shortened():
    summary = user("Conversation summary: earlier")
    big = result("b1", "x" * 40_000)
    messages = [
        {"role": "system", "content": "s"},
        summary,
        call("b1"),
        big,
        *[m for i in range(6) for m in (user(f"u{i}"), assistant("a"))],
    ]
    plan = select(
        messages,
        keep=4,
        counter=COUNTER,
        summary_message=summary,
        previous_summary_tokens=50,
        input_budget=2000,
    )
    assert plan is not None and big in plan.summarized
    assert id(big) in plan.shortened
    assert plan.input_tokens <= 2000


def test_an_oversized_unit_behind_small_ones_is_reached_within_a_few_rounds():
    small = [m for i in range(8) for m in (user("s" * 400), assistant("t" * 400))]
    big = result("b1", "x" * 40_000)
    messages = [{"role": "system", "content": "s"}, *small, call("b1"), big, user("now")]
    messages += [assistant("a"), user("last")]
    summary = None
    for _ in range(6):  # each round makes progress until the big unit goes, shortened
        plan = select(messages, keep=2, counter=COUNTER, summary_message=summary, input_budget=1000)
        assert plan is not None and plan.input_tokens <= 1000
        if big in plan.summarized:
            assert id(big) in plan.shortened
            break
        summary = user("summary")
        messages = [messages[0], summary, *messages[1 + len(plan.replaced) :]]
    else:
        pytest.fail("the oversized unit was never summarized")


sizes = st.lists(
    st.tuples(st.sampled_from(["u", "a", "call", "big"]), st.integers(1, 3000)),
    min_size=1,
    max_size=25,
)


def _conversation(spec) -> list:
    messages: list = [{"role": "system", "content": "s"}]
    for n, (kind, size) in enumerate(spec):
        if kind == "u":
            messages.append(user("u" * size))
        elif kind == "a":
            messages.append(assistant("a" * size))
        elif kind == "call":
            messages += [call(f"c{n}"), result(f"c{n}", "r" * size)]
        else:
            messages.append(user("B" * size * 20))
    return messages


@settings(max_examples=200, deadline=None)
@given(spec=sizes, keep=st.integers(1, 4), budget=st.integers(100, 4000))
def test_select_always_progresses_and_respects_the_budget(spec, keep, budget):
    messages = _conversation(spec)
    plan = select(messages, keep=keep, counter=COUNTER, input_budget=budget)
    units = group_units(messages, 1)
    movable = bool(units) and units[0].end <= len(messages) - keep  # a whole unit fits
    if movable:
        assert plan is not None, blocked_reason(messages, keep=keep)
        assert plan.summarized
    if plan is not None:
        assert plan.input_tokens <= budget


def test_blocked_reason_names_the_cause():
    head = [{"role": "system", "content": "s"}]
    stuck = [*head, call("c"), result("c", "IN_PROGRESS"), user("a"), assistant("b")]
    assert blocked_reason(stuck, keep=1) == "unresolved tool call"
    assert blocked_reason([*head, user("a")], keep=2) == "only the kept recent messages"
    injected = [*head, user("a"), {"role": "system", "content": "x"}, user("b")]
    assert select(injected[:3] + [user("c")], keep=1, counter=COUNTER) is not None
    assert blocked_reason([*head, user("a")], keep=0) in (
        "only protected messages",
        "only the kept recent messages",
    )


# -- 3. counting and service-specific messages ---------------------------------------------------


def _audio(raw_bytes: int) -> dict:
    data = base64.b64encode(b"\x00" * raw_bytes).decode()
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": "Audio follows"},
            {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}},
        ],
    }


def test_a_megabyte_of_audio_counts_by_its_duration():
    message = _audio(750_000)  # 1 MB of base64, ~23 s of 16 kHz 16-bit mono
    expected = 750_000 * AUDIO_TOKENS_PER_SECOND // AUDIO_BYTES_PER_SECOND
    assert media_tokens(message) == expected
    assert COUNTER.count_message(message) >= expected > 500  # Pipecat's estimate: 10
    assert TokenizerCounter(lambda s: len(s.split())).count_message(message) >= expected


def test_files_images_and_unknown_parts_are_counted():
    pdf = base64.b64encode(b"%" * 80_000).decode()
    parts = [
        {"type": "file_base64", "file": {"file_data": f"data:application/pdf;base64,{pdf}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        {"type": "file_url", "file": {"url": "https://example.com/a.pdf"}},
        {"type": "video", "video": {"blob": "v" * 4000}},
    ]
    tokens = [media_tokens({"role": "user", "content": [p]}) for p in parts]
    assert tokens[0] == 80_000 // 8
    assert tokens[1] == IMAGE_TOKEN_ESTIMATE
    assert tokens[2] == IMAGE_TOKEN_ESTIMATE  # size unknown: like an image
    assert tokens[3] >= 1000


@given(a=st.integers(0, 200_000), b=st.integers(0, 200_000))
def test_audio_tokens_grow_with_the_data(a, b):
    small, large = sorted((a, b))
    assert media_tokens(_audio(small)) <= media_tokens(_audio(large))


def test_llm_specific_messages_are_summarized_with_their_text():
    special = LLMSpecificMessage(
        llm="anthropic", message={"type": "thought", "text": "account 777-888-999"}
    )
    messages = [{"role": "system", "content": "s"}, user("a"), special, assistant("b")]
    messages += [user("c"), assistant("d"), user("e")]
    plan = select(messages, keep=1, counter=COUNTER)
    assert plan is not None and special in plan.summarized  # not spliced out unseen
    request = build_request(plan.summarized, previous_summary=None, max_tokens=100)
    assert "777-888-999" in request.user_message
    assert COUNTER.count_message(special) > 5  # its text is counted, not just overhead


def test_token_counter_coercion():
    class Encoding:
        def encode(self, text):
            return text.split()

    wrapped = as_token_counter(Encoding())
    assert isinstance(wrapped, TokenizerCounter)
    assert wrapped.count_message(user("a b c")) == 3 + 4
    assert as_token_counter(COUNTER) is COUNTER
    for bad in (len, object(), "cl100k_base", 3):
        with pytest.raises(TypeError, match="token_counter"):
            as_token_counter(bad)


# -- 7. the meter sees every change ---------------------------------------------------------------


def _protected(i, m, ms):
    return isinstance(m, dict) and m.get("role") == "system"


ops = st.lists(
    st.tuples(
        st.sampled_from(["append", "placeholder", "async", "fill", "replace", "pop"]),
        st.integers(0, 400),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(ops=ops)
def test_the_meter_always_agrees_with_a_full_count(ops):
    messages: list = [{"role": "system", "content": "s"}]
    meter = ContextMeter(COUNTER, _protected)
    for n, (op, size) in enumerate(ops):
        if op == "append":
            messages.append(user("x" * size))
        elif op == "placeholder":
            messages += [call(f"c{n}"), result(f"c{n}", "IN_PROGRESS")]
        elif op == "async":
            messages += [call(f"c{n}"), async_tool_messages.build_started_message(f"c{n}")]
        elif op == "fill":  # Pipecat writes a result over its placeholder, in place, once
            waiting = [m for m in messages if is_placeholder(m)]
            if waiting:
                waiting[size % len(waiting)]["content"] = "y" * size
        elif op == "replace":
            messages[:] = [messages[0], user("new " * (size // 4))]
        elif op == "pop" and len(messages) > 1:
            messages.pop(size % (len(messages) - 1) + 1)
        m = meter.measure(messages)
        assert m.total_tokens == sum(COUNTER.count_message(x) for x in messages)
        assert m.message_count == len(messages)


def test_a_result_written_over_a_mid_list_placeholder_is_counted():
    placeholder = result("c1", "IN_PROGRESS")
    messages = [{"role": "system", "content": "s"}, user("q"), call("c1"), placeholder, user("r")]
    meter = ContextMeter(COUNTER, _protected)
    before = meter.measure(messages).total_tokens
    placeholder["content"] = "R" * 8000
    messages.append(user("and now?"))
    after = meter.measure(messages).total_tokens
    assert after - before >= 2000


def test_the_meter_tells_a_replaced_context_from_an_edited_one():
    system = {"role": "system", "content": "s"}
    messages = [system, user("a"), assistant("b"), user("c")]
    meter = ContextMeter(CachedCounter(COUNTER), _protected)
    meter.measure(messages)
    last = messages.pop()  # an edit: the conversation's start survives
    meter.measure(messages)
    edit = meter.take_rewrite()
    assert edit is not None and edit.removed == (last,) and not edit.replaced
    kept = messages[-1]
    messages[:] = [system, user("a brand new conversation")]
    meter.measure(messages)
    rewrite = meter.take_rewrite()
    assert rewrite is not None and rewrite.replaced and rewrite.removed[-1] is kept
    assert meter.take_rewrite() is None  # reported once
    meter.invalidate()  # our own rewrite is never reported
    messages[:] = [system, user("spliced")]
    meter.measure(messages)
    assert meter.take_rewrite() is None


def test_content_fingerprint_follows_content_not_objects_or_count():
    a = [{"role": "system", "content": "s"}, user("x" * 100)]
    b = [{"role": "system", "content": "s"}, user("y" * 100)]
    copy = [dict(m) for m in a]
    assert content_fingerprint(a) == content_fingerprint(copy)
    assert content_fingerprint(a) != content_fingerprint(b)
    assert content_fingerprint([user("a"), user("b")]) != content_fingerprint([user("ab")])


# -- policy ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pending, last_failed, ready, chain",
    [
        (True, False, True, True),
        (True, True, True, False),  # retry_backoff_s=0: wait for a user turn
        (True, False, False, False),
        (False, False, True, False),
    ],
)
def test_the_backlog_chains_only_after_a_success(pending, last_failed, ready, chain):
    assert chain_backlog(pending=pending, last_failed=last_failed, ready=ready) is chain


def test_step_failures_disable_once_after_a_streak_of_the_same_step():
    f = StepFailures(limit=3)
    assert not f.failed("counting") and not f.failed("planning")  # different steps
    assert not f.failed("planning")
    f.succeeded()
    assert not f.failed("planning") and not f.failed("planning")
    assert f.failed("planning") and f.disabled
    assert not f.failed("planning")  # reported once

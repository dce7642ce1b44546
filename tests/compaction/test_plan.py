"""Selection and splice rules, tested directly on plain message lists."""

import itertools
import random

import pytest

from pipecat_summarizer._compaction.plan import (
    group_units,
    head_length,
    is_system_like,
    select,
    splice,
)
from pipecat_summarizer._text.tokens import EstimateTokenCounter

C = EstimateTokenCounter()


def u(text="hello"):
    return {"role": "user", "content": text}


def a(text="hi"):
    return {"role": "assistant", "content": text}


def call(*ids):
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
        ],
    }


def result(i, content="done"):
    return {"role": "tool", "tool_call_id": i, "content": content}


def sys(text="rules"):
    return {"role": "system", "content": text}


def dev(text="dev rules"):
    return {"role": "developer", "content": text}


def chat(n):
    out = []
    for k in range(n):
        out += [u(f"question {k}"), a(f"answer {k}")]
    return out


def test_head_covers_leading_system_and_developer():
    assert head_length([sys(), dev(), u(), sys()]) == 2
    assert head_length([u(), sys()]) == 0


def test_units_keep_call_and_all_results_together_even_when_apart():
    msgs = [u(), call("x", "y"), result("x"), u("meanwhile"), result("y"), a(), u()]
    units = group_units(msgs)
    assert [(x.start, x.end) for x in units] == [(0, 1), (1, 5), (5, 6), (6, 7)]
    assert all(x.resolved for x in units)


def test_units_mark_missing_and_in_progress_results_unresolved():
    assert not group_units([call("x")])[0].resolved
    assert not group_units([call("x"), result("x", "IN_PROGRESS")])[0].resolved
    assert not group_units([call("x", "y"), result("x")])[0].resolved


def test_async_tool_calls_stay_unresolved_until_pipecat_says_finished():
    from pipecat.processors.aggregators.async_tool_messages import (
        build_final_result_message,
        build_intermediate_result_message,
        build_started_message,
    )

    started = build_started_message("x")
    running = [call("x"), started, u("meanwhile"), a("still working")]
    assert not group_units(running)[0].resolved
    progress = build_intermediate_result_message("x", '"half done"')
    assert not group_units([*running, progress])[0].resolved
    finished = [*running, progress, build_final_result_message("x", '"done"')]
    units = group_units(finished)
    assert len(units) == 1 and units[0].resolved and units[0].end == len(finished)
    # a running call is never summarized, nor anything after it
    msgs = [u("q"), a("r"), *running, u("q2"), a("r2"), u("q3")]
    plan = select(msgs, keep=1, counter=C)
    assert plan is not None and plan.replaced == msgs[:2]
    assert started not in plan.summarized
    # the async status messages are not mistaken for injected system prompts
    assert not is_system_like(progress)


def test_orphan_tool_result_joins_previous_unit():
    units = group_units([u(), result("ghost"), a()])
    assert [(x.start, x.end) for x in units] == [(0, 2), (2, 3)]


def test_select_keeps_system_and_tail():
    msgs = [sys(), *chat(10)]
    plan = select(msgs, keep=4, counter=C)
    assert plan is not None
    assert plan.replaced[0] is msgs[1]
    kept = msgs[1 + len(plan.replaced) :]
    assert len(kept) == 4 and kept[0]["role"] == "user"
    assert msgs[0] not in plan.summarized


@pytest.mark.parametrize("keep", [1, 3, 5])
def test_the_kept_tail_is_exactly_keep_messages_even_when_it_starts_on_an_answer(keep):
    """The tail was moved back to start on a user message, one message more on
    every request until the next summary; Pipecat keeps the last ``keep`` (whole units)."""
    msgs = [sys(), *chat(10)]
    plan = select(msgs, keep=keep, counter=C)
    assert plan is not None
    kept = msgs[1 + len(plan.replaced) :]
    assert len(kept) == keep and kept[0]["role"] == "assistant"


def test_a_tool_unit_is_the_only_reason_to_keep_more():
    msgs = [sys(), *chat(3), u("look it up"), call("x"), result("x"), a("found it"), u("thanks")]
    # the last three would start on the tool result: the call comes with it, nothing more
    plan = select(msgs, keep=3, counter=C)
    assert plan is not None
    assert msgs[1 + len(plan.replaced) :] == msgs[-4:]


def test_select_nothing_when_keep_covers_everything():
    assert select([sys(), *chat(2)], keep=4, counter=C) is None
    assert select([sys(), dev()], keep=0, counter=C) is None


def test_select_stops_before_unresolved_call():
    msgs = [u("a"), a("b"), u("c"), call("x"), u("d"), a("e"), u("f"), a("g"), u("h"), a("i")]
    plan = select(msgs, keep=2, counter=C)
    # the call is unresolved: nothing from it on (the cut stops right before it, as Pipecat's)
    assert plan is not None and plan.replaced == msgs[:3]


def test_tail_never_starts_with_tool_result():
    msgs = [u(), a(), u(), call("x"), result("x"), result("x2"), a(), u(), a()]
    for keep in range(len(msgs)):
        plan = select(msgs, keep=keep, counter=C)
        if plan:
            tail = msgs[len(plan.replaced) :]
            assert not tail or tail[0]["role"] != "tool"
            assert len(tail) >= keep


def test_injected_system_messages_are_lifted_not_summarized():
    injected = sys("new instructions mid-call")
    msgs = [sys(), u("q1"), a("a1"), injected, u("q2"), a("a2"), u("q3"), a("a3"), u("q4")]
    plan = select(msgs, keep=2, counter=C)
    assert injected in plan.lifted and injected not in plan.summarized
    new = splice(msgs, plan, u("SUMMARY"))
    assert new[0] is msgs[0] and new[1]["content"] == "SUMMARY" and new[2] is injected
    plan2 = select(msgs, keep=2, counter=C, protect_injected_system=False)
    assert injected in plan2.summarized


def test_previous_summary_is_replaced_not_sent_as_transcript():
    summary = u("Conversation summary: old")
    msgs = [sys(), summary, *chat(6)]
    plan = select(msgs, keep=2, counter=C, summary_message=summary)
    assert plan.replaced[0] is summary and summary not in plan.summarized


def test_budget_takes_whole_units_oldest_first_and_defers_the_rest():
    msgs = [sys(), *[m for k in range(20) for m in (u("x" * 400), a("y" * 400))]]
    plan = select(msgs, keep=2, counter=C, input_budget=1000)
    assert plan is not None
    assert plan.input_tokens <= 1000
    assert plan.deferred > 0
    assert plan.replaced == msgs[1 : 1 + len(plan.replaced)]
    unbounded = select(msgs, keep=2, counter=C, input_budget=None)
    assert len(unbounded.summarized) > len(plan.summarized)


def test_oversized_first_unit_is_sent_shortened():
    big = u("z" * 40_000)
    msgs = [sys(), big, a("ok"), *chat(5)]
    plan = select(msgs, keep=2, counter=C, input_budget=500)
    assert plan is not None and plan.summarized[0] is big
    assert id(big) in plan.shortened
    assert plan.input_tokens <= 500


def test_previous_summary_counts_against_budget():
    msgs = [sys(), *[m for k in range(10) for m in (u("x" * 400), a("y" * 400))]]
    small = select(msgs, keep=2, counter=C, input_budget=1500, previous_summary_tokens=1000)
    large = select(msgs, keep=2, counter=C, input_budget=1500)
    assert len(small.summarized) < len(large.summarized)


def test_splice_keeps_messages_appended_meanwhile_in_order():
    msgs = [sys(), *chat(6)]
    plan = select(msgs, keep=2, counter=C)
    later = [u("late 1"), a("late 2")]
    now = msgs + later
    summary = u("S")
    new = splice(now, plan, summary)
    assert new[:2] == [msgs[0], summary]
    assert new[2:] == now[1 + len(plan.replaced) :]
    assert new[-2:] == later


def test_splice_refuses_when_range_changed():
    msgs = [sys(), *chat(6)]
    plan = select(msgs, keep=2, counter=C)
    replaced = [sys(), *[dict(m) for m in msgs[1:]]]  # equal content, other objects
    assert splice(replaced, plan, u("S")) is None
    dropped = [m for m in msgs if m is not plan.replaced[1]]
    assert splice(dropped, plan, u("S")) is None
    assert splice([], plan, u("S")) is None


def test_splice_tolerates_messages_inserted_before_the_range():
    msgs = [sys(), *chat(6)]
    plan = select(msgs, keep=2, counter=C)
    pinned = sys("pinned facts")
    new = splice([msgs[0], pinned, *msgs[1:]], plan, u("S"))
    assert new[:3] == [msgs[0], pinned, new[2]] and new[2]["content"] == "S"


def _random_conversation(rng: random.Random) -> list:
    msgs = [sys()] if rng.random() < 0.7 else []
    open_calls: list[str] = []
    for k in range(rng.randint(0, 30)):
        r = rng.random()
        if r < 0.35:
            msgs.append(u(f"u{k}"))
        elif r < 0.6:
            msgs.append(a(f"a{k}"))
        elif r < 0.75:
            ids = [f"c{k}_{j}" for j in range(rng.randint(1, 3))]
            msgs.append(call(*ids))
            open_calls += ids
        elif r < 0.9 and open_calls:
            msgs.append(result(open_calls.pop(rng.randrange(len(open_calls)))))
        elif r < 0.95:
            msgs.append(sys(f"injected {k}"))
        else:
            msgs.append(result(f"c{k}_x", "IN_PROGRESS"))
    return msgs


@pytest.mark.parametrize("seed", range(300))
def test_selection_invariants_on_random_conversations(seed):
    rng = random.Random(seed)
    msgs = _random_conversation(rng)
    keep = rng.randint(0, 6)
    budget = rng.choice([None, 100, 300, 2000])
    plan = select(msgs, keep=keep, counter=C, input_budget=budget)
    if plan is None:
        return
    start = head_length(msgs)
    n = len(plan.replaced)
    assert plan.replaced == msgs[start : start + n]
    tail = msgs[start + n :]
    assert len(tail) >= keep
    assert not tail or tail[0]["role"] != "tool"
    # no call is separated from its results
    summarized_calls = {
        c["id"] for m in plan.summarized if m.get("tool_calls") for c in m["tool_calls"]
    }
    tail_results = {m.get("tool_call_id") for m in tail if m.get("role") == "tool"}
    assert not summarized_calls & tail_results
    # every summarized call has a final result inside the range
    done = {
        m["tool_call_id"]
        for m in plan.summarized
        if m.get("role") == "tool" and m["content"] != "IN_PROGRESS"
    }
    assert summarized_calls <= done
    assert all(m.get("role") != "system" for m in plan.summarized)
    new = splice(msgs, plan, u("S"))
    # nothing lost: every message is kept or summarized
    kept_ids = {id(m) for m in new}
    for m in msgs:
        assert id(m) in kept_ids or any(m is s for s in plan.summarized)
    assert list(itertools.chain(msgs[:start])) == new[:start]

"""The replay in simulated real time: the clock, the call model, and what it shows."""

import asyncio
import json
import threading

import pytest

from pipecat_summarizer_cli.replay import clock
from pipecat_summarizer_cli.replay.report import Prices, build_report
from pipecat_summarizer_cli.replay.runner import Backend, Thresholds, run_all
from pipecat_summarizer_cli.replay.timing import (
    CallModel,
    Span,
    TurnTiming,
    next_turn_start,
    plan_call,
)
from pipecat_summarizer_cli.replay.transcript import (
    TranscriptError,
    load_transcript,
    transcript_from_messages,
)
from tests.support.replay_fakes import StandInLLM, StandInSummarizer, conversation

# -- the simulated clock ----------------------------------------------------------------------


def test_timers_fire_in_deadline_order_on_the_simulated_clock():
    fired: list[tuple[str, float]] = []

    async def after(name: str, seconds: float) -> None:
        await asyncio.sleep(seconds)
        fired.append((name, clock.now()))

    async def main() -> float:
        start = clock.now()
        await asyncio.gather(after("c", 3600.0), after("a", 0.5), after("b", 90.0))
        return clock.now() - start

    elapsed = clock.run(main())
    assert [name for name, _ in fired] == ["a", "b", "c"]
    assert [t for _, t in fired] == [0.5, 90.0, 3600.0]  # each at its own instant
    assert elapsed == 3600.0


def test_the_clock_stands_still_while_real_work_is_awaited():
    """A reply from outside the loop (a thread, a socket) must land before a later timer:
    without the hold, the idle loop would jump straight to the timer."""

    async def main(hold: bool) -> list[str]:
        order: list[str] = []
        loop = asyncio.get_running_loop()
        reply = loop.create_future()
        threading.Timer(0.05, lambda: loop.call_soon_threadsafe(reply.set_result, "reply")).start()

        async def timer() -> None:
            await asyncio.sleep(1.0)
            order.append("timer")

        task = asyncio.create_task(timer())
        if hold:
            with clock.real_time():
                order.append(await reply)
        else:
            order.append(await reply)
        await task
        return order

    assert clock.run(main(hold=True)) == ["reply", "timer"]
    assert clock.run(main(hold=False)) == ["timer", "reply"]


# -- the call model (pure) --------------------------------------------------------------------


def test_span_parsing_and_validation():
    assert Span.parse("0.5-3") == Span(0.5, 3.0)
    assert Span.parse("2") == Span(2.0, 2.0)
    for bad in ("3-1", "a-b", "1-2-3", "-1"):
        with pytest.raises(ValueError):
            Span.parse(bad)
    with pytest.raises(ValueError, match="barge_in_share"):
        CallModel(barge_in_share=1.5)


def test_the_plan_is_seeded_and_follows_the_words_said():
    transcript = transcript_from_messages(conversation(40))
    plan = plan_call(transcript, CallModel(seed=3))
    assert plan == plan_call(transcript, CallModel(seed=3))  # every strategy, same call
    assert plan != plan_call(transcript, CallModel(seed=4))
    # "Question k? " * 20 is 40 words: 16 s at 2.5 words/s; "Answer k. " * 30 is 24 s
    assert {t.user_speech_s for t in plan[1:]} == {16.0}
    assert {t.bot_speech_s for t in plan} == {24.0}
    assert all(0.8 <= t.response_s[0] <= 1.6 for t in plan)
    # the answer streams: 60 words, about 80 tokens, at 100 tokens/s
    assert {t.generation_s for t in plan} == {(0.8,)}
    assert {
        t.generation_s for t in plan_call(transcript, CallModel(answer_tokens_per_second=0))
    } == {(0.0,)}
    never = plan_call(transcript, CallModel(barge_in_share=0.0))
    always = plan_call(transcript, CallModel(barge_in_share=1.0))
    assert all(t.barge_in_after is None for t in never)
    assert all(0.2 <= t.barge_in_after <= 0.7 for t in always)


def test_next_turn_start_barge_in_pause_and_timestamps():
    calm = TurnTiming(5.0, (1.0,), bot_speech_s=10.0, pause_s=1.5)
    assert next_turn_start(calm, 100.0, None) == (111.5, False)
    barge = TurnTiming(5.0, (1.0,), bot_speech_s=10.0, pause_s=1.5, barge_in_after=0.3)
    assert next_turn_start(barge, 100.0, None) == (103.0, True)
    # with timestamps the recorded start wins, never before the bot answered
    recorded = TurnTiming(5.0, (1.0,), 4.0, 1.0, starts_at_s=104.0)
    assert next_turn_start(calm, 100.0, recorded) == (104.0, True)
    late = TurnTiming(5.0, (1.0,), 4.0, 1.0, starts_at_s=130.0)
    assert next_turn_start(calm, 100.0, late) == (130.0, False)
    early = TurnTiming(5.0, (1.0,), 4.0, 1.0, starts_at_s=50.0)
    assert next_turn_start(calm, 100.0, early) == (100.0, True)


def test_timestamps_set_the_turn_starts_and_never_reach_the_llm(tmp_path):
    lines = [
        {"role": "system", "content": "S", "timestamp": 0},
        {"role": "user", "content": "one", "timestamp": "2026-01-01T10:00:00Z"},
        {"role": "assistant", "content": "One.", "timestamp": "2026-01-01T10:00:03Z"},
        {"role": "user", "content": "two", "timestamp": "2026-01-01T10:00:42Z"},
        {"role": "assistant", "content": "Two."},
    ]
    path = tmp_path / "call.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in lines))
    t = load_transcript(path)
    assert [turn.started_at - t.turns[0].started_at for turn in t.turns] == [0.0, 42.0]
    assert all("timestamp" not in m for m in t.messages + t.preamble)
    assert all("timestamp" not in m for turn in t.turns for m in turn.inputs + turn.responses)
    plan = plan_call(t, CallModel())
    assert [p.starts_at_s for p in plan] == [0.0, 42.0]

    lines[3]["timestamp"] = "2026-01-01T09:59:00Z"
    path.write_text("\n".join(json.dumps(m) for m in lines))
    with pytest.raises(TranscriptError, match=r"call.jsonl:4: timestamp goes backwards"):
        load_transcript(path)
    lines[3]["timestamp"] = "yesterday"
    path.write_text("\n".join(json.dumps(m) for m in lines))
    with pytest.raises(TranscriptError, match=r":4: timestamp 'yesterday' is not an ISO 8601"):
        load_transcript(path)


# -- what the real-time replay shows ----------------------------------------------------------


SLOW = CallModel(summary_latency_s=Span(60.0, 60.0), summary_tokens_per_second=0.0)


async def _slow_replay():
    transcript = transcript_from_messages(conversation(24), name="slow")
    results = await run_all(
        transcript,
        backend=Backend("stand-in", StandInSummarizer, StandInLLM),
        thresholds=Thresholds(max_context_tokens=None, max_unsummarized_messages=6, keep=2),
        model=SLOW,
    )
    return build_report(results, turns=24, prices=Prices(), probes=["vegetarian"])


async def test_a_summary_slower_than_a_turn_is_discarded_by_the_builtin_not_by_ours():
    report = await _slow_replay()
    builtin = report["strategies"]["pipecat_builtin"]
    ours = report["strategies"]["pipecat_summarizer"]
    full = report["strategies"]["full_buffer"]
    # A turn takes ~43 s here: each user turn's interruption frees the built-in to ask
    # again at the next response, and the answer to the earlier request is then stale.
    assert builtin["summaries_discarded"] >= 3
    assert builtin["summaries_requested"] > builtin["summaries_applied"]
    assert (
        builtin["summaries_requested"]
        == builtin["summaries_applied"]
        + builtin["summaries_discarded"]
        + builtin["summaries_unfinished"]
        + builtin["summary_failures"]
    )
    # Ours never discards for that: every request it makes is applied.
    assert ours["summaries_discarded"] == 0 and ours["summary_failures"] == 0
    assert ours["summaries_requested"] == ours["summaries_applied"] >= 3
    assert ours["input_tokens"] < builtin["input_tokens"] <= full["input_tokens"]
    assert builtin["barge_ins"] == ours["barge_ins"]  # the same call for both
    assert builtin["call_seconds"] == ours["call_seconds"] > 20 * 40


async def test_the_real_time_replay_is_deterministic():
    first, second = await _slow_replay(), await _slow_replay()
    keys = ("input_tokens", "summaries_requested", "summaries_applied", "summaries_discarded")
    for name in first["strategies"]:
        a, b = first["strategies"][name], second["strategies"][name]
        assert [a[k] for k in keys] == [b[k] for k in keys], name


def test_a_scaled_model_is_the_same_call_faster():
    transcript = transcript_from_messages(conversation(6))
    model = CallModel(seed=5)
    fast = model.scaled(0.1)
    for slow_turn, fast_turn in zip(
        plan_call(transcript, model), plan_call(transcript, fast), strict=True
    ):
        assert fast_turn.user_speech_s == pytest.approx(slow_turn.user_speech_s * 0.1)
        assert fast_turn.bot_speech_s == pytest.approx(slow_turn.bot_speech_s * 0.1)
        assert fast_turn.pause_s == pytest.approx(slow_turn.pause_s * 0.1)
        assert fast_turn.response_s == pytest.approx([s * 0.1 for s in slow_turn.response_s])
        assert fast_turn.generation_s == pytest.approx([s * 0.1 for s in slow_turn.generation_s])
        assert fast_turn.barge_in_after == slow_turn.barge_in_after  # a fraction: unchanged
    slow_latency, fast_latency = model.summary_latency(), fast.summary_latency()
    assert fast_latency(1000) == pytest.approx(slow_latency(1000) * 0.1)


async def test_a_wall_time_replay_needs_a_call_model():
    with pytest.raises(ValueError, match="needs a call model"):
        await run_all(transcript_from_messages(conversation(2)), simulated=False)


def _after_first_summary(result) -> int:
    """Messages in the first request after the first applied summary (the count dropped)."""
    sizes = [len(r.messages) for r in result.requests]
    return next(b for a, b in zip(sizes, sizes[1:], strict=False) if b < a)


@pytest.mark.parametrize("rate", [100.0, 0.0])
async def test_the_builtin_selects_before_the_streamed_answer_lands(rate):
    """In a live call the answer streams and Pipecat's assistant aggregator adds it at the
    response's end; the built-in selects its messages as the response starts, so it keeps
    ``keep`` plus that answer. Sent in one piece (rate 0), the answer lands first and the
    built-in keeps only ``keep``: the order of events would not be a live call's."""
    transcript = transcript_from_messages(conversation(12), name="stream")
    results = await run_all(
        transcript,
        backend=Backend("stand-in", StandInSummarizer, StandInLLM),
        thresholds=Thresholds(max_context_tokens=None, max_unsummarized_messages=6, keep=2),
        model=CallModel(
            summary_latency_s=Span(0.1, 0.1), barge_in_share=0.0, answer_tokens_per_second=rate
        ),
        strategies=("pipecat_builtin", "pipecat_summarizer"),
    )
    by_name = {r.strategy: r for r in results}
    kept_answer = 1 if rate else 0
    # system, summary, the kept messages (and the answer), the next user message
    assert _after_first_summary(by_name["pipecat_builtin"]) == 1 + 1 + 2 + kept_answer + 1
    # ours counts the answer among the kept messages either way
    assert _after_first_summary(by_name["pipecat_summarizer"]) == 1 + 1 + 2 + 1


async def test_the_bot_speaks_from_the_first_word_while_the_answer_streams():
    """Streaming moves when the answer reaches the context, not when the bot speaks: the
    call lasts as long at any generation rate (the next turn is timed from the first word)."""
    transcript = transcript_from_messages(conversation(12), name="speech")
    lengths = []
    for rate in (100.0, 0.0):
        model = CallModel(barge_in_share=0.0, answer_tokens_per_second=rate)
        assert any(sum(t.generation_s) for t in plan_call(transcript, model)) == bool(rate)
        (result,) = await run_all(transcript, model=model, strategies=("full_buffer",))
        lengths.append(result.extra["call_seconds"])
    assert lengths[0] == pytest.approx(lengths[1])

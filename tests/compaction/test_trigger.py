"""The one trigger (issue 9): every gate deciding when an automatic compaction starts,
tested without a pipeline or a clock."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pipecat.utils.context.llm_context_summarization import (
    LLMAutoContextSummarizationConfig,
    LLMContextSummaryConfig,
)

from pipecat_summarizer._compaction.measure import Measurement
from pipecat_summarizer._compaction.trigger import CompactionTrigger
from pipecat_summarizer.params import RetryParams, TriggerParams


def config(tokens=8000, messages=20, keep=4, target=6000):
    return LLMAutoContextSummarizationConfig(
        max_context_tokens=tokens,
        max_unsummarized_messages=messages,
        summary_config=LLMContextSummaryConfig(
            min_messages_after_summary=keep, target_context_tokens=target
        ),
    )


def m(reducible=0, since=0, count=10) -> Measurement:
    return Measurement(reducible + 100, reducible, since, count)


def due(t: CompactionTrigger, meas: Measurement, now=0.0, in_flight=False, pending=False):
    return t.due(meas, now=now, in_flight=in_flight, pending=pending)


def test_thresholds_with_the_soft_ratio():
    t = CompactionTrigger(config(), TriggerParams(soft_ratio=0.8))
    assert due(t, m(reducible=6399)) is None
    assert due(t, m(reducible=6400)) == "tokens"  # 80% of 8,000
    assert due(t, m(since=20)) == "messages"
    assert due(t, m(since=19)) is None
    exact = CompactionTrigger(config(), TriggerParams(soft_ratio=1.0))
    assert due(exact, m(reducible=7899)) is None  # the whole context (+100) is 7,999


def test_one_summary_at_a_time():
    t = CompactionTrigger(config())
    assert due(t, m(since=30), in_flight=True) is None
    assert due(t, m(since=30), in_flight=True, pending=True) is None


def test_manual_only_mode_starts_nothing_but_the_backlog():
    t = CompactionTrigger(config(), TriggerParams(auto=False))
    assert due(t, m(reducible=100_000, since=100)) is None
    assert due(t, m(since=100), pending=True) == "backlog"


def test_backlog_when_no_threshold_trips():
    t = CompactionTrigger(config())
    assert due(t, m(), pending=True) == "backlog"
    assert due(t, m(since=25), pending=True) == "messages"


def test_backoff_after_failures_then_reset_on_success():
    t = CompactionTrigger(config(), retry=RetryParams(backoff_s=5, max_backoff_s=60))
    delay, escalate = t.summary_failed(now=100.0)
    assert delay == 5 and not escalate
    assert due(t, m(since=30), now=104.9) is None
    assert due(t, m(since=30), now=105.0) == "messages"
    assert t.summary_failed(now=105.0)[0] == 10  # doubled
    assert not t.ready(114.0) and t.ready(115.0)
    t.summary_applied()
    assert t.ready(0.0) and t.failures.consecutive == 0


def test_error_escalates_once_per_streak():
    t = CompactionTrigger(config(), retry=RetryParams(error_after_failures=2))
    assert [t.summary_failed(0.0)[1] for _ in range(4)] == [False, True, False, False]
    t.summary_applied()
    assert [t.summary_failed(0.0)[1] for _ in range(2)] == [False, True]


def test_nothing_to_plan_memo_holds_until_the_context_changes():
    t = CompactionTrigger(config())
    assert due(t, m(since=25, count=30)) == "messages"
    t.nothing_to_plan(m(since=25, count=30))
    assert due(t, m(since=25, count=30)) is None  # same content: do not plan again
    assert due(t, m(since=26, count=31)) == "messages"  # a message more: try again
    t.nothing_to_plan(m(count=31))
    t.context_replaced()
    assert due(t, m(since=26, count=31)) == "messages"  # a new conversation


def test_min_gain_wait_until_the_shortfall_has_grown():
    t = CompactionTrigger(config(), TriggerParams(min_token_gain=0.1))  # 800 tokens
    assert t.worth_it("tokens", 800, lambda: 0)
    assert not t.worth_it("tokens", 300, lambda: 6500)
    assert t.replan_at_tokens == 6500 + 500
    assert due(t, m(reducible=6999)) is None  # the token threshold waits
    # the tokens reason wins over messages (as before the trigger was one object), so the
    # message threshold waits too; the backlog does not
    assert due(t, m(reducible=6999, since=20)) is None
    assert due(t, m(reducible=6999), pending=True) == "backlog"
    assert due(t, m(reducible=7000)) == "tokens"
    t.summary_applied()
    assert t.replan_at_tokens == 0


def test_min_gain_gates_only_token_compactions():
    t = CompactionTrigger(config(), TriggerParams(min_token_gain=0.5))
    for reason in ("messages", "manual", "backlog"):
        assert t.worth_it(reason, 0, lambda: 0)  # type: ignore[arg-type]
    no_tokens = CompactionTrigger(config(tokens=None), TriggerParams(min_token_gain=0.5))
    assert no_tokens.worth_it("tokens", 0, lambda: 0)


def test_output_budget_caps_ours_honours_an_override():
    cfgd = config(tokens=8000, target=6000)
    t = CompactionTrigger(cfgd)
    assert t.output_budget(cfgd.summary_config) == 2000  # a quarter of max_context_tokens
    override = LLMContextSummaryConfig(target_context_tokens=6000)
    assert t.output_budget(override) == 6000


def test_backlog_chains_only_after_a_success_and_when_ready():
    t = CompactionTrigger(config(), retry=RetryParams(backoff_s=0))
    assert t.chain_backlog(pending=True, now=0.0)
    assert not t.chain_backlog(pending=False, now=0.0)
    t.summary_failed(0.0)
    assert not t.chain_backlog(pending=True, now=10.0)  # a failure waits for the next turn


@given(
    st.integers(0, 20_000),
    st.integers(0, 60),
    st.floats(0.1, 1.0),
    st.booleans(),
)
def test_due_never_answers_tokens_below_the_soft_threshold(reducible, since, soft, auto):
    t = CompactionTrigger(config(), TriggerParams(auto=auto, soft_ratio=soft))
    reason = due(t, m(reducible=reducible, since=since))
    if reason == "tokens":  # the soft threshold, or Pipecat's own on the whole context
        assert auto and (reducible >= 8000 * soft or reducible + 100 >= 8000)
    if reason == "messages":
        assert auto and since >= 20
    if not auto:
        assert reason is None


def test_a_request_counts_its_answer_toward_the_message_threshold():
    t = CompactionTrigger(config(), TriggerParams(soft_ratio=1.0))
    assert due(t, m(since=19)) is None
    assert t.due(m(since=19), now=0.0, in_flight=False, pending=False, answer_pending=True) == (
        "messages"
    )
    assert t.due(m(since=18), now=0.0, in_flight=False, pending=False, answer_pending=True) is None


@given(limit=st.integers(2, 60), data=st.data())
def test_the_first_due_request_is_the_one_whose_answer_reaches_the_limit(limit, data):
    """Requests after a compaction come two messages apart (a user message and the answer
    before it, or a tool call and its result): from the kept tail plus the new user message
    on. The first one due carries at most ``limit`` messages since the summary, and its
    answer brings them to the limit."""
    keep = data.draw(st.integers(0, limit - 1))
    t = CompactionTrigger(config(messages=limit, keep=keep, tokens=None), TriggerParams())
    since = keep + 1
    while (
        t.due(m(since=since), now=0.0, in_flight=False, pending=False, answer_pending=True) is None
    ):
        assert since + 1 < limit  # not due: even with its answer, under the limit
        since += 2
    assert since <= limit <= since + 1


def test_the_answer_alone_never_trips_a_plan_that_would_be_empty():
    """A tail of 0 or 1 keeps the request's own messages: its answer counting toward the
    threshold must not start a compaction with nothing to summarize (it logged a WARNING)."""
    one = CompactionTrigger(config(messages=2, keep=1, tokens=None), TriggerParams())
    ask = dict(now=0.0, in_flight=False, pending=False, answer_pending=True)
    assert one.due(m(since=1), **ask) is None  # the user message alone: kept
    assert one.due(m(since=3), **ask) == "messages"
    none = CompactionTrigger(config(messages=1, keep=0, tokens=None), TriggerParams())
    assert none.due(m(since=0), **ask) is None  # the bot speaks first: nothing to summarize
    assert none.due(m(since=1), **ask) == "messages"

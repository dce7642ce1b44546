"""Probes kept every turn, the ceiling and the simulated summarizer outage in the replay."""

import json

import pytest

from pipecat_summarizer_cli.main import main
from pipecat_summarizer_cli.replay.report import (
    REPORT_KEYS,
    Prices,
    RequestTokens,
    StrategyResult,
    build_report,
    ceiling_violations,
    pending_drained_turn,
    probe_first_misses,
    probes_retained_every_turn,
    request_probes,
)
from pipecat_summarizer_cli.replay.runner import (
    Backend,
    Outage,
    Thresholds,
    replay_options,
    run_all,
)
from pipecat_summarizer_cli.replay.tables import format_table, merge_reports
from pipecat_summarizer_cli.replay.transcript import transcript_from_messages
from tests.support.replay_fakes import StandInLLM, StandInSummarizer, conversation

NEW_KEYS = (
    "probes_retained_every_turn",
    "ceiling_violations",
    "pending_max_messages",
    "pending_final_messages",
)


def msg(role: str, content: str) -> str:
    return json.dumps({"role": role, "content": content})


def req(turn: int, *contents: str, tokens: int = 10, step: int = 0) -> RequestTokens:
    messages = tuple(msg("user", c) for c in contents)
    return RequestTokens(turn, messages, (tokens,) * len(messages), step=step)


# -- pure functions ----------------------------------------------------------------------


def test_a_probe_dropped_mid_run_is_not_retained_every_turn():
    requests = [
        req(1, "Hello."),
        req(2, "Hello.", "I'm VEGETARIAN and allergic to peanuts."),
        req(3, "Summary: vegetarian.", "Next question."),  # the allergy is gone...
        req(4, "Summary: vegetarian, allergic to peanuts.", "More."),  # ...and back
    ]
    probes = ["vegetarian", "allergic to peanuts", "Priya", "hello"]
    presence = request_probes(requests, probes)
    assert presence[1] == {"vegetarian", "allergic to peanuts", "hello"}
    assert probe_first_misses(presence, [r.turn for r in requests], probes) == {
        "vegetarian": None,  # stated at turn 2, in every request after
        "allergic to peanuts": 3,  # back in the final request, but missing at turn 3
        "Priya": 0,  # never sent
        "hello": 3,
    }
    assert probes_retained_every_turn(presence, probes) == ["vegetarian"]
    # The final request alone would count the allergy as retained.
    assert probes_retained_every_turn(presence[-1:], probes) == [
        "vegetarian",
        "allergic to peanuts",
    ]


def test_request_probes_match_across_messages_and_the_system_instruction():
    split = RequestTokens(1, (msg("user", "allergic to"), msg("user", "peanuts")), (5, 5))
    system = RequestTokens(1, (msg("user", "hi"),), (5,), system_instruction="Vegetarian.")
    tool = RequestTokens(
        1,
        (
            json.dumps(
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"function": {"name": "book", "arguments": '{"ref": "NC-48213"}'}}
                    ],
                }
            ),
        ),
        (5,),
    )
    found = request_probes(
        [split, system, tool], ["allergic to\npeanuts", "vegetarian", "nc-48213"]
    )
    assert found == [{"allergic to\npeanuts"}, {"vegetarian"}, {"nc-48213"}]


def test_ceiling_violations_count_requests_strictly_over_the_ceiling():
    requests = [req(1, "a", tokens=100), req(2, "a", "b", tokens=100), req(3, "c", tokens=250)]
    assert [r.total for r in requests] == [100, 200, 250]
    assert ceiling_violations(requests, None) is None
    assert ceiling_violations(requests, 200) == 1  # 200 is at the ceiling, not over it
    assert ceiling_violations(requests, 199) == 2
    assert ceiling_violations(requests, 99) == 3
    assert ceiling_violations([], 100) == 0


def test_pending_drained_turn():
    assert pending_drained_turn([]) is None
    assert pending_drained_turn([0, 0, 0]) is None
    assert pending_drained_turn([0, 2, 5, 0, 0]) == 4
    assert pending_drained_turn([0, 2, 0, 3, 0]) == 5  # the last time it emptied
    assert pending_drained_turn([0, 2, 5]) is None  # still pending at the end


def test_report_and_table_carry_the_new_keys():
    requests = [
        req(1, "I'm vegetarian.", tokens=300),
        req(2, "I'm vegetarian.", "q2", tokens=300),
        req(2, "I'm vegetarian.", "q2", "tool", tokens=300, step=1),
    ]
    ours = StrategyResult(
        "pipecat_summarizer",
        requests,
        final_text="I'm vegetarian.",
        pending_per_turn=[0, 4],
        pending_max_messages=6,
    )
    full = StrategyResult("full_buffer", requests, final_text="I'm vegetarian.")
    report = build_report(
        [full, ours], turns=2, prices=Prices(), probes=["vegetarian"], ceiling=500
    )
    for name, entry in report["strategies"].items():
        assert set(REPORT_KEYS) <= set(entry), name
        assert set(NEW_KEYS) <= set(REPORT_KEYS)
        assert entry["probes_retained_every_turn"] == 1
        assert entry["ceiling_violations"] == 2  # 600 and 900 are over 500
        assert entry["ceiling_violations_after_tool_calls"] == 1
    assert report["strategies"]["pipecat_summarizer"]["pending_max_messages"] == 6
    assert report["strategies"]["pipecat_summarizer"]["pending_final_messages"] == 4
    assert report["strategies"]["full_buffer"]["pending_max_messages"] == 0
    table = format_table(report)
    assert "probes retained every turn" in table and "ceiling violations" in table
    assert "6 / 4" in table
    # Without a ceiling the violations are null, and the table leaves the row out.
    plain = build_report([full], turns=2, prices=Prices(), probes=["vegetarian"])
    assert plain["strategies"]["full_buffer"]["ceiling_violations"] is None
    assert "ceiling violations" not in format_table(plain)
    json.dumps(report)


def test_merge_reports_sums_violations_and_keeps_the_largest_queue():
    def entry(violations, pending_max, pending_final):
        e = {k: 0 for k in REPORT_KEYS}
        e.update(
            requests=2,
            ceiling_violations=violations,
            pending_max_messages=pending_max,
            pending_final_messages=pending_final,
            probes_retained_every_turn=1,
        )
        return e

    def rep(*entries):
        return [{"turns": 2, "strategies": {"pipecat_summarizer": e}} for e in entries]

    m = merge_reports(rep(entry(1, 5, 0), entry(2, 9, 1)))["strategies"]["pipecat_summarizer"]
    assert m["ceiling_violations"] == 3 and m["pending_max_messages"] == 9
    assert m["pending_final_messages"] == 1 and m["probes_retained_every_turn"] == 2
    m = merge_reports(rep(entry(None, 0, 0)))["strategies"]["pipecat_summarizer"]
    assert m["ceiling_violations"] is None


def test_outage_spans_and_replay_options():
    outage = Outage(20, 60)
    assert outage.end == 80
    assert not outage.covers(19) and outage.covers(20) and outage.covers(79)
    assert not outage.covers(80)
    with pytest.raises(ValueError):
        Outage(0, 5)
    options = replay_options(6000)
    assert options.ceiling is not None and options.ceiling.max_request_tokens == 6000
    # the real backoff: the replay's clock is simulated, and ours reads the loop's clock
    assert (options.retry.backoff_s, options.retry.max_backoff_s) == (5.0, 120.0)


# -- a real outage run ---------------------------------------------------------------------


async def test_outage_with_a_low_ceiling_never_violates_it_and_the_backlog_drains():
    transcript = transcript_from_messages(conversation(30), name="small")
    ceiling = 1200
    outage = Outage(4, 12)  # turns 4-15
    results = await run_all(
        transcript,
        backend=Backend("stand-in", StandInSummarizer, StandInLLM),
        thresholds=Thresholds(max_context_tokens=None, max_unsummarized_messages=6, keep=2),
        options=replay_options(ceiling),
        outage=outage,
    )
    report = build_report(
        results, turns=30, prices=Prices(), probes=["vegetarian"], ceiling=ceiling
    )
    full = report["strategies"]["full_buffer"]
    builtin = report["strategies"]["pipecat_builtin"]
    ours = report["strategies"]["pipecat_summarizer"]
    assert full["ceiling_violations"] > 0 and builtin["ceiling_violations"] > 0
    assert ours["ceiling_violations"] == 0
    assert ours["max_request_tokens"] <= ceiling
    assert ours["pending_max_messages"] > 0
    assert ours["pending_final_messages"] == 0
    assert ours["evictions"] > 0 and ours["messages_evicted"] >= ours["pending_max_messages"]
    # the queue empties once the summarizer is back, and stayed full during the outage
    assert outage.end <= ours["pending_drained_turn"] < 30
    per_turn = next(r for r in results if r.strategy == "pipecat_summarizer").pending_per_turn
    assert per_turn[outage.end - 2] > 0  # after the last turn of the outage
    for entry in (builtin, ours):
        assert entry["summary_failures"] >= 1
        assert entry["outage_rejected_calls"] == entry["summary_failures"]
        assert entry["summaries_applied"] >= 1  # before and after the outage
    assert full["pending_max_messages"] == builtin["pending_max_messages"] == 0
    assert full["probes_retained_every_turn"] == 1


# -- the command line ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["replay", "--synthetic", "5", "--summarizer-down-from", "2"],
        ["replay", "--synthetic", "5", "--summarizer-down-for", "2"],
    ],
)
def test_outage_flags_go_together(argv, capsys):
    assert main(argv) == 2
    assert "go together" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["replay", "--synthetic", "5", "--max-request-tokens", "100"],
        ["replay", "--synthetic", "5", "--summarizer-down-from", "0", "--summarizer-down-for", "2"],
    ],
)
def test_bad_ceiling_and_outage_values_are_rejected(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "must be at least" in capsys.readouterr().err


def test_synthetic_defaults_to_the_article_hybrid_unless_a_threshold_is_given(tmp_path, capsys):
    report_path = tmp_path / "report.json"
    base = ["replay", "--synthetic", "3", "--strategies", "full_buffer", "--no-progress"]
    assert main([*base, "--report", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["thresholds"] == {
        "max_context_tokens": 15000,
        "max_unsummarized_messages": 40,
        "min_messages_after_summary": 20,
        "target_context_tokens": 700,
    }
    assert "hybrid" in report["thresholds_source"]
    assert "hybrid" in capsys.readouterr().out
    assert main([*base, "--keep", "6", "--report", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["thresholds"]["max_context_tokens"] == 8000  # Pipecat's, for the rest
    assert report["thresholds"]["min_messages_after_summary"] == 6
    assert report["thresholds_source"].startswith("command line (--keep)")


def test_cli_outage_run_reports_the_ceiling(tmp_path, capsys):
    path = tmp_path / "call.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in conversation(16)) + "\n", encoding="utf-8")
    report_path = tmp_path / "report.json"
    argv = [
        "replay",
        str(path),
        "--max-unsummarized-messages",
        "6",
        "--keep",
        "2",
        "--max-context-tokens",
        "none",
        "--max-request-tokens",
        "1200",
        "--summarizer-down-from",
        "3",
        "--summarizer-down-for",
        "8",
        "--probe",
        "vegetarian",
        "--strategies",
        "full_buffer,pipecat_summarizer",
        "--report",
        str(report_path),
        "--no-progress",
    ]
    pytest.importorskip("pipecat_summarizer.summarizers.extractive")
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "ceiling violations" in out and "pending max / final" in out
    assert "summarizer down turns 3-10" in out
    report = json.loads(report_path.read_text())
    assert report["max_request_tokens"] == 1200
    assert report["summarizer_outage"] == {"from_turn": 3, "turns": 8, "recovered_at_turn": 11}
    ours = report["strategies"]["pipecat_summarizer"]
    assert ours["ceiling_violations"] == 0 and ours["pending_final_messages"] == 0
    assert report["strategies"]["full_buffer"]["ceiling_violations"] > 0

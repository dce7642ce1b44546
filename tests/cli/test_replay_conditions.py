"""``replay --compare-busy`` (what ``make demo`` runs): the same call calm and busy, in one
table, one report and one plot; the plot's panels (inspected through matplotlib's objects);
the busy call's settings and the turn schedule behind the minute axis."""

import json
from pathlib import Path

import pytest

from pipecat_summarizer_cli.main import main
from pipecat_summarizer_cli.replay.report import (
    Prices,
    RequestTokens,
    StrategyResult,
    strategy_metrics,
)
from pipecat_summarizer_cli.replay.tables import conditions_table, takeaway
from pipecat_summarizer_cli.replay.timing import (
    BUSY_BARGE_IN_SHARE,
    BUSY_SUMMARY_TOKENS_PER_SECOND,
    CallModel,
    busy,
    plan_call,
    turn_starts,
)
from pipecat_summarizer_cli.replay.transcript import load_transcript


def write_transcript(tmp_path, turns=14):
    lines = [{"role": "system", "content": "You are Sage."}]
    for k in range(1, turns + 1):
        lines.append({"role": "user", "content": "I'm vegetarian." if k == 1 else f"Q{k} " * 30})
        lines.append({"role": "assistant", "content": f"A{k} " * 60})
    path = tmp_path / "call.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in lines) + "\n", encoding="utf-8")
    return path


def test_busy_is_the_calm_call_with_a_slower_summarizer_and_more_barge_ins():
    calm = CallModel(seed=7)
    hurried = busy(calm)
    assert hurried.summary_tokens_per_second == BUSY_SUMMARY_TOKENS_PER_SECOND == 40
    assert hurried.barge_in_share == BUSY_BARGE_IN_SHARE == 0.5
    assert (hurried.seed, hurried.summary_latency_s) == (7, calm.summary_latency_s)
    # never calmer than the call it starts from; rate 0 (no generation time) becomes 40
    slower = busy(CallModel(summary_tokens_per_second=20, barge_in_share=0.8))
    assert (slower.summary_tokens_per_second, slower.barge_in_share) == (20, 0.8)
    assert busy(CallModel(summary_tokens_per_second=0)).summary_tokens_per_second == 40


def test_compare_busy_replays_both_conditions_in_one_report_table_and_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = write_transcript(tmp_path)
    report_path, plot = tmp_path / "report.json", tmp_path / "plot.png"
    argv = ["replay", str(path), "--max-unsummarized-messages", "6", "--keep", "2"]
    argv += ["--probe", "vegetarian", "--compare-busy", "--no-progress"]
    assert main([*argv, "--report", str(report_path), "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "== the calm call ==" in out and "== the busy call ==" in out
    assert "Calm against busy" in out and "busy: built-in" in out and "busy: ours" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    report = json.loads(report_path.read_text())
    assert list(report["conditions"]) == ["calm", "busy"]
    calm, hurried = report["conditions"]["calm"], report["conditions"]["busy"]
    assert calm["timing"]["summary_tokens_per_second"] == 100
    assert calm["timing"]["barge_in_share"] == 0.2
    assert hurried["timing"]["summary_tokens_per_second"] == 40
    assert hurried["timing"]["barge_in_share"] == 0.5
    for cond in (calm, hurried):
        assert cond["turns"] == 14
        assert set(cond["strategies"]) == {"full_buffer", "pipecat_builtin", "pipecat_summarizer"}
        ours = cond["strategies"]["pipecat_summarizer"]
        assert ours["summaries_applied"] >= 1 and ours["probes_total"] == 1
        assert f"{ours['summaries_requested']} / {ours['summaries_applied']} / " in out
    assert report["takeaway"] == takeaway(report["conditions"])
    assert report["takeaway"][0] in out

    # the minute axis's schedule is the replay's own: it ends when the replayed call ends
    transcript = load_transcript(str(path))
    for cond, model in ((calm, CallModel()), (hurried, busy(CallModel()))):
        ends = turn_starts(plan_call(transcript, model), model)
        seconds = cond["strategies"]["pipecat_summarizer"]["call_seconds"]
        assert len(ends) == 15 and ends[-1] == pytest.approx(seconds, abs=0.1)


@pytest.mark.parametrize("other", [["--instant"], ["--synthetic", "5"]])
def test_compare_busy_needs_one_transcript_in_simulated_time(tmp_path, capsys, other):
    path = [] if "--synthetic" in other else [str(write_transcript(tmp_path))]
    assert main(["replay", *path, *other, "--compare-busy", "--no-progress"]) == 2
    assert f"--compare-busy replays one transcript in simulated time: not with {other[0]}" in (
        capsys.readouterr().err
    )


def _result(strategy, turns, *, requested, applied, discarded=0, grow=100):
    requests, messages = [], ["system"]
    for t in range(1, turns + 1):
        messages.append(f"{strategy} turn {t}")
        if t in applied:
            messages = ["system", f"summary {t}"]
        requests.append(
            RequestTokens(t, tuple(messages), tuple(grow for _ in messages), 0, 10, None)
        )
    return StrategyResult(
        strategy,
        requests,
        summary_calls=[(500, 100)] * len(requested),
        summaries_applied=len(applied),
        summaries_discarded=discarded,
        final_text="vegetarian" if strategy != "pipecat_builtin" else "",
        turns=turns,
        requested_turns=list(requested),
        applied_turns=list(applied),
    )


def _conditions():
    from pipecat_summarizer_cli.replay.plot import Condition

    full = _result("full_buffer", 20, requested=[], applied=[])
    calm = [
        full,
        _result("pipecat_builtin", 20, requested=[8, 16], applied=[9, 17]),
        _result("pipecat_summarizer", 20, requested=[8, 16], applied=[9, 17]),
    ]
    hurried = [
        full,
        _result("pipecat_builtin", 20, requested=[8, 9, 10, 11, 16], applied=[12], discarded=4),
        _result("pipecat_summarizer", 20, requested=[8, 16], applied=[10, 18]),
    ]
    minutes = [0.5 * t for t in range(21)]
    return [
        Condition("calm call", "a 10-minute call", calm, minutes),
        Condition("busy call", "a 10-minute call, more barge-ins", hurried, minutes),
    ]


def test_the_figure_tells_the_strategies_apart_and_explains_itself():
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from pipecat_summarizer_cli.replay.plot import build_figure

    prices = Prices()
    conditions = _conditions()
    fig = build_figure(
        conditions,
        title="built-in vs ours, calm and busy\nthe takeaway",
        threshold=1500,
        turns=20,
        probes=["vegetarian", "peanuts"],
        prices=prices,
    )
    try:
        assert fig._suptitle.get_text() == "built-in vs ours, calm and busy\nthe takeaway"
        panels: dict[str, list] = {}
        for ax in fig.axes:
            for each in (ax, *ax.child_axes):  # the minute axis is the cost panel's child
                panels.setdefault(each.get_gid(), []).append(each)
        # one column per condition, the minutes on top of each
        assert {k: len(v) for k, v in panels.items()} == {
            "cost": 2,
            "savings": 2,
            "requests": 2,
            "summaries": 2,
            "probes": 2,
            "minutes": 2,
        }
        assert panels["minutes"][0].get_xlabel() == "minutes into the call"
        for col, condition in enumerate(conditions):
            by_name = {r.strategy: r for r in condition.results}
            # the cost with a prompt cache is drawn: each bold line ends at the report's figure
            cost = panels["cost"][col]
            ends = {line.get_label().split(":")[0]: line.get_ydata()[-1] for line in cost.lines}
            for short, name in (("built-in", "pipecat_builtin"), ("ours", "pipecat_summarizer")):
                entry = strategy_metrics(by_name[name], prices=prices, probes=[])
                assert ends[short] == pytest.approx(entry["cost_usd_with_cache"])
            # request sizes never go below zero; the lines differ in style, not only colour
            requests = panels["requests"][col]
            assert requests.get_ylim()[0] == 0
            styles = {
                line.get_label().split(":")[0]: line.get_linestyle() for line in requests.lines
            }
            assert styles["built-in"] != styles["ours"]
            # the summary marks sit on their own axis, one row per summarizing strategy
            summaries = panels["summaries"][col]
            assert summaries not in requests.get_shared_y_axes().get_siblings(requests)
            marks = [line for line in summaries.lines if line.get_marker() in ("|", "v")]
            requested = sorted(
                int(x) for m in marks if m.get_marker() == "|" for x in m.get_xdata()
            )
            expected = sorted(t for r in condition.results for t in r.requested_turns)
            assert requested == expected
            labels = [t.get_text() for t in summaries.get_yticklabels()]
            builtin = by_name["pipecat_builtin"]
            assert any(
                f"{builtin.summaries_applied} applied, {builtin.summaries_discarded} discarded"
                in label
                for label in labels
            )
            # what a probe is, said in the plot
            assert "a probe is a fact planted in the call" in panels["probes"][col].get_title(
                "left"
            )
        assert panels["cost"][1].get_title("left").startswith("BUSY CALL: ")
        saved = panels["savings"][1].lines[0].get_ydata()[-1]
        busy_costs = {r.strategy: r for r in conditions[1].results}
        assert saved == pytest.approx(
            strategy_metrics(busy_costs["pipecat_builtin"], prices=prices, probes=[])[
                "cost_usd_with_cache"
            ]
            - strategy_metrics(busy_costs["pipecat_summarizer"], prices=prices, probes=[])[
                "cost_usd_with_cache"
            ]
        )
    finally:
        plt.close(fig)


def _report(requested, applied, discarded, largest, cached):
    return {
        "summaries_requested": requested,
        "summaries_applied": applied,
        "summaries_discarded": discarded,
        "max_request_tokens": largest,
        "cost_usd": cached * 4,
        "cost_usd_with_cache": cached,
        "input_tokens": 1000,
        "summary_input_tokens": 100,
        "probes_total": 0,
        "barge_ins": 3,
    }


def test_the_takeaway_says_what_the_figures_show():
    reports = {
        "calm": {
            "strategies": {
                "pipecat_builtin": _report(21, 21, 0, 3607, 0.2694),
                "pipecat_summarizer": _report(21, 21, 0, 3492, 0.2543),
            }
        },
        "busy": {
            "strategies": {
                "pipecat_builtin": _report(43, 18, 25, 5201, 0.2855),
                "pipecat_summarizer": _report(21, 21, 0, 3492, 0.2608),
            }
        },
    }
    words = takeaway(reports)
    assert words[0] == (
        "On the calm call both summarizers apply every summary and ours costs 6% less with a "
        "prompt cache; on the busy call the built-in discards 25 of its 43 summaries and its "
        "requests grow to 5,201 tokens; ours discards none, sends at most 3,492 and costs 9% "
        "less with a prompt cache."
    )
    assert words[2].startswith("busy: built-in applies 18 of 43 summaries (25 discarded)")
    table = conditions_table(reports)
    assert "43 / 18 / 25" in table and "busy: ours" in table.splitlines()[0]
    assert takeaway({"calm": {"strategies": {"full_buffer": {}}}}) == []


README = Path(__file__).resolve().parents[2] / "docs" / "replay.md"  # the demo's page


def _readme_demo_table() -> dict[str, list[str]]:
    lines = README.read_text(encoding="utf-8").splitlines()
    head = lines.index(
        "| | full buffer | built-in, calm | ours, calm | built-in, busy | ours, busy |"
    )
    rows = {}
    for line in lines[head + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def test_the_readme_shows_what_make_demo_prints(tmp_path):
    """The README's demo table and figures are the demo's (make demo's command, no plot)."""
    report_path = tmp_path / "report.json"
    argv = ["replay", "nutrition_call", "--compare-busy", "--no-progress"]
    assert main([*argv, "--report", str(report_path)]) == 0
    conditions = json.loads(report_path.read_text())["conditions"]
    calm, hurried = conditions["calm"]["strategies"], conditions["busy"]["strategies"]
    keys = ("input_tokens", "summary_input_tokens", "cost_usd", "cost_usd_with_cache")
    assert [calm["full_buffer"][k] for k in keys] == [hurried["full_buffer"][k] for k in keys]
    columns = [
        (calm, "full_buffer"),
        (calm, "pipecat_builtin"),
        (calm, "pipecat_summarizer"),
        (hurried, "pipecat_builtin"),
        (hurried, "pipecat_summarizer"),
    ]

    def billed(st, name):
        base = st["full_buffer"]["input_tokens"] + st["full_buffer"]["summary_input_tokens"]
        return f"{100 * (st[name]['input_tokens'] + st[name]['summary_input_tokens']) / base:.1f}%"

    cells = {
        "summaries requested / applied / discarded": lambda st, n: (
            f"{st[n]['summaries_requested']} / {st[n]['summaries_applied']} / "
            f"{st[n]['summaries_discarded']}"
        ),
        "billed input vs the full buffer (both LLMs)": billed,
        "largest request (tokens)": lambda st, n: f"{st[n]['max_request_tokens']:,}",
        "cost, no cache": lambda st, n: f"${st[n]['cost_usd']:.4f}",
        "cost, prompt cache": lambda st, n: f"${st[n]['cost_usd_with_cache']:.4f}",
        "probes kept in every request": lambda st, n: (
            f"{st[n]['probes_retained_every_turn']}/{st[n]['probes_total']}"
        ),
    }
    assert _readme_demo_table() == {
        row: [fn(st, name) for st, name in columns] for row, fn in cells.items()
    }
    # the prose around the table
    text = " ".join(README.read_text(encoding="utf-8").split())
    b, o = hurried["pipecat_builtin"], hurried["pipecat_summarizer"]
    for cond, phrase in (
        (calm, "({barge} barge-ins in a {minutes}-minute call)"),
        (hurried, "({barge} in {minutes} minutes)"),
    ):
        ours = cond["pipecat_summarizer"]
        minutes = round(ours["call_seconds"] / 60)
        assert phrase.format(barge=ours["barge_ins"], minutes=minutes) in text

    def less(st):
        b, o = st["pipecat_builtin"]["cost_usd_with_cache"], st["pipecat_summarizer"]
        return round(100 * (b - o["cost_usd_with_cache"]) / b)

    assert f"ours costs {less(calm)}% less with a prompt cache" in text
    assert (
        f"it discards {b['summaries_discarded']} of its {b['summaries_requested']} (and pays "
        f"for each) and its requests grow to {b['max_request_tokens']:,} tokens, while ours "
        f"applies all {o['summaries_applied']}"
    ) in text
    assert f"and costs {less(hurried)}% less. The full buffer is the same in both." in text

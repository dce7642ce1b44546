"""The synthetic scenario's arithmetic (pure) and the ``pipecat-summarizer replay`` command."""

import json
from itertools import accumulate

import pytest

from pipecat_summarizer._text.tokens import EstimateTokenCounter
from pipecat_summarizer_cli.main import main
from pipecat_summarizer_cli.replay.report import REPORT_KEYS
from pipecat_summarizer_cli.replay.synthetic import (
    ALLERGY,
    article_full_buffer_tokens,
    replay_full_buffer_tokens,
    synthetic_messages,
    synthetic_transcript,
)


def test_synthetic_sizes_are_exact():
    counter = EstimateTokenCounter()
    messages = synthetic_messages(200)
    assert len(messages) == 401
    assert counter.count_message(messages[0]) == 3000
    assert {counter.count_message(m) for m in messages[1::2]} == {120}
    assert {counter.count_message(m) for m in messages[2::2]} == {360}
    assert ALLERGY in messages[1]["content"]  # message 2 of the conversation
    assert "vegetarian" not in messages[0]["content"]  # the probe is not in the prompt
    assert synthetic_messages(200) == messages  # deterministic


def test_synthetic_full_buffer_matches_the_article_within_two_percent():
    counter = EstimateTokenCounter()
    messages = synthetic_messages(200)
    prefix = list(accumulate(counter.count_message(m) for m in messages))
    # The request of turn N carries messages[0 .. 2N-1]: prefix, N-1 exchanges, user N.
    total = sum(prefix[2 * n - 1] for n in range(1, 201))
    assert total == replay_full_buffer_tokens(200) == 10_176_000
    article = article_full_buffer_tokens(200)
    assert article == 10_248_000
    assert abs(total - article) / article < 0.02


def test_synthetic_transcript_splits_into_exchanges():
    t = synthetic_transcript(5)
    assert t.name == "synthetic_5"
    assert len(t.turns) == 5 and [m["role"] for m in t.preamble] == ["system"]


def write_transcript(tmp_path, turns=6):
    lines = [{"role": "system", "content": "You are Sage."}]
    for k in range(1, turns + 1):
        lines.append({"role": "user", "content": "I'm vegetarian." if k == 1 else f"Q{k} " * 30})
        lines.append({"role": "assistant", "content": f"A{k} " * 60})
    path = tmp_path / "call.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in lines) + "\n", encoding="utf-8")
    return path


def test_replay_writes_the_report(tmp_path, capsys):
    path = write_transcript(tmp_path)
    report_path = tmp_path / "out" / "report.json"
    status = main(
        [
            "replay",
            str(path),
            "--strategies",
            "full_buffer",
            "--probe",
            "vegetarian",
            "--probe",
            "peanuts",
            "--report",
            str(report_path),
            "--no-progress",
            "--input-price",
            "2",
        ]
    )
    assert status == 0
    out = capsys.readouterr().out
    assert "full_buffer" in out and "probes retained" in out and "1/2" in out
    report = json.loads(report_path.read_text())
    assert report["turns"] == 6
    entry = report["strategies"]["full_buffer"]
    assert set(REPORT_KEYS) <= set(entry)
    assert entry["cost_usd"] == pytest.approx(entry["input_tokens"] * 2 / 1e6)
    assert report["prices_per_million"]["input"] == 2.0


def test_bad_transcript_is_a_usage_error_with_the_line(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"role": "system", "content": "S"}\n{"role": "usr", "content": "x"}\n')
    assert main(["replay", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:2: invalid role 'usr'" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["replay"],
        ["replay", "x.jsonl", "--synthetic", "5"],
        ["replay", "--locomo-id", "30", "--synthetic", "5"],
        ["replay", "--synthetic", "5", "--keep", "20"],
    ],
)
def test_usage_errors(argv, capsys):
    assert main(argv) == 2
    assert "error:" in capsys.readouterr().err


def test_synthetic_three_way_with_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    pytest.importorskip("pipecat_summarizer.summarizers.extractive")
    plot = tmp_path / "plot.png"
    report_path = tmp_path / "report.json"
    status = main(
        [
            "replay",
            "--synthetic",
            "30",
            "--max-context-tokens",
            "6000",
            "--plot",
            str(plot),
            "--report",
            str(report_path),
            "--no-progress",
        ]
    )
    assert status == 0
    out = capsys.readouterr().out
    assert "the article's" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = json.loads(report_path.read_text())
    assert report["synthetic"]["exchanges"] == 30
    full = report["strategies"]["full_buffer"]
    assert full["input_tokens"] == report["synthetic"]["expected_replay_full_buffer_input_tokens"]
    for name in ("pipecat_builtin", "pipecat_summarizer"):
        assert report["strategies"][name]["summaries_applied"] >= 1, name
        assert report["strategies"][name]["input_tokens"] < full["input_tokens"], name


async def test_openai_backend_against_a_local_server(openai_server):
    from pipecat_summarizer_cli.replay.runner import Thresholds, openai_backend, run_all
    from pipecat_summarizer_cli.replay.transcript import transcript_from_messages

    lines = [{"role": "system", "content": "You are Sage."}]
    for k in range(1, 11):
        lines += [
            {"role": "user", "content": f"Q{k} " * 30},
            {"role": "assistant", "content": f"A{k} " * 60},
        ]
    backend = openai_backend(model="m", base_url=openai_server.base_url, api_key="test")
    results = await run_all(
        transcript_from_messages(lines),
        strategies=("pipecat_builtin", "pipecat_summarizer"),
        backend=backend,
        thresholds=Thresholds(max_context_tokens=None, max_unsummarized_messages=6, keep=2),
    )
    for result in results:
        assert result.summary_calls, result.strategy
        assert result.summaries_applied >= 1, result.strategy
    # Both backends really went over HTTP: our summarizer's requests and Pipecat's.
    assert openai_server.summary_requests and openai_server.chat_requests


# -- the replay as an extra ----------------------------------------------------------------

BLOCKING_MAIN = (
    "import sys\n"
    "for name in sys.argv[1].split(','):\n"
    "    sys.modules[name] = None  # import name now raises ImportError\n"
    "from pipecat_summarizer_cli.main import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


def run_cli_without(modules: str, *argv: str):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-c", BLOCKING_MAIN, modules, *argv],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_plot_without_matplotlib_fails_at_once_with_the_install_hint(tmp_path):
    path = write_transcript(tmp_path)
    report = tmp_path / "report.json"
    done = run_cli_without(
        "matplotlib",
        "replay",
        str(path),
        "--plot",
        str(tmp_path / "plot.png"),
        "--report",
        str(report),
        "--no-progress",
    )
    assert done.returncode == 2, done.stderr
    assert "--plot needs matplotlib" in done.stderr
    assert 'pip install "pipecat-summarizer[replay]"' in done.stderr
    # before replaying: no strategy ran, no table, no report
    assert "turns replayed" not in done.stderr and "input tokens" not in done.stdout
    assert not report.exists()


def test_the_replay_without_its_extra_says_how_to_install_it(tmp_path):
    done = run_cli_without("tqdm", "replay", str(write_transcript(tmp_path)), "--no-progress")
    assert done.returncode == 2
    assert 'pip install "pipecat-summarizer[replay]"' in done.stderr


def test_importing_the_package_does_not_import_the_replay():
    import subprocess
    import sys

    code = (
        "import sys, pipecat_summarizer\n"
        "loaded = [m for m in sys.modules if m.startswith('pipecat_summarizer_cli.replay')\n"
        "          or m.split('.')[0] in ('tqdm', 'matplotlib')]\n"
        "print(loaded)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_failing_plot_does_not_lose_the_report(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = write_transcript(tmp_path)
    report = tmp_path / "report.json"
    not_a_file = tmp_path / "plot.png"
    not_a_file.mkdir()  # saving the PNG there fails
    argv = ["replay", str(path), "--strategies", "full_buffer", "--no-progress"]
    assert main([*argv, "--report", str(report), "--plot", str(not_a_file)]) == 1
    assert "the plot failed" in capsys.readouterr().err
    assert json.loads(report.read_text())["strategies"]["full_buffer"]["input_tokens"] > 0


def test_help_names_the_summarizer_prices(capsys):
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "gpt-4o-mini's published $0.15 input / $0.6 output" in text
    assert "--summary-input-price" in text and "--instant" in text


def test_real_time_is_the_default_and_instant_an_option(tmp_path, capsys):
    path = write_transcript(tmp_path, turns=12)
    report_path = tmp_path / "report.json"
    base = ["replay", str(path), "--max-unsummarized-messages", "6", "--keep", "2"]
    base += ["--no-progress", "--report", str(report_path)]
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "timing: simulated real time" in out and "summaries requested / applied" in out
    report = json.loads(report_path.read_text())
    assert report["timing"]["summary_latency_s"] == [0.5, 3.0]
    assert report["prices_per_million"]["summary_input"] == 0.15
    ours = report["strategies"]["pipecat_summarizer"]
    assert ours["summaries_applied"] >= 1 and ours["call_seconds"] > 0
    assert main([*base, "--instant"]) == 0
    assert json.loads(report_path.read_text())["timing"] == "instant"
    assert main([*base, "--instant", "--barge-ins", "0.5"]) == 2
    assert "not with --instant" in capsys.readouterr().err
    assert main([*base, "--answer-tokens-per-second", "0"]) == 0
    assert json.loads(report_path.read_text())["timing"]["answer_tokens_per_second"] == 0
    assert main([*base, "--instant", "--answer-tokens-per-second", "50"]) == 2
    assert "--answer-tokens-per-second model time" in capsys.readouterr().err

"""Attack on the ``questions`` command's options (``--recall-set``, ``--recall-min-tokens``,
``--recall-request-tokens``, ``--pause-ms``): each bad value is a clear error (exit 2 and a
message naming the option or field), never a traceback, never a silent substitute, never a
run that hangs. The run itself is stubbed (``_main``): only the options are under test."""

from __future__ import annotations

import json

import pytest

from pipecat_summarizer_cli.main import main
from pipecat_summarizer_cli.replay import questions
from tests.cli.test_questions import _sample

ran: list = []


@pytest.fixture
def command(tmp_path, monkeypatch, capsys):
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([_sample()]), encoding="utf-8")

    async def stub(samples, plan, args, answers=None):
        ran.append(plan)
        return 0

    monkeypatch.setattr(questions, "_main", stub)

    def run(*options: str) -> tuple[int | str, str]:
        ran.clear()
        try:
            code: int | str = main(["questions", "--locomo", str(data), *options])
        except SystemExit as e:  # argparse's usage error
            code = int(e.code or 0)
        printed = capsys.readouterr()
        return code, printed.out + printed.err

    return run


@pytest.mark.parametrize(
    "options,named",
    [
        (("--recall-set", "nosuchfield=1"), "FIELD"),
        (("--recall-set", "max_tokens"), "FIELD=VALUE"),  # '=' missing
        (("--recall-set", "=5"), "FIELD=VALUE"),
        (("--recall-set", "semantic=true"), "FIELD"),  # its own options
        (("--recall-set", "max_tokens=lots"), "max_tokens"),
        (("--recall-set", "max_tokens=1.5"), "max_tokens"),
        (("--recall-set", "adaptive=1"), "adaptive"),
        (("--recall-set", "latency_budget_s=nan"), "latency_budget_s"),
        (("--recall-set", "latency_budget_s=inf"), "latency_budget_s"),
        (("--recall-set", "search_limit=100000000000000000000"), "search_limit"),
        (("--recall-set", "min_tokens=9000"), "min_tokens"),  # > max_tokens
        (("--recall-set", "max_tokens=100", "--recall-set", "max_tokens=-1"), "max_tokens"),
        (("--recall-min-tokens", "-1"), "min_tokens"),
        (("--recall-min-tokens", "x"), "--recall-min-tokens"),
        (("--recall-request-tokens", "0"), "request_tokens"),
        (("--recall-request-tokens", "-3"), "request_tokens"),
        (("--recall-request-tokens", "1e3"), "--recall-request-tokens"),
    ],
)
def test_a_bad_recall_option_exits_2_with_a_message(command, options, named):
    code, printed = command(*options)
    assert code == 2 and not ran, printed
    assert named in printed and "Traceback" not in printed


def test_good_recall_options_are_taken_last_one_winning(command):
    code, _ = command(
        "--recall-set", "min_tokens=100", "--recall-set", "min_tokens=200",
        "--recall-set", "request_tokens=NONE", "--recall-request-tokens", "1",
    )  # fmt: skip
    assert code == 0
    (plan,) = ran
    assert (plan.recall.min_tokens, plan.recall.request_tokens) == (200, None)


@pytest.mark.parametrize("value", ["-5", "nan", "inf", "1e12"])
def test_a_bad_pause_exits_2_with_a_message(command, value):
    code, printed = command("--pause-ms", value)
    assert code == 2 and not ran, printed
    assert "--pause-ms" in printed


def test_recall_set_refuses_turning_recall_off(command):
    code, printed = command("--recall-set", "enabled=false")
    assert code == 2 and not ran, printed
    assert "enabled" in printed

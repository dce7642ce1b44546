"""The replay's clearing figure: the bundled ``orders_call`` (bulky tool results, the caller
asking for their details again at the end) replayed with ours plus recall, without and with
tool-result clearing; and the default strategies untouched (``make demo`` prints the same)."""

from __future__ import annotations

import json

from pipecat_summarizer._compaction.clearing import PLACEHOLDER_PREFIX
from pipecat_summarizer_cli.main import main
from pipecat_summarizer_cli.replay.arguments import STRATEGY_NAMES
from pipecat_summarizer_cli.replay.bundled import bundled_conversations
from pipecat_summarizer_cli.replay.clearing import CLEARED_PREFIX, ask_turns
from pipecat_summarizer_cli.replay.transcript import load_probes, load_transcript

STRATEGIES = "full_buffer,pipecat_summarizer_recall,pipecat_summarizer_clearing"


def test_the_cli_knows_the_librarys_placeholder():
    assert CLEARED_PREFIX == PLACEHOLDER_PREFIX


def test_every_probe_of_the_orders_call_is_asked_again_at_the_end():
    call = bundled_conversations()["orders_call"]
    assert call.probes is not None
    transcript = load_transcript(call.transcript)
    probes = load_probes(call.probes)
    asks = ask_turns(transcript, probes)
    assert set(asks) == set(probes)
    # asked in the call's last turns, long after a tool result carried them
    assert min(asks.values()) > len(transcript.turns) - 8


def test_clearing_figure_cleared_results_and_details_back_when_asked(tmp_path, capsys):
    report = tmp_path / "r.json"
    argv = ["replay", "orders_call", "--instant", "--no-progress", "--report", str(report)]
    argv += ["--strategies", STRATEGIES, "--max-unsummarized-messages", "40"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "tool results cleared" in out and "details back when asked" in out
    strategies = json.loads(report.read_text())["strategies"]
    recall, clearing = (
        strategies["pipecat_summarizer_recall"],
        strategies["pipecat_summarizer_clearing"],
    )
    assert recall["tool_results_cleared"] == 0 and clearing["tool_results_cleared"] > 0
    assert clearing["input_tokens"] < recall["input_tokens"]  # what clearing is for
    assert strategies["full_buffer"]["probes_back_when_asked"] == clearing["probes_asked"]
    # recall brings most cleared details back when the caller asks for them
    assert clearing["probes_back_when_asked"] >= clearing["probes_asked"] - 1


def test_the_default_strategies_and_table_are_unchanged(tmp_path, capsys):
    assert STRATEGY_NAMES == ("full_buffer", "pipecat_builtin", "pipecat_summarizer")
    argv = ["replay", "support_call", "--instant", "--no-progress"]
    assert main([*argv, "--strategies", "full_buffer"]) == 0
    out = capsys.readouterr().out
    assert "tool results cleared" not in out and "back when asked" not in out

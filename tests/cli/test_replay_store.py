"""``replay --store``: the replayed call lands in a real store that ``inspect`` can read."""

from __future__ import annotations

import json
from pathlib import Path

from pipecat_summarizer_cli.main import main

CALL = Path(__file__).resolve().parents[2] / "pipecat_summarizer_cli/replay/data/support_call.jsonl"


def _texts(path: Path) -> set[str]:
    out = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        message = json.loads(line)
        if isinstance(message.get("content"), str) and message["role"] in ("user", "assistant"):
            out.add(message["content"])
    return out


def test_replay_store_archives_every_compaction_and_dropped_message(tmp_path, capsys):
    db, report_path = tmp_path / "memory.db", tmp_path / "report.json"
    argv = ["replay", str(CALL), "--strategies", "pipecat_summarizer", "--instant"]
    argv += ["--max-unsummarized-messages", "10", "--no-progress"]
    status = main([*argv, "--store", str(db), "--report", str(report_path)])
    assert status == 0
    applied = json.loads(report_path.read_text())["strategies"]["pipecat_summarizer"]
    applied = applied["summaries_applied"]
    assert applied >= 3
    capsys.readouterr()

    assert main(["inspect", str(db), "--call", "support_call-pipecat_summarizer", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["call"]["compactions"] == applied == len(shown["compactions"])
    dropped = [m for c in shown["compactions"] for m in c["dropped"]]
    # every dropped message is there once, verbatim, in the order of the call
    positions = [m["position"] for m in dropped]
    assert positions == sorted(set(positions)) and positions[0] == 0
    spoken = _texts(CALL)
    verbatim = [
        m
        for m in dropped
        if m["role"] in ("user", "assistant") and m["content"] and not m["tool_call_ids"]
    ]
    assert verbatim and all(m["content"] in spoken for m in verbatim)
    assert all(m["removed_by"] == "summarized" for m in dropped)

    assert main(["inspect", str(db), "--call", "support_call-pipecat_summarizer"]) == 0
    text = capsys.readouterr().out
    assert "compactions:" in text and "#1" in text and "dropped" in text

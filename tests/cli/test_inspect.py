"""``pipecat-summarizer inspect`` on both backends."""

from __future__ import annotations

import asyncio
import json

from pipecat_summarizer.store import open_store
from pipecat_summarizer.store.records import (
    ArchivedMessage,
    CallRecord,
    CompactionRecord,
    FactEvent,
    sha256_hex,
)
from pipecat_summarizer_cli.main import main

SUMMARY = "FACTS:\n- hotel: Grand Budapest"
HOTEL = "My hotel is the Grand Budapest, booking HB-4471, and I arrive on Friday."


def _fill(target: str) -> None:
    async def write():
        store = open_store(target)
        await store.write(
            [
                CallRecord("call-1", "alice", started_at=1_700_000_000),
                ArchivedMessage(
                    "call-1",
                    0,
                    "user",
                    HOTEL,
                    json.dumps({"content": HOTEL}),
                    removed_by="summarized",
                    compaction=1,
                    turn=3,
                    user_id="alice",
                ),
                ArchivedMessage(
                    "call-1", 1, "assistant", "Noted.", "{}", compaction=1, turn=3, user_id="alice"
                ),
                ArchivedMessage(
                    "call-1",
                    2,
                    "user",
                    "late pears",
                    "{}",
                    removed_by="evicted",
                    turn=5,
                    user_id="alice",
                ),
                CompactionRecord(
                    "call-1",
                    1,
                    1,
                    True,
                    "tokens",
                    turn=3,
                    messages_before=12,
                    messages_after=5,
                    messages_summarized=2,
                    tokens_before=900,
                    tokens_after=300,
                    summary=SUMMARY,
                    summary_sha256=sha256_hex(SUMMARY),
                    latency_s=0.4,
                    model="cheap",
                    user_id="alice",
                ),
                CompactionRecord(
                    "call-1",
                    2,
                    None,
                    False,
                    "messages",
                    turn=6,
                    error="TimeoutError",
                    latency_s=2.0,
                    user_id="alice",
                ),
                FactEvent(
                    "call-1",
                    1,
                    "allergy",
                    "pinned",
                    "allergic to peanuts",
                    "constraint",
                    "app",
                    "app",
                    turn=1,
                    user_id="alice",
                ),
                FactEvent(
                    "call-1",
                    2,
                    "allergy",
                    "corrected",
                    "allergic to tree nuts",
                    "constraint",
                    "llm",
                    "tool",
                    turn=4,
                    user_id="alice",
                ),
                CallRecord(
                    "call-1",
                    "alice",
                    1_700_000_000,
                    ended_at=1_700_000_600,
                    ended_by="end",
                    summary=SUMMARY,
                    turns=7,
                    compactions=1,
                    messages_archived=3,
                ),
            ]
        )
        await store.close()

    asyncio.run(write())


def test_inspect_answers_the_support_questions(store_target, capsys):
    _fill(store_target)

    assert main(["inspect", store_target, "--user", "alice"]) == 0
    out = capsys.readouterr().out
    assert "calls of alice" in out and "call-1" in out and "compactions 1" in out

    assert main(["inspect", store_target, "--call", "call-1"]) == 0
    out = capsys.readouterr().out
    assert "#1  turn 3  tokens" in out
    assert "tokens 900 -> 300  messages 12 -> 5" in out
    assert f"summary sha256 {sha256_hex(SUMMARY)[:12]}" in out
    assert "dropped 2 messages [0-1]:" in out and "[0] user: My hotel is the Grand Budapest" in out
    assert "attempt 2  turn 6  messages  FAILED (TimeoutError)" in out
    assert "[2] user: late pears  (evicted at turn 5)" in out
    assert "pinned    allergy (constraint, by app/app): allergic to peanuts" in out
    assert "corrected allergy (constraint, by tool/llm): allergic to tree nuts" in out

    assert main(["inspect", store_target, "--call", "call-1", "--message", "0"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith(HOTEL) and "summarized by compaction #1" in out

    assert main(["inspect", store_target, "--search", "budapest friday", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert [(h["call_id"], h["position"], h["content"]) for h in hits] == [("call-1", 0, HOTEL)]

    assert main(["inspect", store_target, "--call", "call-1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [c["ok"] for c in data["compactions"]] == [True, False]
    assert [m["position"] for m in data["compactions"][0]["dropped"]] == [0, 1]
    assert [f["action"] for f in data["facts"]] == ["pinned", "corrected"]


def test_inspect_reports_what_is_missing(store_target, tmp_path, capsys):
    _fill(store_target)
    assert main(["inspect", store_target, "--call", "nope"]) == 1
    assert "no call nope" in capsys.readouterr().err
    assert main(["inspect", store_target, "--call", "call-1", "--message", "9"]) == 1
    assert main(["inspect", store_target, "--message", "0"]) == 2
    assert main(["inspect", str(tmp_path / "typo.db")]) == 2
    assert "no such SQLite file" in capsys.readouterr().err
    assert not (tmp_path / "typo.db").exists()  # never created by looking


def test_inspect_says_what_a_row_without_text_stands_for(tmp_path, capsys):
    """A resumed call's reference row and a cleared result's placeholder are archived without
    text (so recall never returns them); inspect says what each stands for, not a blank."""
    target = str(tmp_path / "rows.db")
    placeholder = "[tool result cleared] The result of lookup_order (about 900 tokens) was cleared"

    async def write():
        store = open_store(target)
        await store.write(
            [
                CallRecord("call-2", "bob", started_at=1_700_000_000),
                ArchivedMessage(
                    "call-2",
                    0,
                    "user",
                    "",
                    json.dumps({"restored_from": ["call-1", 4]}),
                    user_id="bob",
                ),
                ArchivedMessage(
                    "call-2",
                    1,
                    "tool",
                    "",
                    json.dumps({"role": "tool", "tool_call_id": "t1", "content": placeholder}),
                    user_id="bob",
                ),
            ]
        )
        await store.close()

    asyncio.run(write())
    assert main(["inspect", target, "--call", "call-2"]) == 0
    out = capsys.readouterr().out
    assert "restored: archived as call call-1 message 4" in out
    assert "placeholder of a cleared tool result" in out
    assert main(["inspect", target, "--call", "call-2", "--message", "0"]) == 0
    assert "restored: archived as call call-1 message 4" in capsys.readouterr().out

"""``pipecat-summarizer inspect`` is safe to point at anything: it opens
read-only and refuses what is not a memory store, never lets caller text drive the
terminal, and never prints a DSN's password."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from pipecat_summarizer.store import mask_dsn, open_store
from pipecat_summarizer.store.base import SCHEMA_VERSION
from pipecat_summarizer.store.records import (
    ArchivedMessage,
    CallRecord,
    CompactionRecord,
    FactEvent,
    sha256_hex,
)
from pipecat_summarizer_cli.inspect import terminal_safe
from pipecat_summarizer_cli.main import main

# what a hostile caller can put in a transcript: colour and cursor moves (CSI), a window
# title and a clickable link (OSC), a bell, the one-byte C1 CSI, a bidi override, a
# carriage return that hides what came before, a fake report line
HOSTILE = (
    "hi \x1b[2J\x1b[31mred\x1b[0m \x1b]0;owned\x07 \x1b]8;;http://evil.example\x1b\\link"
    "\x1b]8;;\x1b\\ \x9b31m c1 \u202eevil\u202c \rhidden \x00nul\x7f"
)
CONTROL = [
    "\x1b",
    "\x07",
    "\x9b",
    "\u202e",
    "\u202c",
    "\r",
    "\x00",
    "\x7f",
]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _fill(target: str, *, text: str = "late pears", call_id: str = "call-1") -> None:
    summary = f"FACTS:\n- {text}"

    async def write():
        async with open_store(target) as store:
            await store.write(
                [
                    CallRecord(call_id, "alice", started_at=1_700_000_000),
                    ArchivedMessage(
                        call_id,
                        0,
                        "user",
                        text,
                        json.dumps({"content": text}),
                        removed_by="summarized",
                        compaction=1,
                        turn=2,
                        user_id="alice",
                    ),
                    CompactionRecord(
                        call_id,
                        1,
                        1,
                        True,
                        "tokens",
                        turn=2,
                        messages_before=6,
                        messages_after=3,
                        messages_summarized=1,
                        tokens_before=500,
                        tokens_after=200,
                        summary=summary,
                        summary_sha256=sha256_hex(summary),
                        latency_s=0.2,
                        model="cheap",
                        user_id="alice",
                    ),
                    FactEvent(
                        call_id, 1, "note", "pinned", text, "fact", "llm", "tool", user_id="alice"
                    ),
                    CallRecord(
                        call_id,
                        "alice",
                        1_700_000_000,
                        ended_at=1_700_000_600,
                        ended_by="end",
                        summary=summary,
                        turns=3,
                        compactions=1,
                        messages_archived=1,
                    ),
                ]
            )

    asyncio.run(write())


# -- read-only -------------------------------------------------------------------------------


def test_inspect_leaves_another_apps_database_byte_identical_and_fails(tmp_path, capsys):
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users(name) VALUES ('ada')")
    conn.commit()
    conn.close()
    before = _files(tmp_path)
    for argv in ([], ["--user", "ada"], ["--search", "ada"], ["--json"]):
        assert main(["inspect", str(path), *argv]) == 2
        err = capsys.readouterr().err
        assert "not a memory store" in err, err
    assert _files(tmp_path) == before  # no tables, no WAL switch, no -wal/-shm left
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()


def test_inspect_leaves_a_store_unchanged(tmp_path, capsys):
    target = str(tmp_path / "memory.db")
    _fill(target)
    before = _files(tmp_path)
    for argv in (
        [],
        ["--user", "alice"],
        ["--call", "call-1"],
        ["--call", "call-1", "--message", "0"],
        ["--search", "pears", "--json"],
    ):
        assert main(["inspect", target, *argv]) == 0
    assert "late pears" in capsys.readouterr().out
    after = _files(tmp_path)
    assert after["memory.db"] == before["memory.db"]
    # a reader of a WAL database (every store is one) keeps SQLite's shared-memory index
    # and an empty log beside it, as any worker does; nothing is written to either
    assert set(after) - set(before) <= {"memory.db-wal", "memory.db-shm"}
    assert not after.get("memory.db-wal")


def test_inspect_never_migrates_a_store_of_another_version(store_target, backend, capsys):
    _fill(store_target)

    async def versions(change: str | None = None) -> list[int]:
        if backend == "sqlite":
            conn = sqlite3.connect(store_target)
            if change:
                conn.execute(change)
                conn.commit()
            rows = [r[0] for r in conn.execute("SELECT version FROM schema_version")]
            conn.close()
            return sorted(rows)
        import asyncpg

        conn = await asyncpg.connect(store_target)
        try:
            if change:
                await conn.execute(change)
            rows = [r[0] for r in await conn.fetch("SELECT version FROM schema_version")]
        finally:
            await conn.close()
        return sorted(rows)

    # an older worker's store: this code would migrate it; inspect must not
    older = asyncio.run(versions(f"DELETE FROM schema_version WHERE version = {SCHEMA_VERSION}"))
    assert main(["inspect", store_target, "--user", "alice"]) == 2
    assert "schema" in capsys.readouterr().err
    assert asyncio.run(versions()) == older
    # a newer worker's store
    asyncio.run(versions(f"INSERT INTO schema_version VALUES ({SCHEMA_VERSION + 1})"))
    assert main(["inspect", store_target]) == 2
    assert "schema" in capsys.readouterr().err


def test_inspect_refuses_a_file_that_is_not_a_database(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"not a database " * 300)
    before = _files(tmp_path)
    assert main(["inspect", str(notes)]) == 2
    assert "pipecat-summarizer inspect:" in capsys.readouterr().err
    assert _files(tmp_path) == before


# -- terminal safety ---------------------------------------------------------------------


def test_caller_text_never_reaches_the_terminal_as_control_sequences(tmp_path, capsys):
    target = str(tmp_path / "memory.db")
    hostile_id = "call-\x1b[8m\nfake line"
    _fill(target, text=HOSTILE, call_id=hostile_id)
    outputs = []
    for argv in (
        [],
        ["--user", "alice"],
        ["--call", hostile_id],
        ["--call", hostile_id, "--message", "0"],
        ["--search", "hidden"],
    ):
        assert main(["inspect", target, *argv]) == 0, argv
        outputs.append(capsys.readouterr().out)
    for out in outputs:
        for char in CONTROL:
            assert char not in out, (repr(char), out)
    message = outputs[3]
    assert "\\x1b[31mred" in message and "\\u202eevil" in message  # shown, escaped
    assert "\\x9b31m" in message and "\\rhidden" not in message and "\\x0dhidden" in message
    # an id cannot forge a line of the report
    assert not any(line.startswith("fake line") for out in outputs for line in out.splitlines())
    assert main(["inspect", target, "--call", "nope\x1b[2J"]) == 1
    assert "\x1b" not in capsys.readouterr().err


def test_json_output_stays_exact_and_terminal_safe(tmp_path, capsys):
    target = str(tmp_path / "memory.db")
    _fill(target, text=HOSTILE)
    assert main(["inspect", target, "--call", "call-1", "--message", "0", "--json"]) == 0
    out = capsys.readouterr().out
    for char in CONTROL:
        assert char not in out, repr(char)

    async def stored() -> str:
        async with open_store(target, read_only=True) as store:
            message = await store.message("call-1", 0)
        assert message is not None
        return message.content

    # the exact text the store holds (it may have made it storable: NUL removed), escaped
    # the JSON way
    content = asyncio.run(stored())
    assert "\x1b[31mred" in content and "\u202e" in content
    assert json.loads(out)["content"] == content


def test_terminal_safe_keeps_ordinary_text():
    text = "Grüße, 東京, مرحبا, emoji 🎉 and tabs\tand\nlines"
    assert terminal_safe(text, multiline=True) == text
    assert terminal_safe(text) == text.replace("\t", "\\x09").replace("\n", "\\x0a")


# -- DSN passwords ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dsn", "secrets"),
    [
        ("postgresql+asyncpg://bob:hunter2@127.0.0.1:9/app", ["hunter2"]),
        ("postgresql://bob:hun:ter2@127.0.0.1:9/app", ["hun:ter2", "ter2"]),
        ("postgresql://bob:p@ss:w0rd@127.0.0.1:9/app", ["p@ss", "w0rd"]),
        ("postgresql://bob:hunter2@127.0.0.1:notaport/app", ["hunter2"]),
        ("postgres://127.0.0.1:9/app?password=hunter2&sslmode=disable", ["hunter2"]),
    ],
)
def test_inspect_never_prints_a_dsn_password(dsn, secrets, capsys):
    for argv in ([], ["--json"], ["--call", "c1"]):
        assert main(["inspect", dsn, *argv]) == 2
        captured = capsys.readouterr()
        for secret in secrets:
            assert secret not in captured.err + captured.out, captured.err
        assert "pipecat-summarizer inspect:" in captured.err


def test_inspect_with_a_password_in_the_dsn_works_and_never_shows_it(pg_server, capsys):
    dsn = pg_server.create_database("inspect_secret")
    _fill(dsn)
    with_password = dsn.replace("postgres@", "postgres:s3cr:et@")  # trust auth ignores it
    assert main(["inspect", with_password, "--user", "alice"]) == 0
    assert main(["inspect", with_password, "--call", "missing"]) == 1
    captured = capsys.readouterr()
    assert "call-1" in captured.out
    assert "s3cr" not in captured.out + captured.err


def test_mask_dsn_masks_the_whole_password():
    assert mask_dsn("postgresql://bob:hun:ter2@db:5432/app") == "postgresql://bob:***@db:5432/app"
    assert mask_dsn("postgresql://bob:p@ss@db/app") == "postgresql://bob:***@db/app"
    assert mask_dsn("postgresql://bob@db/app") == "postgresql://bob@db/app"
    assert mask_dsn("postgresql://db/app?password=x") == "postgresql://db/app?password=***"
    assert mask_dsn("failed: postgres://a:b@h/d refused") == "failed: postgres://a:***@h/d refused"
    assert mask_dsn("memory.db") == "memory.db"

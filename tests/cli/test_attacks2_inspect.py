"""Attack: ``inspect`` on rows archived without text whose reference carries hostile text.

A resumed call's reference row (``{"restored_from": [call_id, position]}``) names the call
that archived a message; call ids are the application's (a room name a client chose). JSON
keeps a control character as ``\\u001b``, plain ASCII that the terminal filter lets through;
decoding the reference must not turn it back into a raw escape on the operator's terminal.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from pipecat_summarizer.store import open_store
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord
from pipecat_summarizer_cli.main import main

ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e"


@pytest.mark.parametrize(
    "reference",
    [
        ["room\x1b[31m-1" + ESCAPES, 4],
        ["call-1", "4\x1b[2J" + ESCAPES],  # the position is not a number
        [{"nested": ESCAPES}, [ESCAPES]],
    ],
)
def test_a_reference_rows_hostile_call_id_never_reaches_the_terminal(tmp_path, capsys, reference):
    target = str(tmp_path / "rows.db")

    async def write():
        store = open_store(target)
        await store.write(
            [
                CallRecord("call-2", "bob", started_at=1_700_000_000),
                ArchivedMessage(
                    "call-2", 0, "user", "", json.dumps({"restored_from": reference}), user_id="bob"
                ),
            ]
        )
        await store.close()

    asyncio.run(write())
    assert main(["inspect", target, "--call", "call-2"]) == 0
    out = capsys.readouterr().out
    assert "restored" in out
    for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert raw not in out

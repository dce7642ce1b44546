"""SQLite, another PROCESS forgetting the caller (tests/store/forget_worker.py, holding its
forget where the deletes are made but not committed) while this process's call reaches its
turn: the turn's forget watch must see the forget and place nothing of the caller (bugs.md
S9-P-1: in WAL mode the watch read the snapshot before the forget and found no tombstone).
And the forgetting process killed there: the caller's rows are gone for recall at once, and
deleted from the file at the next open or the next forget. Real pipelines (a real
``LLMContextAggregatorPair`` fed transcriptions, ``ContextSummarizer`` with recall and
``RecallPrefetch``, Pipecat's OpenAI service against the local server)."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pipecat.frames.frames import DataFrame, Frame
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import run_test

from pipecat_summarizer import RecallPrefetch
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord
from tests.recall.test_attacks_dates import archived, utc
from tests.support.early_search import (
    BOB_HOTEL,
    RECALL,
    SISTER_ASK,
    desk,
    early_call,
    prefetch_pipeline,
    recall_blocks,
    seed_sister,
    spoken_turn,
    watched_store,
)
from tests.support.openai_server import Reply

ROOT = Path(__file__).resolve().parents[2]


class _OtherProcess:
    """The forgetting process: started, told to forget, held mid-way, released or killed."""

    def __init__(self, path: Path, user: str):
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.store.forget_worker", str(path), user],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.released = False

    async def line(self) -> str:
        """The worker's next line (``ready``, ``held``, ``done N``)."""
        assert self._proc.stdout is not None
        read = asyncio.to_thread(self._proc.stdout.readline)
        return (await asyncio.wait_for(read, 60)).strip()

    def tell(self) -> None:
        """Go on (start the forget; or commit the held transaction)."""
        assert self._proc.stdin is not None
        self._proc.stdin.write("go\n")
        self._proc.stdin.flush()

    async def hold(self) -> None:
        """Start the forget and return once its deletes are made, not committed."""
        self.tell()
        assert await self.line() == "held"

    def release(self) -> None:
        """Let the held forget commit (once)."""
        if not self.released:
            self.released = True
            self.tell()

    async def finish(self) -> int:
        """The forget's count, once the worker has ended."""
        self.release()
        done = await self.line()
        assert done.startswith("done "), done
        assert await asyncio.to_thread(self._proc.wait, 60) == 0
        return int(done.split()[1])

    def kill(self) -> None:
        """SIGKILL, and reap it."""
        self._proc.kill()
        self._proc.wait(60)


class _Hold(DataFrame):
    """Has the other process forget alice and hold the forget mid-way."""


class _Holder(FrameProcessor):
    def __init__(self, other: _OtherProcess):
        super().__init__()
        self._other = other
        self.held = False

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, _Hold):
            await self._other.hold()
            self.held = True
            return
        await self.push_frame(frame, direction)


async def test_a_forget_under_way_in_another_process_places_nothing_at_the_turn(
    openai_server, tmp_path
):
    path = tmp_path / "m.db"
    store = watched_store(str(path))
    await seed_sister(store)
    await store.open()
    other = _OtherProcess(path, "alice")
    try:
        assert await other.line() == "ready"
        holder = _Holder(other)

        def answer(body: dict) -> Reply:
            # the turn has decided what to place: only now may the forget commit
            other.release()
            return Reply("Sure.")

        openai_server.handler = answer
        context, summarizer, processor = desk(openai_server, store, user_id="alice", recall=RECALL)
        companion = RecallPrefetch(processor)
        try:
            pipeline = prefetch_pipeline(openai_server, context, processor, companion, holder)
            await run_test(pipeline, frames_to_send=spoken_turn(SISTER_ASK, between=[_Hold()]))
        finally:
            await summarizer.aclose()
        assert holder.held
        assert await other.finish() > 0
    finally:
        other.kill()
        await store.close()
    archive = companion.archive
    assert archive is not None and archive.follow_ups_started >= 1  # found before the forget
    assert openai_server.chat_requests  # the call went on
    assert recall_blocks(openai_server.chat_requests) == []
    sent = str(openai_server.chat_requests)
    assert "Marta" not in sent and "Porto" not in sent and "Friday" not in sent


def _rows(path: Path, user: str) -> list[tuple[str, str]]:
    """``user``'s rows in the file: (table, call)."""
    with sqlite3.connect(path) as conn:
        return sorted(
            (table, call)
            for table in ("calls", "messages", "compactions", "facts", "caller_facts")
            for (call,) in conn.execute(f"SELECT call_id FROM {table} WHERE user_id = ?", (user,))
        )


@pytest.mark.parametrize("later", ["open", "forget"])
async def test_the_forgetting_process_killed_mid_way(openai_server, tmp_path, later):
    path = tmp_path / "m.db"
    store = watched_store(str(path))  # a process that stays open throughout
    await seed_sister(store)
    await store.write(archived(BOB_HOTEL, call_id="b1", at=utc(2026, 5, 2), user_id="bob"))
    other = _OtherProcess(path, "alice")
    try:
        assert await other.line() == "ready"
        await other.hold()
    finally:
        other.kill()  # between its transactions (or inside its only one)
    try:
        # alice calls again after the forget: her new call's rows are hers to keep
        now = time.time() + 1.0
        await store.write(
            [
                CallRecord("a9", user_id="alice", started_at=now),
                ArchivedMessage("a9", 0, "user", "I moved to Lyon.", "{}", user_id="alice"),
            ]
        )
        # gone for recall at once: the store's reads, and a call's recall through a pipeline
        assert await store.forgotten_at("alice") is not None
        assert await store.search("Marta Porto", user_id="alice", any_word=True) == []
        assert [h.call_id for h in await store.search("Lyon", user_id="alice")] == ["a9"]
        assert [c.call_id for c in await store.calls("alice")] == ["a9"]
        assert (await store.caller_memory("alice")).calls == 1
        assert await store.messages("a1") == []
        assert await store.message("a1", 0) is None
        assert await store.messages_at([("a1", 0), ("a9", 0)]) == [
            None,
            await store.message("a9", 0),
        ]
        await early_call(openai_server, store, spoken_turn(SISTER_ASK))
        assert openai_server.chat_requests
        sent = str(openai_server.chat_requests)
        assert "Marta" not in sent and "Porto" not in sent and "Friday" not in sent
        old = {"a1", "a2", "a3", "a4"}  # her calls before the forget
        # still in the file: the deletes were not committed
        assert old <= {call for _, call in _rows(path, "alice")}
        # deleted later: at the next open (another process), or at this store's next forget
        if later == "open":
            again = SQLiteMemoryStore(path)
            await again.open()
            await again.close()
        else:
            await store.forget("nobody")
        rows = _rows(path, "alice")
        assert not old & {call for _, call in rows}
        assert ("calls", "a9") in rows and ("messages", "a9") in rows  # her new call's stay
        assert [h.call_id for h in await store.search("Lyon", user_id="alice")] == ["a9"]
        assert await store.search("Pensao", user_id="bob")  # another caller's rows stay
    finally:
        await store.close()

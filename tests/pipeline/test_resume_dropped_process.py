"""A dropped call resumes in another OS process: call 1 drops in this process (a
``CancelFrame`` with a tool call pending), call 2 of the same caller runs in a child process
(``python -m tests.pipeline.test_resume_dropped_process TARGET BASE_URL``) on the same store,
against this process's OpenAI-protocol server, whose requests the test reads. Both backends."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import SimpleNamespace

from tests.pipeline.test_resume_dropped import (
    AGAIN,
    CALL_1,
    assert_resumed,
    call,
    first_request,
    handler,
    in_view_at_end,
)

ROOT = Path(__file__).resolve().parents[2]


async def test_a_second_process_resumes_the_dropped_call(openai_server, store_target):
    openai_server.handler = handler
    pins = [("plan", "Gold plan customer")]
    await call(openai_server, store_target, "room-1", CALL_1, end="cancel", pins=pins)
    dropped = await in_view_at_end(store_target, "alice")
    openai_server.requests.clear()
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.pipeline.test_resume_dropped_process",
        store_target,
        openai_server.base_url,
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(child.communicate(), 120)
    assert child.returncode == 0, err.decode()[-2000:]
    assert_resumed(first_request(openai_server), dropped)


async def _second_call(target: str, base_url: str) -> None:
    await call(SimpleNamespace(base_url=base_url), target, "room-2", [AGAIN])


if __name__ == "__main__":
    asyncio.run(_second_call(sys.argv[1], sys.argv[2]))

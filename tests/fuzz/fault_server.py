"""A fault-injecting OpenAI-protocol summarizer server on 127.0.0.1 (aiohttp).

Each summary request is answered according to the current fault (or a per-request
``fault_for`` callback). It records every request, counts how many are in flight at once
(a client that gives up, for example on a timeout, closes its connection and is no longer
counted), and can refuse connections for real by closing its listening socket and opening
it again on the same port.

Healthy answers are checkable: the summary lists every message marker (``#u12``, ``#a3``,
``call_7b``...) found in the request, which includes the previous summary, so a test can
tell which messages a summary covers.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

# Markers the fuzzer writes at the start of every message it adds; tool call ids.
MARKER = re.compile(r"#[uaf]\d+\b|call_\d+_\d+\b")

FAULTS = (
    "ok",
    "timeout",  # slower than summarization_timeout
    "http500",
    "http429",
    "refused",  # nothing listens on the port
    "empty",  # content ""
    "whitespace",  # content "  \n\t "
    "null",  # content null
    "garbage",  # a 200 whose body is not JSON
    "nochoices",  # a 200 with an empty choices list
    "truncated",  # finish_reason "length", a record cut mid-way
    "slow",  # slow but within the timeout: succeeds
)
FAILING = frozenset(FAULTS) - {"ok", "slow"}


def covered_markers(text: str) -> list[str]:
    """The markers a healthy summary of ``text`` lists, sorted."""
    return sorted(set(MARKER.findall(text)))


def healthy_summary(body: dict) -> str:
    """A sectioned record whose DECISIONS line lists every marker in the request.

    DECISIONS, not FACTS: FACTS and CONSTRAINTS get pinned and left out of the summary
    message, and the markers must stay in the summary message to be checkable.
    """
    text = json.dumps(body.get("messages", []), ensure_ascii=False)
    markers = covered_markers(text)
    return (
        "FACTS:\n- none\nCONSTRAINTS:\n- none\nDECISIONS:\n- covered: "
        + (" ".join(markers) or "nothing")
        + "\nOPEN QUESTIONS:\n- none"
    )


@dataclass
class Call:
    """One request the server received."""

    fault: str
    started: float
    ended: float | None = None
    disconnected: bool = False
    body: dict = field(default_factory=dict)


class FaultServer:
    """The server.

    Args:
        unit: Seconds per time unit; ``delay_for`` values and the fault delays are in units,
            so a schedule can be compressed.
        timeout_units: The processor's ``summarization_timeout`` in units; "timeout" sleeps
            well past it and "slow" stays below it.
    """

    def __init__(self, *, unit: float = 1.0, timeout_units: float = 10.0):
        """Initialize; ``fault`` is the current fault for every request."""
        self.unit = unit
        self.timeout_units = timeout_units
        self.fault = "ok"
        self.fault_for: Callable[[int, dict], str] | None = None
        self.delay_for: Callable[[int, dict], float] | None = None
        self.mutate: Callable[[str], str] | None = None  # rewrites healthy answers (self-tests)
        self.calls: list[Call] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.overlaps: list[tuple[int, int]] = []  # (call index, in flight at its start)
        self.port = 0
        self.base_url = ""
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._listening = False

    async def start(self) -> str:
        """Listen on a free loopback port; returns the ``/v1`` base URL."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completions)
        # handler_cancellation: a client that gives up (timeout) ends the handler, so the
        # in-flight count is the client's view, not a zombie sleep.
        self._runner = web.AppRunner(app, shutdown_timeout=0.1, handler_cancellation=True)
        await self._runner.setup()
        await self._listen()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        return self.base_url

    async def _listen(self) -> None:
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await self._site.start()
        self.port = self._site._server.sockets[0].getsockname()[1]
        self._listening = True

    async def set_fault(self, fault: str) -> None:
        """Switch the fault; "refused" closes the listening socket, others reopen it."""
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}")
        self.fault = fault
        if fault == "refused" and self._listening:
            await self._site.stop()
            self._listening = False
        elif fault != "refused" and not self._listening:
            await self._listen()

    async def stop(self) -> None:
        """Stop the server."""
        if self._runner:
            await self._runner.cleanup()
            self._runner = None

    @property
    def failing_calls(self) -> int:
        """Calls answered with a failing fault."""
        return sum(1 for c in self.calls if c.fault in FAILING)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        index = len(self.calls)
        fault = self.fault_for(index, body) if self.fault_for else self.fault
        if fault == "refused":  # a per-request refusal: the closest is a reset
            fault = "http500"
        call = Call(fault=fault, started=time.monotonic(), body=body)
        self.calls.append(call)
        self.in_flight += 1
        if self.in_flight > 1:
            self.overlaps.append((index, self.in_flight))
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._answer(fault, index, body)
        except asyncio.CancelledError:
            call.disconnected = True
            raise
        finally:
            self.in_flight -= 1
            call.ended = time.monotonic()

    async def _answer(self, fault: str, index: int, body: dict) -> web.StreamResponse:
        delay = self.delay_for(index, body) if self.delay_for else 0.0
        if fault == "timeout":
            delay = self.timeout_units * 3
        elif fault == "slow":
            delay = self.timeout_units * 0.6
        if delay:
            await asyncio.sleep(delay * self.unit)
        if fault in ("http500", "http429"):
            status = 500 if fault == "http500" else 429
            return web.json_response(
                {"error": {"message": f"injected {status}", "type": "server_error"}},
                status=status,
                headers={"retry-after": "0"},
            )
        if fault == "garbage":
            return web.Response(
                body=b"\x00\xffnot json <html>502</html>", content_type="application/json"
            )
        content: str | None = healthy_summary(body)
        if self.mutate is not None:
            content = self.mutate(content)
        finish = "stop"
        if fault == "empty":
            content = ""
        elif fault == "whitespace":
            content = "  \n\t  "
        elif fault == "null":
            content = None
        elif fault == "truncated":
            content, finish = content[: len(content) // 2], "length"
        choices = [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish,
            }
        ]
        if fault == "nochoices":
            choices = []
        return web.json_response(
            {
                "id": f"sum-{index}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "cheap"),
                "choices": choices,
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )

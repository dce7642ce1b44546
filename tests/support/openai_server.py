"""A real OpenAI-protocol HTTP server on 127.0.0.1 for tests (aiohttp).

It answers ``POST /v1/chat/completions`` with JSON, or with SSE chunks when ``stream`` is
true, records every request body, and lets a test script the reply of each request.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ClassVar

from aiohttp import web


async def serve_on_loopback(app: web.Application) -> tuple[web.AppRunner, str]:
    """Serve ``app`` on a free 127.0.0.1 port; returns its runner and its ``/v1`` base URL."""
    runner = web.AppRunner(app, shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}/v1"


def free_port() -> int:
    """A loopback port nothing listens on (just now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Reply:
    """How the server answers one request."""

    text: str | None = "OK."
    status: int = 200
    delay: float = 0.0
    tool_calls: list[dict] | None = None
    finish_reason: str = "stop"
    error_message: str | None = None  # the error body's message (default "scripted <status>")
    usage: dict | None = None  # the reply's "usage" as given (default: about chars/4 of the body)


def is_summary_request(body: dict) -> bool:
    """True for our summarizer's requests (non-streaming, memory-record prompt)."""
    first = (body.get("messages") or [{}])[0]
    return not body.get("stream") and "memory record" in str(first.get("content", ""))


Handler = Callable[[dict], Reply | Awaitable[Reply]]


class FakeOpenAIServer:
    """The server. ``handler(body) -> Reply`` decides each answer; requests are recorded."""

    #: The servers started and not yet stopped (``tests.support.settle`` asks them).
    live: ClassVar[set[FakeOpenAIServer]] = set()

    def __init__(self, handler: Handler | None = None):
        """Initialize with an optional handler (default: 'OK.' for chat, a summary else)."""
        self.handler: Handler = handler or self.default_handler
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []  # each request's headers, in order
        self.in_flight = 0  # requests being answered now
        self.max_in_flight = 0
        self.summary_in_flight = 0
        self.max_summary_in_flight = 0
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    @staticmethod
    def default_handler(body: dict) -> Reply:
        """Chat turns get 'OK.'; summary requests get a small sectioned summary."""
        if is_summary_request(body):
            return Reply(
                "FACTS:\n- summarized\nCONSTRAINTS:\n- none\nDECISIONS:\n- none\n"
                "OPEN QUESTIONS:\n- none"
            )
        return Reply("OK.")

    @property
    def summary_requests(self) -> list[dict]:
        """The recorded summary requests."""
        return [b for b in self.requests if is_summary_request(b)]

    @property
    def chat_requests(self) -> list[dict]:
        """The recorded main-LLM requests."""
        return [b for b in self.requests if not is_summary_request(b)]

    async def start(self) -> str:
        """Start listening on a free loopback port; returns the ``/v1`` base URL."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completions)
        self._runner, self.base_url = await serve_on_loopback(app)
        FakeOpenAIServer.live.add(self)
        return self.base_url

    @property
    def open_connections(self) -> int:
        """Client connections the server holds open now (keep-alive ones included)."""
        server = self._runner.server if self._runner else None
        return len(server.connections) if server is not None else 0

    async def stop(self) -> None:
        """Stop the server."""
        FakeOpenAIServer.live.discard(self)
        if self._runner:
            await self._runner.cleanup()

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        summary = is_summary_request(body)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if summary:
            self.summary_in_flight += 1
            self.max_summary_in_flight = max(self.max_summary_in_flight, self.summary_in_flight)
        try:
            return await self._answer(request, body)
        finally:
            self.in_flight -= 1
            if summary:
                self.summary_in_flight -= 1

    async def _answer(self, request: web.Request, body: dict) -> web.StreamResponse:
        reply = self.handler(body)
        if inspect.isawaitable(reply):
            reply = await reply
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.status != 200:
            message = reply.error_message or f"scripted {reply.status}"
            return web.json_response(
                {"error": {"message": message, "type": "server_error"}},
                status=reply.status,
            )
        created = int(time.time())
        base = {"id": "chatcmpl-test", "created": created, "model": body.get("model", "m")}
        prompt_tokens = len(json.dumps(body.get("messages", []))) // 4
        completion_tokens = len(reply.text or "") // 4
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if reply.usage is not None:
            usage = reply.usage
        if not body.get("stream"):
            message = {"role": "assistant", "content": reply.text}
            if reply.tool_calls:
                message["tool_calls"] = reply.tool_calls
            return web.json_response(
                {
                    **base,
                    "object": "chat.completion",
                    "choices": [
                        {"index": 0, "message": message, "finish_reason": reply.finish_reason}
                    ],
                    "usage": usage,
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(payload: dict) -> None:
            chunk = {**base, "object": "chat.completion.chunk", **payload}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        if reply.tool_calls:
            calls = [{"index": i, **c} for i, c in enumerate(reply.tool_calls)]
            await send(
                {
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "tool_calls": calls},
                            "finish_reason": None,
                        }
                    ]
                }
            )
            finish = "tool_calls"
        else:
            for word in (reply.text or "").split(" "):
                await send(
                    {
                        "choices": [
                            {"index": 0, "delta": {"content": word + " "}, "finish_reason": None}
                        ]
                    }
                )
            finish = "stop"
        await send({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        await send({"choices": [], "usage": usage})
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

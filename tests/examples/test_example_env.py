"""The example bot's sessions send requests only where the operator's shell says.

Pipecat's development runner calls ``load_dotenv(override=True)`` when it is imported; it
finds the ``.env`` by walking up from its own files, so the project's ``.env`` wins over the
shell whenever Pipecat is installed inside the project (an in-tree ``.venv``). These tests
build that layout in a temporary project: a ``.env`` there, and this venv's Pipecat reached
through ``site/pipecat`` (a symlink) on ``PYTHONPATH``. The bot runs as a subprocess with a
controlled environment, and a real WebRTC client (aiortc) starts a session: the greeting's
chat request and its speech request must reach the server the shell names, with the
exported key. Every server is on 127.0.0.1; no ICE server is configured on either side.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import pipecat
import pytest
from aiohttp import web

from tests.support.openai_server import free_port, serve_on_loopback

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "voice_bot.py"
PIPECAT_DIR = Path(str(pipecat.__file__)).resolve().parent
# Variables of the bot that a developer's shell may hold; the tests set their own.
BOT_VARIABLES = (
    "BOT_MODE",
    "OPENAI_API_KEY",
    "OPENAI_MODEL",
    "LLM_BASE_URL",
    "LLM_API_KEY",
    "STT_BASE_URL",
    "STT_API_KEY",
    "TTS_BASE_URL",
    "TTS_API_KEY",
    "SUMMARY_BASE_URL",
    "SUMMARY_API_KEY",
    "SUMMARY_MODEL",
    "LOCAL_LLM_BASE_URL",
    "LOCAL_LLM_API_KEY",
    "MEMORY_STORE",
    "CALLER_ID",
    "PIPECAT_ICE_SERVERS",
)
SESSION_TIMEOUT_S = 60.0
PCM_SILENCE = b"\x00\x00" * 2400  # 0.1 s of 24 kHz 16-bit mono, what OpenAI TTS streams


class RecordingServer:
    """An OpenAI-protocol server on 127.0.0.1 that records the path and key of every request.

    Chat completions stream a short answer, ``/audio/speech`` streams PCM silence and
    ``/audio/transcriptions`` returns a short text; anything else is recorded and refused.
    """

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []  # (path, Authorization header)
        self.base_url = ""
        self._runner: web.AppRunner | None = None

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner, self.base_url = await serve_on_loopback(app)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.path, request.headers.get("Authorization", "")))
        if request.path.endswith("/chat/completions"):
            body = await request.json()
            if not body.get("stream"):
                return web.json_response(_completion(body, "FACTS:\n- none"))
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for chunk in _chunks(body, "Hello there."):
                await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
            return response
        if request.path.endswith("/audio/speech"):
            await request.read()
            response = web.StreamResponse(headers={"Content-Type": "audio/pcm"})
            await response.prepare(request)
            await response.write(PCM_SILENCE)
            return response
        if request.path.endswith("/audio/transcriptions"):
            await request.read()
            return web.json_response({"text": "hello"})
        return web.json_response({"error": {"message": "not served here"}}, status=404)


def _completion(body: dict, text: str) -> dict:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "test"),
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _chunks(body: dict, text: str) -> list[dict]:
    def chunk(delta: dict, finish: str | None) -> dict:
        return {
            "id": "chatcmpl-test",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": body.get("model", "test"),
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    return [chunk({"role": "assistant", "content": text}, None), chunk({}, "stop")]


def _host_addresses() -> list[str]:
    from aioice.ice import get_host_addresses

    return get_host_addresses(use_ipv4=True, use_ipv6=True)


# ICE never offers 127.0.0.1 (aioice leaves loopback out): the peers meet on this host's own
# interface addresses, so the packets stay on this machine. Without such an address there
# is no WebRTC session to hold.
needs_host_address = pytest.mark.skipif(
    not _host_addresses(), reason="WebRTC needs a non-loopback address on this host"
)


@pytest.fixture
async def servers():
    right, wrong = RecordingServer(), RecordingServer()
    await right.start()
    await wrong.start()
    yield right, wrong
    await right.stop()
    await wrong.stop()


def project(tmp_path: Path, dotenv: str) -> Path:
    """A project directory with ``.env`` and Pipecat installed below it (as an in-tree venv)."""
    (tmp_path / ".env").write_text(dotenv)
    site = tmp_path / "site"
    site.mkdir()
    (site / "pipecat").symlink_to(PIPECAT_DIR, target_is_directory=True)
    return site


def bot_environment(site: Path, exported: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in BOT_VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    env["HF_HUB_OFFLINE"] = "1"  # no model download, whatever mode the bot ends up in
    env.update(exported)
    return env


async def run_session(cwd: Path, env: dict[str, str], servers: tuple) -> str:
    """Start the bot, hold one WebRTC session until it has spoken its greeting; return its log.

    The session is done when a chat request and a speech request reached either server, or
    the bot logged that it would not start.
    """
    from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

    port = free_port()
    log_path = cwd / "bot.log"
    with log_path.open("w") as log:
        bot = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "-t", "webrtc", "--host", "127.0.0.1"]
            + ["--port", str(port)],
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))  # no STUN: host candidates only
    try:
        channel = pc.createDataChannel("chat")
        opened = asyncio.Event()
        channel.on("open", opened.set)
        pc.addTransceiver("audio", direction="sendrecv")
        await pc.setLocalDescription(await pc.createOffer())
        offer = {"sdp": pc.localDescription.sdp, "type": pc.localDescription.type}
        answer = await post_offer(f"http://127.0.0.1:{port}/api/offer", offer, bot)
        await pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], answer["type"]))
        await asyncio.wait_for(opened.wait(), SESSION_TIMEOUT_S)
        ready = {"version": "1.0.0", "about": {"library": "test"}}
        channel.send(
            json.dumps({"label": "rtvi-ai", "type": "client-ready", "id": "1", "data": ready})
        )

        def done() -> bool:
            paths = [p for server in servers for p in server.paths()]
            spoke = any(p.endswith("/chat/completions") for p in paths) and any(
                p.endswith("/audio/speech") for p in paths
            )
            return spoke or "Not starting the bot" in log_path.read_text()

        for _ in range(int(SESSION_TIMEOUT_S / 0.05)):
            if done() or bot.poll() is not None:
                break
            await asyncio.sleep(0.05)
    finally:
        await pc.close()
        if bot.poll() is None:
            bot.terminate()
        try:
            bot.wait(timeout=10)
        except subprocess.TimeoutExpired:
            bot.kill()
            bot.wait()
    return log_path.read_text()


async def post_offer(url: str, offer: dict, bot: subprocess.Popen) -> dict:
    """POST the offer once the runner listens (it takes a few seconds to import)."""
    async with aiohttp.ClientSession() as http:
        for _ in range(int(SESSION_TIMEOUT_S / 0.1)):
            if bot.poll() is not None:
                raise AssertionError(f"the bot exited with {bot.returncode} before the session")
            try:
                async with http.post(url, json=offer) as response:
                    response.raise_for_status()
                    return await response.json()
            except aiohttp.ClientConnectorError:
                await asyncio.sleep(0.1)
    raise AssertionError("the runner never answered the offer")


def endpoints(server: RecordingServer) -> dict[str, str]:
    return {
        name: server.base_url
        for name in ("LLM_BASE_URL", "SUMMARY_BASE_URL", "STT_BASE_URL", "TTS_BASE_URL")
    }


@needs_host_address
async def test_a_session_sends_requests_only_where_the_shell_says(tmp_path, servers):
    right, wrong = servers
    # The .env a developer filled in: a key, and endpoints (the "wrong" server stands in for
    # api.openai.com, so nothing leaves 127.0.0.1 even when the bot goes the wrong way).
    dotenv = "BOT_MODE=openai\nOPENAI_API_KEY=sk-dotenv\n" + "".join(
        f"{name}={url}\n{name.replace('BASE_URL', 'API_KEY')}=sk-dotenv\n"
        for name, url in endpoints(wrong).items()
    )
    exported = {"OPENAI_API_KEY": "sk-exported"}
    for name, url in endpoints(right).items():
        exported[name] = url
        exported[name.replace("BASE_URL", "API_KEY")] = "sk-exported"
    site = project(tmp_path, dotenv)

    log = await run_session(tmp_path, bot_environment(site, exported), servers)

    assert wrong.requests == [], f"requests went to the .env's server: {wrong.paths()}"
    paths = right.paths()
    assert any(p.endswith("/chat/completions") for p in paths), log
    assert any(p.endswith("/audio/speech") for p in paths), log
    assert {auth for _, auth in right.requests} == {"Bearer sk-exported"}
    assert "sk-dotenv" not in log and "sk-exported" not in log
    # The startup line and the session's own line name the same server.
    assert f"voice_bot: openai mode; LLM gpt-4.1 at {right.base_url}" in log
    assert f"Starting bot: openai mode; LLM gpt-4.1 at {right.base_url}" in log


@needs_host_address
@pytest.mark.parametrize(
    "dotenv_line",
    [
        "BOT_MODE=local\n",  # a session in local mode would not start (no Whisper/Piper here)
        "OPENAI_API_KEY=\n",  # as in .env.example: an empty line must not wipe the key
    ],
    ids=["bot-mode", "empty-key"],
)
async def test_exported_mode_and_key_survive_the_dotenv_file(tmp_path, servers, dotenv_line):
    right, wrong = servers
    dotenv = (
        f"BOT_MODE=openai\nOPENAI_API_KEY=sk-dotenv\nLOCAL_LLM_BASE_URL={wrong.base_url}\n"
        + "".join(f"{name}={url}\n" for name, url in endpoints(wrong).items())
        + dotenv_line  # the later line wins in the file
    )
    exported = {"BOT_MODE": "openai", "OPENAI_API_KEY": "sk-exported", **endpoints(right)}
    site = project(tmp_path, dotenv)

    log = await run_session(tmp_path, bot_environment(site, exported), servers)

    assert "Not starting the bot" not in log, log
    assert wrong.requests == [], f"requests went to the .env's server: {wrong.paths()}"
    paths = right.paths()
    assert any(p.endswith("/chat/completions") for p in paths), log
    assert any(p.endswith("/audio/speech") for p in paths), log
    # A custom server without its own *_API_KEY gets the placeholder, never the OpenAI key.
    assert {auth for _, auth in right.requests} == {"Bearer not-needed"}


# What a session reads once the runner is imported, as main() imports it. Local mode cannot
# hold a real session here (no Whisper or Piper), so this checks the settings every session
# builds its services from (bot() calls Settings.from_env()).
SESSION_SETTINGS = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("voice_bot", sys.argv[1])
vb = importlib.util.module_from_spec(spec)
sys.modules["voice_bot"] = vb
spec.loader.exec_module(vb)
vb.load_env_file()
vb.import_runner()
assert "pipecat.runner.run" in sys.modules
print("SESSION", vb.Settings.from_env().describe())
"""


def test_exported_local_mode_wins_after_the_runner_import(tmp_path):
    dotenv = "BOT_MODE=openai\nOPENAI_API_KEY=sk-dotenv\nLOCAL_LLM_BASE_URL=http://127.0.0.1:9/v1\n"
    site = project(tmp_path, dotenv)
    exported = {"BOT_MODE": "local", "LOCAL_LLM_BASE_URL": "http://127.0.0.1:8/v1"}
    result = subprocess.run(
        [sys.executable, "-c", SESSION_SETTINGS, str(EXAMPLE)],
        cwd=tmp_path,
        env=bot_environment(site, exported),
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("SESSION ")]
    assert lines, result.stdout + result.stderr
    assert lines[0].startswith("SESSION local mode; LLM llama3.2 at http://127.0.0.1:8/v1;")

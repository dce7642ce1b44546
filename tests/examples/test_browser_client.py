"""The example bot's own page (examples/client/) in a real headless Chromium, offline.

``examples/voice_bot.py`` runs as a process under Pipecat's development runner, its LLM,
summaries, speech-to-text and text-to-speech pointed at local servers on 127.0.0.1. Debian's
Chromium (driven by Playwright) opens the page the bot serves and clicks Connect; its
microphone is a WAV spoken by espeak-ng (Chromium's fake capture device, which loops the
file), so every loop of the file is a user turn: Silero VAD in the bot cuts it, the
transcription server names it, the LLM answers. The thresholds are small so the context is
compacted within a few turns. The test checks that the page connects over SmallWebRTC, that
user turns reach the bot and are shown, that a compaction reaches the page as an RTVI server
message and is shown, and that the browser asks nothing of any host but 127.0.0.1: every
request is recorded and any other host is blocked and fails the test.

Without Chromium (``/usr/bin/chromium``), espeak-ng or Playwright the test is skipped, except
in CI (``CI=true``), where ``.ci/run`` installs them and a skip would hide a broken client.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shutil
import subprocess
import sys
import wave
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from aiohttp import web

from tests.support.openai_server import (
    FakeOpenAIServer,
    Reply,
    free_port,
    is_summary_request,
    serve_on_loopback,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "voice_bot.py"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ESPEAK = shutil.which("espeak-ng")
IN_CI = os.environ.get("CI", "").lower() == "true"
LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}
SPOKEN = "I am planning a trip to Lisbon."
SUMMARY_TEXT = "FACTS:\n- the caller plans a trip to Lisbon in May\nOPEN QUESTIONS:\n- none"
SCREENSHOT = Path("/tmp/pipecat_summarizer_browser_client.png")
# Generous: Chromium and the runner start in a few seconds; each turn is one loop of the WAV.
DEADLINE_S = 60.0
# Chromium as root in a container, offline: no sandbox, GPU, QUIC or background traffic.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream",
    "--autoplay-policy=no-user-gesture-required",
]


def _missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    if ESPEAK is None:
        return "no espeak-ng (apt-get install espeak-ng)"
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "no playwright (pip install -e '.[dev]')"
    return None


MISSING = _missing()
pytestmark = pytest.mark.skipif(
    MISSING is not None and not IN_CI,
    reason=f"browser test skipped (with CI=true it fails instead): {MISSING}",
)


def _host_addresses() -> list[str]:
    from aioice.ice import get_host_addresses

    return get_host_addresses(use_ipv4=True, use_ipv6=True)


def microphone_wav(path: Path) -> None:
    """espeak-ng says one sentence, then 3.5 s of silence: the turn ends by the smart-turn
    analyzer's 3 s of silence even when it judges the sentence incomplete."""
    spoken = subprocess.run(
        [ESPEAK or "espeak-ng", "-s", "170", "--stdout", SPOKEN],
        check=True,
        capture_output=True,
        timeout=30,
    ).stdout
    with wave.open(io.BytesIO(spoken)) as src:
        params, frames = src.getparams(), src.readframes(src.getnframes())
    silence = b"\x00" * (params.sampwidth * params.nchannels * params.framerate * 7 // 2)
    with wave.open(str(path), "wb") as out:
        out.setparams(params)
        out.writeframes(frames + silence)


class SpeechServer:
    """OpenAI's speech endpoints on 127.0.0.1: each transcription is a numbered turn, and
    speech is 0.3 s of a quiet 440 Hz tone (24 kHz PCM, what OpenAI TTS streams)."""

    def __init__(self) -> None:
        self.transcriptions = 0
        self.speeches = 0
        self.base_url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_post("/v1/audio/speech", self._speak)
        self._runner, self.base_url = await serve_on_loopback(app)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _transcribe(self, request: web.Request) -> web.Response:
        await request.read()
        self.transcriptions += 1
        return web.json_response({"text": f"Turn {self.transcriptions}: {SPOKEN}"})

    async def _speak(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.speeches += 1
        import math
        import struct

        samples = (int(2000 * math.sin(2 * math.pi * 440 * n / 24000)) for n in range(7200))
        pcm = b"".join(struct.pack("<h", s) for s in samples)
        response = web.StreamResponse(headers={"Content-Type": "audio/pcm"})
        await response.prepare(request)
        await response.write(pcm)
        return response


def llm_handler(body: dict) -> Reply:
    if is_summary_request(body):
        return Reply(SUMMARY_TEXT, delay=0.2)
    last = str(body["messages"][-1].get("content", ""))
    if last.startswith("Turn "):
        return Reply(f"Noted, {last.split(':', 1)[0].lower()}.")
    return Reply("Hello, I am the test bot.")


def bot_env(llm: FakeOpenAIServer, speech: SpeechServer) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith(("_BASE_URL", "_API_KEY"))
        and k not in ("BOT_MODE", "MEMORY_STORE", "CALLER_ID", "PIPECAT_ICE_SERVERS")
        and not k.startswith("SUMMARY_")
    }
    env.update(
        {
            "BOT_MODE": "openai",
            "OPENAI_API_KEY": "sk-test",
            "LLM_BASE_URL": llm.base_url,
            "SUMMARY_BASE_URL": llm.base_url,
            "STT_BASE_URL": speech.base_url,
            "TTS_BASE_URL": speech.base_url,
            # compact after a few turns: 4 messages, keep 2
            "SUMMARY_MAX_MESSAGES": "4",
            "SUMMARY_KEEP_MESSAGES": "2",
            "HF_HUB_OFFLINE": "1",
        }
    )
    return env


async def wait_until_listening(url: str, bot: subprocess.Popen, log: Path) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as http:
        for _ in range(int(DEADLINE_S / 0.1)):
            if bot.poll() is not None:
                raise AssertionError(f"the bot exited with {bot.returncode}:\n{log.read_text()}")
            try:
                async with http.get(url) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientConnectorError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("the runner never served the page")


@pytest.mark.skipif(not _host_addresses(), reason="WebRTC needs a non-loopback address")
async def test_the_page_talks_to_the_bot_offline_and_shows_each_compaction(tmp_path):
    assert MISSING is None, f"CI must run the browser test: {MISSING}"
    from playwright.async_api import async_playwright

    wav = tmp_path / "microphone.wav"
    microphone_wav(wav)
    llm, speech = FakeOpenAIServer(llm_handler), SpeechServer()
    await llm.start()
    await speech.start()
    port = free_port()
    log = tmp_path / "bot.log"
    with log.open("w") as out:
        bot = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "-t", "webrtc", "--host", "127.0.0.1"]
            + ["--port", str(port)],
            cwd=tmp_path,
            env=bot_env(llm, speech),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    requests: list[str] = []
    blocked: list[str] = []
    try:
        root = f"http://127.0.0.1:{port}/"
        await wait_until_listening(root, bot, log)
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=CHROMIUM,
                headless=True,
                args=[*CHROMIUM_ARGS, f"--use-file-for-fake-audio-capture={wav}"],
            )
            context = await browser.new_context(viewport={"width": 1100, "height": 800})

            async def guard(route):
                url = route.request.url
                requests.append(url)
                if urlsplit(url).scheme in ("http", "https", "ws", "wss") and (
                    urlsplit(url).hostname not in LOCAL_HOSTS
                ):
                    blocked.append(url)
                    await route.abort("blockedbyclient")
                else:
                    await route.continue_()

            await context.route("**/*", guard)
            context.on("request", lambda r: requests.append(r.url))
            page = await context.new_page()

            async def shown(script: str) -> None:
                """Wait for ``script`` to hold on the page; on time-out say what it shows."""
                try:
                    await page.wait_for_function(script, timeout=DEADLINE_S * 1000)
                except Exception:
                    await page.screenshot(path=str(SCREENSHOT), full_page=True)
                    seen = await page.evaluate("window.botMessages")
                    text = await page.inner_text("body")
                    raise AssertionError(
                        f"never true: {script}\npage: {text}\nmessages: {seen}\n"
                        f"speech: {speech.transcriptions} transcriptions, {speech.speeches} "
                        f"speeches; LLM: {len(llm.requests)} requests\n"
                        f"bot log:\n{log.read_text()[-6000:]}"
                    ) from None

            await page.goto(root)  # the bot's redirect to its own page
            await page.click("#connect")
            await shown("document.querySelector('#status').dataset.state === 'connected'")
            await shown("document.querySelector('#transcript li.user') !== null")
            await shown("document.querySelector('#compactions li.compaction') !== null")
            # the next reply after the compaction, for the screenshot
            await shown(
                "[...document.querySelectorAll('#transcript li')].slice(-1)[0].className === 'bot'"
            )
            await page.screenshot(path=str(SCREENSHOT), full_page=True)
            card = await page.inner_text("#compactions li.compaction")
            user_turns = await page.locator("#transcript li.user").all_inner_texts()
            bot_turns = await page.locator("#transcript li.bot").all_inner_texts()
            messages = await page.evaluate("window.botMessages")
            # the bot's voice is playing in the page
            playing = await page.evaluate(
                """() => {
                    const audio = document.getElementById('bot-audio');
                    const tracks = audio.srcObject ? audio.srcObject.getAudioTracks() : [];
                    const live = tracks.length === 1 && tracks[0].readyState === 'live';
                    const ok = live && !audio.paused && audio.currentTime > 0;
                    return ok || {n: tracks.length, paused: audio.paused, t: audio.currentTime};
                }"""
            )
            # Disconnect ends the bot's session (so the runner can stop at once)
            await page.click("#connect")
            await shown("document.querySelector('#status').dataset.state === 'idle'")
            for _ in range(50):
                if "Client disconnected" in log.read_text():
                    break
                await asyncio.sleep(0.1)
            await browser.close()
    finally:
        if bot.poll() is None:
            bot.terminate()
        try:
            bot.wait(timeout=10)
        except subprocess.TimeoutExpired:
            bot.kill()
            bot.wait()
        await llm.stop()
        await speech.stop()

    report = f"messages {json.dumps(messages)}\nbot log:\n{log.read_text()[-4000:]}"
    assert blocked == [], f"the page asked other hosts: {blocked}"
    assert all(
        urlsplit(u).hostname in LOCAL_HOSTS for u in requests if urlsplit(u).scheme != "data"
    ), requests
    # User turns reached the bot (transcribed from the fake microphone) and the page.
    assert speech.transcriptions >= 1 and any(SPOKEN in t for t in user_turns), report
    chats = [
        b for b in llm.chat_requests if str(b["messages"][-1].get("content")).startswith("Turn")
    ]
    assert chats, report
    assert any("Noted, turn" in t for t in bot_turns), report
    assert playing is True, f"the bot's audio is not playing in the page: {playing}\n{report}"
    # A compaction reached the page with its figures and the summary.
    assert llm.summary_requests and messages.get("server-message"), report
    # the newest card first: by the time it is read, a later compaction may have landed
    assert re.match(r"Compaction #\d+ ", card) and "messages summarized" in card, (
        f"{card}\n{report}"
    )
    assert "before" in card and "after" in card and "tokens" in card, card
    assert "the caller plans a trip to Lisbon in May" in card, card  # what was summarized

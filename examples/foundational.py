"""Foundational example: a voice bot whose context is summarized in the background.

A ``ContextSummarizer`` sits between the user aggregator and the LLM, its companion
``summarizer.after_llm()`` right after the LLM. When the context passes the thresholds, the
older turns are summarized on a cheap secondary model while the conversation goes on, and the
summary is spliced into the context; each compaction fires ``on_context_compacted``.

One transport (SmallWebRTC), OpenAI for speech-to-text, the LLM, text-to-speech and summaries::

    pip install -e ".[example]"
    export OPENAI_API_KEY=...
    python examples/foundational.py      # Pipecat's development runner
    # open http://localhost:7860/client (Pipecat's prebuilt page: it loads a bundle from a
    # CDN, so it needs the internet; examples/voice_bot.py serves an offline page of its own)

No key? ``python examples/text_chat.py`` runs in a terminal with a local stand-in model.
"""

from __future__ import annotations

import os
import sys

from loguru import logger
from pipecat.frames.frames import LLMRunFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.runner.types import RunnerArguments
from pipecat.transports.base_transport import BaseTransport, TransportParams
from pipecat.workers.runner import WorkerRunner

from pipecat_summarizer import (
    ContextCompactedEvent,
    ContextSummarizer,
    LLMAutoContextSummarizationConfig,
    LLMContextSummaryConfig,
    OpenAISummarizer,
    Summarizer,
    SummaryFailedEvent,
)

SYSTEM_PROMPT = (
    "You are a friendly assistant in a voice conversation. Keep answers to one to three short "
    "sentences, with no formatting that cannot be spoken. Earlier parts of this conversation "
    "may appear as a 'Conversation summary'; treat it as what was said before."
)


def build_pipeline(
    *,
    transport: BaseTransport,
    stt: FrameProcessor,
    llm: FrameProcessor,
    tts: FrameProcessor,
    summary_backend: Summarizer,
    vad_analyzer=None,
) -> tuple[Pipeline, LLMContext, ContextSummarizer]:
    """The bot's pipeline, with the summarizer and its companion around the LLM."""
    context = LLMContext()  # the system prompt is the LLM's system_instruction
    aggregators = LLMContextAggregatorPair(
        context, user_params=LLMUserAggregatorParams(vad_analyzer=vad_analyzer)
    )
    summarizer = ContextSummarizer(
        context=context,
        config=LLMAutoContextSummarizationConfig(
            max_context_tokens=8000,  # Pipecat's defaults
            max_unsummarized_messages=20,
            summary_config=LLMContextSummaryConfig(min_messages_after_summary=4),
        ),
        summarizer=summary_backend,
    )

    @summarizer.event_handler("on_context_compacted")
    async def on_context_compacted(processor, event: ContextCompactedEvent):
        logger.info(
            f"Compacted: {event.messages_summarized} messages summarized, "
            f"{event.messages_kept} kept, {event.tokens_before} -> {event.tokens_after} tokens"
        )

    @summarizer.event_handler("on_summary_failed")
    async def on_summary_failed(processor, event: SummaryFailedEvent):
        logger.warning(f"Summary failed; next attempt in {event.retry_in_s:.0f}s")

    pipeline = Pipeline(
        [
            transport.input(),
            stt,
            aggregators.user(),
            summarizer,  # between the user aggregator and the LLM
            llm,
            summarizer.after_llm(),  # its companion, right after the LLM
            tts,
            transport.output(),
            aggregators.assistant(),
        ]
    )
    return pipeline, context, summarizer


async def run_bot(transport: BaseTransport, runner_args: RunnerArguments) -> None:
    """Run one session on ``transport`` with OpenAI's services."""
    from pipecat.audio.vad.silero import SileroVADAnalyzer
    from pipecat.services.openai.llm import OpenAILLMService
    from pipecat.services.openai.stt import OpenAISTTService
    from pipecat.services.openai.tts import OpenAITTSService

    key = os.environ["OPENAI_API_KEY"]
    summary_backend = OpenAISummarizer(model="gpt-4o-mini", api_key=key)
    pipeline, context, _ = build_pipeline(
        transport=transport,
        stt=OpenAISTTService(api_key=key),
        llm=OpenAILLMService(
            api_key=key, settings=OpenAILLMService.Settings(system_instruction=SYSTEM_PROMPT)
        ),
        tts=OpenAITTSService(api_key=key),
        summary_backend=summary_backend,
        vad_analyzer=SileroVADAnalyzer(),
    )
    worker = PipelineWorker(pipeline, params=PipelineParams(enable_metrics=True))
    runner = WorkerRunner(handle_sigint=runner_args.handle_sigint)
    await runner.add_workers(worker)

    @transport.event_handler("on_client_connected")
    async def on_client_connected(transport, client):
        context.add_message({"role": "developer", "content": "Briefly introduce yourself."})
        await worker.queue_frames([LLMRunFrame()])

    @transport.event_handler("on_client_disconnected")
    async def on_client_disconnected(transport, client):
        await runner.cancel()

    try:
        await runner.run()
    finally:
        await summary_backend.aclose()


async def bot(runner_args: RunnerArguments) -> None:
    """Entry point of Pipecat's development runner, called for each session."""
    from pipecat.runner.utils import create_transport

    transport = await create_transport(
        runner_args,
        {"webrtc": lambda: TransportParams(audio_in_enabled=True, audio_out_enabled=True)},
    )
    await run_bot(transport, runner_args)


if __name__ == "__main__":
    from pipecat.runner.run import main

    # Pipecat logs every full request at DEBUG; INFO keeps one line per compaction and the
    # services' lifecycle (LOG_LEVEL=DEBUG to see everything).
    logger.remove()
    logger.add(sys.stderr, level=os.environ.get("LOG_LEVEL", "INFO"))
    main()

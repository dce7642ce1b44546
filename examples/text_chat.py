"""A text chat in the terminal, summarized in the background: no API key, no network.

    python examples/text_chat.py          # type a line and Enter; Ctrl-D (or an empty stdin) ends
    printf 'hi\\nI am Ana\\n' | python examples/text_chat.py   # or pipe the turns in

The chat model is **a local stand-in, not an LLM**: ``LocalStandInLLM`` answers by repeating
what you said and telling you what it received (how many messages, whether a summary was among
them), so you can watch compaction happen. The summaries come from the package's
``ExtractiveSummarizer``, which keeps your own sentences (names, numbers, allergies...) with no
model. For a real conversation, swap in any Pipecat LLM service (``OpenAILLMService``...) and
``OpenAISummarizer(model=...)``: the pipeline stays the same.

Each turn is an ``LLMMessagesAppendFrame(run_llm=True)`` queued on the pipeline worker: the user
aggregator appends the message and pushes the context to the LLM, exactly as it does after
speech-to-text in a voice bot. Logs go to stderr at WARNING (``LOG_LEVEL=DEBUG`` to see them all).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from loguru import logger

# Before Pipecat is imported: its banner and every full request it sends are logged at DEBUG and
# INFO by loguru's default handler; keep stderr for what matters.
logger.remove()
logger.add(sys.stderr, level=os.environ.get("LOG_LEVEL", "WARNING"))

from pipecat.frames.frames import (  # noqa: E402
    EndFrame,
    Frame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMMessagesAppendFrame,
    LLMTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.pipeline.worker import PipelineWorker  # noqa: E402
from pipecat.processors.aggregators.llm_context import LLMContext  # noqa: E402
from pipecat.processors.aggregators.llm_response_universal import (  # noqa: E402
    LLMContextAggregatorPair,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor  # noqa: E402
from pipecat.services.llm_service import LLMService  # noqa: E402
from pipecat.workers.runner import WorkerRunner  # noqa: E402

from pipecat_summarizer import (  # noqa: E402
    ContextCompactedEvent,
    ContextSummarizer,
    ExtractiveSummarizer,
    LLMAutoContextSummarizationConfig,
    LLMContextSummaryConfig,
)
from pipecat_summarizer.summarizers.extractive import offline_llm_settings  # noqa: E402

SYSTEM_PROMPT = "You are a friendly assistant in a text chat."


class LocalStandInLLM(LLMService):
    """A local stand-in for a chat LLM (no model, no network): it repeats the user's last
    message and says what it received, so the effect of each compaction is visible."""

    def __init__(self) -> None:
        """Initialize with settings that name no provider."""
        super().__init__(settings=offline_llm_settings("local-stand-in"))

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Answer each context frame; pass every other frame on."""
        await super().process_frame(frame, direction)
        if not isinstance(frame, LLMContextFrame):
            await self.push_frame(frame, direction)
            return
        messages: list[Any] = [m for m in frame.context.messages if isinstance(m, dict)]
        said = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
        summary = any(
            str(m.get("content", "")).startswith("Conversation summary:") for m in messages
        )
        await self.push_frame(LLMFullResponseStartFrame())
        await self.push_frame(
            LLMTextFrame(
                f"You said: {said!r}. (stand-in: I received {len(messages)} messages"
                f"{', a summary among them' if summary else ''}.)"
            )
        )
        await self.push_frame(LLMFullResponseEndFrame())


class ReplyPrinter(FrameProcessor):
    """Prints the assistant's text and tells the input loop when each reply has ended."""

    def __init__(self) -> None:
        """Initialize with no reply under way."""
        super().__init__()
        self.reply_ended = asyncio.Event()
        self._parts: list[str] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Collect the reply's text; print it at its end."""
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMTextFrame):
            self._parts.append(frame.text)
        elif isinstance(frame, LLMFullResponseEndFrame):
            print(f"bot> {''.join(self._parts)}", flush=True)
            self._parts.clear()
            self.reply_ended.set()
        await self.push_frame(frame, direction)


def build(context: LLMContext) -> tuple[Pipeline, ContextSummarizer, ReplyPrinter]:
    """The pipeline: user aggregator, summarizer, LLM, its companion, printer, assistant."""
    aggregators = LLMContextAggregatorPair(context)
    summarizer = ContextSummarizer(
        context=context,
        # small thresholds, so a short chat shows compactions (defaults: 8000 / 20 / keep 4)
        config=LLMAutoContextSummarizationConfig(
            max_context_tokens=2000,
            max_unsummarized_messages=8,
            summary_config=LLMContextSummaryConfig(min_messages_after_summary=4),
        ),
        summarizer=ExtractiveSummarizer(),  # offline; OpenAISummarizer(model=...) for real
    )

    @summarizer.event_handler("on_context_compacted")
    async def on_context_compacted(processor, event: ContextCompactedEvent):
        print(
            f"[compaction {event.compaction}: {event.messages_summarized} messages summarized, "
            f"{event.messages_kept} kept; {event.tokens_before} -> {event.tokens_after} tokens]",
            flush=True,
        )

    printer = ReplyPrinter()
    pipeline = Pipeline(
        [
            aggregators.user(),
            summarizer,  # between the user aggregator and the LLM
            LocalStandInLLM(),
            summarizer.after_llm(),  # its companion, right after the LLM
            printer,
            aggregators.assistant(),
        ]
    )
    return pipeline, summarizer, printer


async def chat() -> None:
    """Read turns from stdin until it ends; each is answered before the next is read."""
    context = LLMContext(messages=[{"role": "system", "content": SYSTEM_PROMPT}])
    pipeline, summarizer, printer = build(context)
    worker = PipelineWorker(pipeline, enable_rtvi=False, idle_timeout_secs=None)
    runner = WorkerRunner(handle_sigint=True)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            print("you> ", end="", flush=True)
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            break
        if not line.strip():
            continue
        printer.reply_ended.clear()
        user: Any = {"role": "user", "content": line.strip()}
        await worker.queue_frame(LLMMessagesAppendFrame(messages=[user], run_llm=True))
        await printer.reply_ended.wait()
    for _ in range(100):  # let a summary in flight land (at most ~5 s) before ending
        if not summarizer.summary_in_flight:
            break
        await asyncio.sleep(0.05)
    await worker.queue_frame(EndFrame())
    await running


if __name__ == "__main__":
    asyncio.run(chat())

"""Barge-in benchmark: a summary slower than a turn, and an interruption after every turn.

Runs the same 40-turn scenario through Pipecat's built-in summarizer and through ours, both
summarizing on Pipecat's ``OpenAILLMService`` / our ``OpenAISummarizer`` against a local
OpenAI-protocol server (127.0.0.1) whose summaries take 1.5 s, and prints how many summary
requests each made and how many summaries it applied. Not a test: it prints figures.

    .venv/bin/python benchmarks/barge_in.py
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

from loguru import logger

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.processors.aggregators.llm_context import LLMContext  # noqa: E402
from pipecat.processors.aggregators.llm_response_universal import (  # noqa: E402
    LLMAssistantAggregatorParams,
    LLMContextAggregatorPair,
)
from pipecat.tests.utils import SleepFrame, run_test  # noqa: E402

from pipecat_summarizer import (  # noqa: E402
    ContextSummarizer,
    LLMAutoContextSummarizationConfig,
    LLMContextSummaryConfig,
    OpenAISummarizer,
)
from tests.support.openai_server import FakeOpenAIServer, Reply  # noqa: E402
from tests.support.pipeline_utils import main_llm, texts_of, turns  # noqa: E402

TURNS, GAP, SUMMARY_DELAY = 40, 0.3, 1.5
SAID = [f"user message number {i}" for i in range(TURNS)]
SYSTEM = "You are a helpful voice assistant."


def handler(body: dict) -> Reply:
    if body.get("stream"):
        return Reply("Sure thing.")
    # Both summarizers get a non-streaming request; keep every user line it was given.
    seen = sorted(set(re.findall(r"user message number \d+", str(body["messages"]))))
    return Reply("FACTS:\n" + "\n".join(f"- {s}" for s in seen), delay=SUMMARY_DELAY)


def config(llm=None) -> LLMAutoContextSummarizationConfig:
    return LLMAutoContextSummarizationConfig(
        max_context_tokens=None,
        max_unsummarized_messages=20,
        summary_config=LLMContextSummaryConfig(min_messages_after_summary=4, llm=llm),
    )


async def run(strategy: str) -> tuple[int, int, int]:
    server = FakeOpenAIServer(handler)
    url = await server.start()
    context = LLMContext()
    applied = []
    if strategy == "builtin":
        params = LLMAssistantAggregatorParams(
            enable_auto_context_summarization=True,
            auto_context_summarization_config=config(llm=main_llm(url)),
        )
        pair = LLMContextAggregatorPair(context, assistant_params=params)

        @pair.assistant().event_handler("on_summary_applied")
        async def _applied(*args):
            applied.append(args[-1])

        pipeline = Pipeline(
            [pair.user(), main_llm(url, system_instruction=SYSTEM), pair.assistant()]
        )
    else:
        pair = LLMContextAggregatorPair(context)
        ours = ContextSummarizer(
            context=context, config=config(), summarizer=OpenAISummarizer(base_url=url)
        )

        @ours.event_handler("on_summary_applied")
        async def _applied(_, event):
            applied.append(event)

        pipeline = Pipeline(
            [pair.user(), ours, main_llm(url, system_instruction=SYSTEM), pair.assistant()]
        )
    frames = turns(SAID, gap=GAP, interrupt=True) + [SleepFrame(sleep=SUMMARY_DELAY + 0.5)]
    await run_test(pipeline, frames_to_send=frames)
    await server.stop()
    requests = sum(1 for b in server.requests if not b.get("stream"))
    final = texts_of(context.messages)
    kept = sum(1 for s in SAID if re.search(re.escape(s) + r"\b", final))
    return requests, len(applied), kept


async def main() -> None:
    logger.remove()
    print(
        f"{TURNS} turns {GAP}s apart, an InterruptionFrame after each, summaries take "
        f"{SUMMARY_DELAY}s, max_unsummarized_messages=20, keep=4\n"
    )
    print(f"{'strategy':<22}{'summary requests':>18}{'applied':>10}{'user lines kept':>18}")
    for name, strategy in (("Pipecat built-in", "builtin"), ("pipecat-summarizer", "ours")):
        requests, applied, kept = await run(strategy)
        print(f"{name:<22}{requests:>18}{applied:>10}{f'{kept}/{TURNS}':>18}")


if __name__ == "__main__":
    asyncio.run(main())

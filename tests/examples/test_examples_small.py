"""The two small examples run: the text chat as a terminal program (stdin in, replies and
compactions out, no key, no network, no Pipecat banner), and the foundational voice bot's
pipeline built as written and driven through its LLM and summarizer with local stand-ins for
the transport, speech-to-text and text-to-speech (a real OpenAI-protocol server on 127.0.0.1
for the LLM and the summaries)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from pipecat.processors.filters.identity_filter import IdentityFilter
from pipecat.processors.frame_processor import FrameProcessor

from pipecat_summarizer import LLMRequestGuard, OpenAISummarizer
from tests.support.pipeline_utils import main_llm, turns
from tests.support.settle import Gap, run_settling

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


foundational = _load("foundational")  # importing it starts nothing (the runner is in __main__)

LINES = [
    "Hi, my name is Ana and I am allergic to peanuts.",
    "What can I cook tonight?",
    "I have rice, tofu and broccoli.",
    "Anything quick?",
    "How long does tofu take?",
    "Should I marinate it?",
    "What about dessert?",
    "Thanks, that is all.",
]


def test_text_chat_runs_in_a_terminal_with_no_key_and_no_network():
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["NO_PROXY"] = "*"
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "text_chat.py")],
        input="\n".join(LINES) + "\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout.splitlines()
    replies = [line for line in out if line.startswith("bot> ")]
    assert [r.split("You said: ", 1)[1].split("'. (", 1)[0].strip("'") for r in replies] == LINES
    compactions = [line for line in out if line.startswith("[compaction ")]
    assert len(compactions) >= 2  # thresholds of 8 messages: one every few turns
    # a compaction shows in what the stand-in received: the summary, and fewer messages
    assert "a summary among them" in replies[-1]
    # logging quieted before Pipecat's import: no banner, no DEBUG request dumps
    assert "Pipecat 1.14" not in done.stderr and "DEBUG" not in done.stderr


class _Transport:
    """The transport's two processors, as frame pass-throughs (no audio, no network)."""

    def input(self) -> FrameProcessor:
        return IdentityFilter()

    def output(self) -> FrameProcessor:
        return IdentityFilter()


async def test_foundational_pipeline_compacts_with_its_companion_and_handlers(openai_server, logs):
    backend = OpenAISummarizer(base_url=openai_server.base_url, model="cheap")
    pipeline, context, summarizer = foundational.build_pipeline(
        transport=_Transport(),
        stt=IdentityFilter(),
        llm=main_llm(openai_server.base_url),
        tts=IdentityFilter(),
        summary_backend=backend,
    )
    stages = pipeline.processors
    at = stages.index(summarizer)
    assert isinstance(stages[at + 2], LLMRequestGuard)  # summarizer, LLM, its companion
    applied = []

    @summarizer.event_handler("on_context_compacted")
    async def _applied(_, event):
        applied.append(event)

    # Pipecat's default thresholds (20 messages, keep 4): the first compaction on turn 10
    await run_settling(
        pipeline,
        frames_to_send=[
            *turns([f"user message number {i}" for i in range(1, 13)], gap=0.2),
            Gap(sleep=0.3),
        ],
    )
    await backend.aclose()
    assert len(applied) == 1 and applied[0].reason == "messages"
    assert len(openai_server.summary_requests) == 1
    assert any("Conversation summary" in str(m.get("content")) for m in context.messages)
    last = openai_server.chat_requests[-1]["messages"]
    assert any("Conversation summary" in str(m.get("content")) for m in last)
    # the example's own handler reported it, without conversation text
    (line,) = [r["message"] for r in logs if r["message"].startswith("Compacted:")]
    assert "messages summarized" in line and "user message number" not in line


def test_foundational_is_about_150_lines_and_has_the_pieces():
    source = (EXAMPLES / "foundational.py").read_text(encoding="utf-8")
    assert len(source.splitlines()) <= 170
    for piece in ("ContextSummarizer(", "summarizer.after_llm()", "on_context_compacted"):
        assert piece in source
    assert "create_transport" in source and '"webrtc"' in source


def test_readme_says_how_to_run_them_and_quiet_the_logs():
    readme = (EXAMPLES.parent / "README.md").read_text(encoding="utf-8")
    use = readme.split("## Use", 1)[1].split("\n## ", 1)[0]
    for command in ("python examples/text_chat.py", "python examples/foundational.py"):
        assert command in use
        assert (EXAMPLES.parent / command.split()[1]).is_file()
    assert "LLMMessagesAppendFrame(" in use and "run_llm=True" in use
    assert "WorkerRunner" in use and "pipecat.runner.run.main()" in use
    assert 'logger.remove(); logger.add(sys.stderr, level="INFO")' in use
    # the names the README gives are the examples' own
    text_chat = (EXAMPLES / "text_chat.py").read_text(encoding="utf-8")
    assert "class LocalStandInLLM" in text_chat and "ExtractiveSummarizer()" in text_chat
    assert "LLMMessagesAppendFrame(messages=[user], run_llm=True)" in text_chat

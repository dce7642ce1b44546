"""The README's Python snippets run as written (with stand-ins for what they leave out: the
transport, STT/TTS, the main LLM, a backend), and its parameter table names real fields."""

from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path

import pytest
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMAssistantAggregatorParams,
    LLMContextAggregatorPair,
)
from pipecat.processors.frame_processor import FrameProcessor

from pipecat_summarizer import (
    CeilingParams,
    ContextSummarizer,
    ContextSummarizerParams,
    LLMAutoContextSummarizationConfig,
    OpenAISummarizer,
)
from tests.pipeline_utils import main_llm

README = Path(__file__).resolve().parents[1] / "README.md"
NOWHERE = "http://127.0.0.1:9/v1"  # never contacted: the snippets only build things


def snippets() -> list[str]:
    """The README's ```python blocks, dedented (one sits in a list item)."""
    blocks = re.findall(r"^( *)```python\n(.*?)^\1```", README.read_text(), re.M | re.S)
    return ["\n".join(line[len(indent) :] for line in body.splitlines()) for indent, body in blocks]


class _Transport:
    def input(self) -> FrameProcessor:
        return FrameProcessor()

    def output(self) -> FrameProcessor:
        return FrameProcessor()


def _stand_ins() -> dict:
    llm = main_llm(NOWHERE)
    return {
        "context": LLMContext(),
        "config": LLMAutoContextSummarizationConfig(),
        "transport": _Transport(),
        "stt": FrameProcessor(),
        "tts": FrameProcessor(),
        "llm": llm,
        "backend": OpenAISummarizer(base_url=NOWHERE, model="cheap"),
        "call_id": "call-1",
        "caller_id": "caller-42",
        "task": PipelineWorker(Pipeline([FrameProcessor()])),
        # the "before" snippet's Pipecat names, imported above it in a real bot
        "LLMContextAggregatorPair": LLMContextAggregatorPair,
        "LLMAssistantAggregatorParams": LLMAssistantAggregatorParams,
        "Pipeline": Pipeline,
        "LLMAutoContextSummarizationConfig": LLMAutoContextSummarizationConfig,
    }


async def test_every_python_snippet_of_the_readme_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the store snippet opens memory.db
    blocks = snippets()
    assert len(blocks) >= 8
    namespace = _stand_ins()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, code in enumerate(blocks):
            compiled = compile(
                code, f"README.md[python block {i}]", "exec", ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
            )
            result = eval(compiled, namespace)
            if result is not None:  # a block with a top-level await
                await result
    renamed = ("SummarizerOptions", "SummaryAppliedEvent")
    assert not [str(w.message) for w in caught if any(n in str(w.message) for n in renamed)]
    assert isinstance(namespace["summarizer"], ContextSummarizer)
    assert "flow_manager" in namespace


async def test_the_params_snippet_sets_what_it_says(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    block = next(b for b in snippets() if "params=ContextSummarizerParams(" in b)
    namespace = _stand_ins()
    exec(compile(block, "README.md[params]", "exec"), namespace)
    params = namespace["summarizer"]._params
    assert params.ceiling is not None and params.ceiling.max_request_tokens == 6000
    assert params.pinning.budget_tokens == 400
    assert (params.retry.backoff_s, params.retry.max_backoff_s) == (5.0, 120.0)


def test_the_params_table_names_real_fields_with_their_defaults():
    text = README.read_text()
    table = text[text.index("| parameter | default | meaning |") :]
    table = table[: table.index("\n\n")]
    rows = re.findall(r"^\| `([^`]+)`(?: / `([^`]+)`)? \| ([^|]+) \|", table, re.M)
    assert len(rows) >= 15
    defaults = ContextSummarizerParams()
    checked = 0
    for first, second, default in rows:
        written = [d.strip().strip("`") for d in default.split("/")]
        for name, shown in zip(filter(None, (first, second)), written, strict=False):
            group, _, field = name.partition(".")
            owner = defaults
            if field:
                owner = getattr(defaults, group)
                if owner is None:  # ceiling: off by default, the class has the field
                    owner = CeilingParams(max_request_tokens=1000)
                name = field
            assert hasattr(owner, name), f"README names {first!r}, not a field"
            try:
                expected = ast.literal_eval(shown)
            except (ValueError, SyntaxError):
                continue  # prose ("estimate")
            assert getattr(owner, name) == expected, f"README default of {first!r}: {shown}"
            checked += 1
    assert checked >= 14


@pytest.mark.parametrize("old", ["SummarizerOptions(", "SummaryAppliedEvent"])
def test_the_readmes_use_the_new_names(old):
    for path in (README, README.parent / "benchmarks" / "README.md"):
        text = path.read_text()
        uses = [m.start() for m in re.finditer(re.escape(old), text)]
        # the one sentence that points 0.1 users at the CHANGELOG may name the old form
        allowed = [u for u in uses if "still works for this release" in text[u : u + 120]]
        assert uses == allowed, f"{path.name} still uses {old}"

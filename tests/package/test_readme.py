"""The README's and the docs pages' Python snippets run as written (with stand-ins for what
they leave out: the transport, STT/TTS, the main LLM, a backend), the parameter table names
real fields, and the pages use the current names."""

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
    ClearingParams,
    ContextSummarizer,
    ContextSummarizerParams,
    LLMAutoContextSummarizationConfig,
    OpenAISummarizer,
)
from tests.support.pipeline_utils import main_llm

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
NOWHERE = "http://127.0.0.1:9/v1"  # never contacted: the snippets only build things


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def snippets(page: Path) -> list[str]:
    """A page's ```python blocks, dedented (some sit in a list item)."""
    blocks = re.findall(r"^( *)```python\n(.*?)^\1```", page.read_text(), re.M | re.S)
    return ["\n".join(line[len(indent) :] for line in body.splitlines()) for indent, body in blocks]


class _Transport:
    def input(self) -> FrameProcessor:
        return FrameProcessor()

    def output(self) -> FrameProcessor:
        return FrameProcessor()


def _stand_ins() -> dict:
    """What a page's snippets take from the bot around them (each page runs on its own)."""
    llm = main_llm(NOWHERE)
    context = LLMContext()
    config = LLMAutoContextSummarizationConfig()
    backend = OpenAISummarizer(base_url=NOWHERE, model="cheap")
    return {
        "context": context,
        "config": config,
        "transport": _Transport(),
        "stt": FrameProcessor(),
        "tts": FrameProcessor(),
        "llm": llm,
        "backend": backend,
        "call_id": "call-1",
        "caller_id": "caller-42",
        "task": PipelineWorker(Pipeline([FrameProcessor()])),
        "aggregators": LLMContextAggregatorPair(context),
        "summarizer": ContextSummarizer(context=context, config=config, summarizer=backend),
        # the "before" snippet's Pipecat names, imported above it in a real bot
        "LLMContextAggregatorPair": LLMContextAggregatorPair,
        "LLMAssistantAggregatorParams": LLMAssistantAggregatorParams,
        "Pipeline": Pipeline,
        "LLMAutoContextSummarizationConfig": LLMAutoContextSummarizationConfig,
    }


# Names a page must not make its reader use (each still works one release with a warning).
OLD_NAMES = (
    "SummarizerOptions",
    "SummaryAppliedEvent",
    "on_summary_applied",
    "ContextSummaryAppliedFrame",
    "MemoryOptions",
    "WriterOptions",
    "SemanticRecall(",
    "ConversationMemory",
)


def test_the_pages_have_snippets_to_run():
    per_page = {_name(page): len(snippets(page)) for page in PAGES}
    assert sum(per_page.values()) >= 12, per_page
    for page in ("README.md", "docs/configuration.md", "docs/memory.md", "docs/recall.md"):
        assert per_page[page] >= 1, page


@pytest.mark.parametrize("page", [p for p in PAGES if snippets(p)], ids=_name)
async def test_every_python_snippet_of_the_page_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the store snippets open memory.db
    namespace = _stand_ins()
    stand_in = namespace["summarizer"]
    blocks = snippets(page)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, code in enumerate(blocks):
            compiled = compile(
                code, f"{_name(page)}[python block {i}]", "exec", ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
            )
            result = eval(compiled, namespace)
            if result is not None:  # a block with a top-level await
                await result
    old = [str(w.message) for w in caught if any(n.strip("(") in str(w.message) for n in OLD_NAMES)]
    assert not old
    if any(re.search(r"^summarizer = ContextSummarizer\(", code, re.M) for code in blocks):
        assert isinstance(namespace["summarizer"], ContextSummarizer)
        assert namespace["summarizer"] is not stand_in
    if page.name == "flows.md":
        assert "flow_manager" in namespace


async def test_the_readme_builds_the_pipeline_it_shows():
    (block,) = snippets(README)
    namespace = _stand_ins()
    stand_in = namespace["summarizer"]
    exec(compile(block, "README.md[pipeline]", "exec"), namespace)
    summarizer = namespace["summarizer"]
    assert isinstance(summarizer, ContextSummarizer) and summarizer is not stand_in
    processors = namespace["pipeline"].processors
    assert summarizer in processors


async def test_the_params_snippet_sets_what_it_says(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    page = DOCS / "configuration.md"
    block = next(b for b in snippets(page) if "params=ContextSummarizerParams(" in b)
    namespace = _stand_ins()
    exec(compile(block, "docs/configuration.md[params]", "exec"), namespace)
    params = namespace["summarizer"]._params
    assert params.ceiling is not None and params.ceiling.max_request_tokens == 6000
    assert params.pinning.budget_tokens == 400
    assert (params.retry.backoff_s, params.retry.max_backoff_s) == (5.0, 120.0)


def test_the_params_table_names_real_fields_with_their_defaults():
    text = (DOCS / "configuration.md").read_text()
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
                if owner is None:  # ceiling, clearing: off by default, the class has the field
                    owner = {"ceiling": CeilingParams(max_request_tokens=1000)}.get(
                        group, ClearingParams()
                    )
                name = field
            assert hasattr(owner, name), f"docs/configuration.md names {first!r}, not a field"
            try:
                expected = ast.literal_eval(shown)
            except (ValueError, SyntaxError):
                continue  # prose ("estimate")
            assert getattr(owner, name) == expected, f"default of {first!r}: {shown}"
            checked += 1
    assert checked >= 14


def _uses_outside_the_deprecation_note(text: str, old: str) -> list[int]:
    uses = [m.start() for m in re.finditer(re.escape(old), text)]
    # the sentence that points 0.1 users at the CHANGELOG may name the old form
    note = re.compile(r"still works? for this release")
    return [u for u in uses if not note.search(text[u : u + 120])]


@pytest.mark.parametrize("old", ["SummarizerOptions(", "SummaryAppliedEvent"])
def test_the_readmes_use_the_new_names(old):
    for path in (README, ROOT / "benchmarks" / "README.md", *DOCS.glob("*.md")):
        text = path.read_text()
        assert _uses_outside_the_deprecation_note(text, old) == [], f"{path.name} uses {old}"


@pytest.mark.parametrize("old", OLD_NAMES)
def test_the_docs_use_the_new_names(old):
    for path in (README, ROOT / "ARCHITECTURE.md", *DOCS.glob("*.md")):
        text = path.read_text()
        assert _uses_outside_the_deprecation_note(text, old) == [], f"{path.name} uses {old}"

"""The package's public face: ``__all__`` is the user API, pinned here, and one exception base."""

from __future__ import annotations

import ast
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import pipecat_summarizer
from pipecat_summarizer import PipecatSummarizerError, StoreError, SummarizerError
from pipecat_summarizer.store import open_store
from pipecat_summarizer.summarizers import OpenAISummarizer
from tests.support.openai_server import Reply

# The user API, sorted. A change here is a change of the public API: say it in the CHANGELOG.
PUBLIC_API = [
    "CalibrationParams",
    "CeilingParams",
    "ClearingParams",
    "ContextCompactedEvent",
    "ContextCompactedFrame",
    "ContextSummarizer",
    "ContextSummarizerParams",
    "ConversationRecord",
    "DEFAULT_PROMPT",
    "EstimateTokenCounter",
    "ExtractiveSummarizer",
    "Fact",
    "Kind",
    "LLMAutoContextSummarizationConfig",
    "LLMContextSummaryConfig",
    "LLMRequestGuard",
    "MemoryParams",
    "MessagesEvictedEvent",
    "OpenAISummarizer",
    "PinningParams",
    "PipecatLLMSummarizer",
    "PipecatSummarizerError",
    "Reason",
    "RecallObserver",
    "RecallOutcome",
    "RecallParams",
    "RecallPrefetch",
    "RetryParams",
    "SemanticRecallParams",
    "Source",
    "StoreError",
    "Summarizer",
    "SummarizerError",
    "SummaryFailedEvent",
    "SummaryRequest",
    "SummaryResult",
    "SummaryUsage",
    "TokenCalibrationReport",
    "TokenCounter",
    "TokenizerCounter",
    "ToolResultsClearedEvent",
    "TriggerParams",
    "WriterParams",
    "is_recall_message",
    "load_semantic_model",
    "message_texts",
    "recall_memory_flows_function",
    "register_recall_memory",
    "register_remember_fact",
    "remember_fact_flows_function",
]

INIT = Path(pipecat_summarizer.__file__)


def _type_checking_imports() -> dict[str, str]:
    """Name -> module of the imports under ``if TYPE_CHECKING:`` in ``__init__.py``."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
    )
    return {
        alias.asname or alias.name: node.module or ""
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_all_is_the_pinned_user_api():
    assert len(set(pipecat_summarizer.__all__)) == len(pipecat_summarizer.__all__)
    assert sorted(pipecat_summarizer.__all__) == PUBLIC_API


def test_every_public_name_resolves_to_what_type_checkers_see():
    seen = _type_checking_imports()
    assert sorted(seen) == PUBLIC_API  # what mypy and IDEs see is the public API, no more
    for name in PUBLIC_API:
        value = getattr(pipecat_summarizer, name)
        assert value is getattr(sys.modules[seen[name]], name), name
    namespace: dict[str, object] = {}
    exec("from pipecat_summarizer import *", namespace)
    assert set(PUBLIC_API) <= set(namespace)
    assert set(PUBLIC_API) <= set(dir(pipecat_summarizer))


def test_no_public_name_comes_from_the_replay():
    for name in PUBLIC_API:
        module = getattr(getattr(pipecat_summarizer, name), "__module__", "") or ""
        assert not module.startswith("pipecat_summarizer_cli.replay"), (name, module)


def test_the_replay_only_helper_left_the_face_but_still_imports_with_a_warning():
    from pipecat_summarizer.summarizers import ExtractiveLLMService

    assert "ExtractiveLLMService" not in pipecat_summarizer.__all__
    with pytest.warns(DeprecationWarning, match="pipecat_summarizer.summarizers"):
        assert pipecat_summarizer.ExtractiveLLMService is ExtractiveLLMService
    with pytest.raises(AttributeError, match="NoSuchName"):
        pipecat_summarizer.NoSuchName  # noqa: B018


def test_importing_the_package_or_its_errors_does_not_import_pipecat():
    code = (
        "import sys\n"
        "import pipecat_summarizer\n"
        "from pipecat_summarizer.errors import PipecatSummarizerError\n"
        "print(sorted(m for m in sys.modules if m == 'pipecat' or m.startswith('pipecat.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout
    assert "Pipecat" not in out.stderr  # no banner


def test_one_exception_base_with_the_tree_drawn_in_its_docstring():
    import pipecat_summarizer.errors as errors

    assert issubclass(PipecatSummarizerError, Exception)
    assert issubclass(SummarizerError, PipecatSummarizerError)
    assert issubclass(SummarizerError, RuntimeError)  # code that caught RuntimeError still does
    assert issubclass(StoreError, PipecatSummarizerError)
    doc = errors.__doc__ or ""
    for name in ("PipecatSummarizerError", "SummarizerError", "StoreError"):
        assert f"── {name}" in doc, name


async def test_a_failed_summary_and_a_refused_store_are_caught_by_the_base(openai_server, tmp_path):
    openai_server.handler = lambda body: Reply("FACTS:\n- name: Pri", finish_reason="length")
    summarizer = OpenAISummarizer(base_url=openai_server.base_url, model="tiny")
    from pipecat_summarizer._compaction.prompt import build_request

    request = build_request(
        [{"role": "user", "content": "I'm allergic to peanuts."}],
        previous_summary=None,
        max_tokens=50,
    )
    caught: list[PipecatSummarizerError] = []
    try:
        await summarizer.summarize(request)
    except PipecatSummarizerError as e:
        caught.append(e)
    finally:
        await summarizer.aclose()

    garbage = tmp_path / "notes.db"
    garbage.write_bytes(b"not a database at all" * 200)
    store = open_store(str(garbage), read_only=True)
    try:
        await store.open()
    except PipecatSummarizerError as e:
        caught.append(e)
    finally:
        await store.close()

    assert [type(e) for e in caught] == [SummarizerError, StoreError]


def test_the_deprecated_names_still_warn():
    from pipecat_summarizer import ContextCompactedEvent

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert pipecat_summarizer.SummaryAppliedEvent is ContextCompactedEvent
    assert [w.category for w in caught] == [DeprecationWarning]

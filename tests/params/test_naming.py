"""One naming: every parameter group in ``params``, each ``*Params``, doing no work; the old
names work one release with a ``DeprecationWarning``, which the package itself never triggers;
one exception base under every error the library defines."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
import tomllib
import warnings
from dataclasses import is_dataclass
from pathlib import Path

import pytest

import pipecat_summarizer
from pipecat_summarizer import params
from pipecat_summarizer.errors import PipecatSummarizerError

ROOT = Path(__file__).resolve().parents[2]

# (module, old name) -> the new name it resolves to, with a warning
RENAMED = {
    ("pipecat_summarizer", "MemoryOptions"): "MemoryParams",
    ("pipecat_summarizer", "WriterOptions"): "WriterParams",
    ("pipecat_summarizer", "SemanticRecall"): "SemanticRecallParams",
    ("pipecat_summarizer", "ConversationMemory"): "ConversationRecord",
    ("pipecat_summarizer", "SummarizerOptions"): "SummarizerOptions",
    ("pipecat_summarizer", "SummaryAppliedEvent"): "ContextCompactedEvent",
    ("pipecat_summarizer", "ContextSummaryAppliedFrame"): "ContextCompactedFrame",
    ("pipecat_summarizer", "ExtractiveLLMService"): "ExtractiveLLMService",
    ("pipecat_summarizer.events", "SummaryAppliedEvent"): "ContextCompactedEvent",
    ("pipecat_summarizer.events", "ContextSummaryAppliedFrame"): "ContextCompactedFrame",
    ("pipecat_summarizer.store", "WriterOptions"): "WriterParams",
    ("pipecat_summarizer.store._writer", "WriterOptions"): "WriterParams",
    ("pipecat_summarizer._session.recorder", "MemoryOptions"): "MemoryParams",
    ("pipecat_summarizer._record.record", "ConversationMemory"): "ConversationRecord",
}


def _old(module: str, name: str) -> tuple[object, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(importlib.import_module(module), name)
    # a first import of Pipecat's audio helpers warns about audioop: not ours to count
    return value, [w for w in caught if "site-packages" not in w.filename]


@pytest.mark.parametrize(("module", "name"), sorted(RENAMED))
def test_an_old_name_still_works_with_a_warning_naming_the_new_one(module, name):
    value, caught = _old(module, name)
    new = RENAMED[module, name]
    assert [w.category for w in caught] == [DeprecationWarning]
    assert new in str(caught[0].message) or name == new
    assert inspect.isclass(value)
    assert value.__name__ == new or issubclass(value, getattr(pipecat_summarizer, new))
    assert name not in pipecat_summarizer.__all__


def test_the_package_never_uses_an_old_name():
    """pyproject.toml turns each old name's warning into an error when the package itself
    (``pipecat_summarizer``, its command line included) raises it: every warning an old name
    gives is matched by one of those filters."""
    filters = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"][
        "filterwarnings"
    ]
    errors = []
    for line in filters:
        action, message, category, module = (line.split(":") + ["", "", ""])[:4]
        if action == "error" and category == "DeprecationWarning":
            errors.append((re.compile(message, re.I), re.compile(module)))
    assert errors
    for module, name in sorted(RENAMED):
        _, caught = _old(module, name)
        text = str(caught[0].message)
        assert any(m.match(text) and where.match("pipecat_summarizer") for m, where in errors), (
            f"no error filter in pyproject.toml for {text!r}"
        )


def test_every_params_group_lives_in_params_and_ends_in_params():
    groups = {
        name
        for name, value in vars(params).items()
        if inspect.isclass(value) and is_dataclass(value) and value.__module__ == params.__name__
    }
    assert groups == {
        "CalibrationParams",
        "CeilingParams",
        "ClearingParams",
        "ContextSummarizerParams",
        "MemoryParams",
        "PinningParams",
        "RecallParams",
        "RetryParams",
        "SemanticRecallParams",
        "SummarizerOptions",  # the deprecated flat form, one release
        "TriggerParams",
        "WriterParams",
    }
    for name in groups - {"SummarizerOptions"}:
        assert getattr(pipecat_summarizer, name) is getattr(params, name), name
        assert name in pipecat_summarizer.__all__


def test_semantic_params_build_no_model():
    """The params hold settings: building them (and recall's with them) loads no model and
    imports neither the model's code nor Pipecat; the call's index builds the model where it
    is used, one per process."""
    code = (
        "import sys\n"
        "from pipecat_summarizer import RecallParams, SemanticRecallParams\n"
        "semantic = SemanticRecallParams(min_similarity=0.2)\n"
        "RecallParams.broad(semantic=semantic)\n"
        "print(semantic.embedder, 'pipecat_summarizer._recall.semantic' in sys.modules,"
        " 'wordllama' in sys.modules, 'pipecat' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split() == ["None", "False", "False", "False"], out.stdout


def test_one_model_per_process_for_every_params_without_an_embedder():
    from pipecat_summarizer._recall.embedding import embedder_for
    from pipecat_summarizer._recall.semantic import SemanticIndex

    one, two = params.SemanticRecallParams(), params.SemanticRecallParams(min_similarity=0.2)
    assert embedder_for(one) is embedder_for(two)
    index = SemanticIndex(two, call_id="c", user_id=None)
    assert index.embedder is embedder_for(one)

    class Own:
        def embed(self, texts):
            return []

    own = Own()
    assert embedder_for(params.SemanticRecallParams(embedder=own)) is own


def test_the_old_semantic_name_keeps_its_load_method():
    from pipecat_summarizer._recall.embedding import SemanticRecall

    assert issubclass(SemanticRecall, params.SemanticRecallParams)
    assert callable(SemanticRecall().load)
    assert not hasattr(params.SemanticRecallParams, "load")  # the new params do no work


def _library_modules() -> list[str]:
    names = [pipecat_summarizer.__name__]
    for info in pkgutil.walk_packages(pipecat_summarizer.__path__, "pipecat_summarizer."):
        names.append(info.name)
    return names


def test_every_error_the_library_defines_is_under_the_one_base():
    """Every public exception class of the library derives from ``PipecatSummarizerError``
    (a private one never leaves its module: the writer's ``_Outage`` is caught where raised)."""
    seen = set()
    for name in _library_modules():
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == name
                and not attr.startswith("_")
            ):
                seen.add(attr)
                assert issubclass(value, PipecatSummarizerError), f"{name}.{attr}"
    assert {"PipecatSummarizerError", "SummarizerError", "StoreError"} <= seen
    assert {"PipecatSummarizerError", "SummarizerError", "StoreError"} <= set(
        pipecat_summarizer.__all__
    )

"""Each claim the docs make about behaviour, checked against what the code (and Pipecat) do.

* Thresholds that compact on every turn are accepted, as Pipecat's built-in accepts them, with
  one WARNING at construction naming the fields and how often it will compact.
* ``messages_kept`` is the messages after the summary at the moment of the splice: the planned
  tail plus what arrived while the summary ran (a real pipeline, a slow summary).
* The comparison with Pipecat's built-in lists only rows verified against the installed 1.14
  source; "counted since the last summary" is not a difference any more.
* The README's ``inspect --search`` example finds messages on the bundled call it names.
* LoCoMo's origin is named where ``--locomo`` is documented; no machine path in any doc.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import shlex
import subprocess
import textwrap
from importlib.metadata import version
from pathlib import Path

from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_context_summarizer import LLMContextSummarizer
from pipecat.utils.context.llm_context_summarization import (
    LLMAutoContextSummarizationConfig,
    LLMContextSummarizationUtil,
)

from pipecat_summarizer import (
    ContextSummarizer,
    ContextSummarizerParams,
    ExtractiveSummarizer,
    OpenAISummarizer,
    SummaryRequest,
    TriggerParams,
)
from pipecat_summarizer._compaction.trigger import every_turn_warning, turns_per_compaction
from pipecat_summarizer_cli.main import main
from tests.support.pipeline_utils import Run, cfg, turns

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"  # the topic pages the README links to
NOWHERE = "http://127.0.0.1:9/v1"


def _warnings(logs) -> list[str]:
    return [r["message"] for r in logs if r["level"].name == "WARNING"]


# -- thresholds that compact on every turn -------------------------------------------------


def test_turns_per_compaction_matches_the_readme_cadence():
    assert turns_per_compaction(LLMAutoContextSummarizationConfig()) == 8  # "every 8 turns"
    assert turns_per_compaction(cfg(messages=6, keep=4)) == 1
    assert turns_per_compaction(cfg(messages=7, keep=4)) == 2
    assert turns_per_compaction(cfg(tokens=8000, messages=None)) is None
    # keep 0 or 1: the user message stays with its answer, a tail of keep + 1
    assert turns_per_compaction(cfg(messages=4, keep=1)) == 1
    assert turns_per_compaction(cfg(messages=5, keep=1)) == 2


def test_every_turn_thresholds_warn_once_at_construction_naming_the_fields(logs):
    ContextSummarizer(
        context=LLMContext(),
        config=cfg(messages=6, keep=4),
        summarizer=OpenAISummarizer(base_url=NOWHERE, model="cheap"),
    )
    (warning,) = _warnings(logs)
    assert "max_unsummarized_messages (6)" in warning
    assert "min_messages_after_summary=4" in warning
    assert "every user turn" in warning and ">= 7" in warning


def test_no_warning_when_it_would_not_compact_every_turn(logs):
    for config, trigger in [
        (LLMAutoContextSummarizationConfig(), TriggerParams()),
        (cfg(messages=7, keep=4), TriggerParams()),
        (cfg(messages=6, keep=4), TriggerParams(auto=False)),  # thresholds start nothing
        (cfg(messages=6, keep=4), TriggerParams(cached_input_discount=0.9)),  # waits to pay
    ]:
        assert every_turn_warning(config, trigger) is None
        ContextSummarizer(
            context=LLMContext(),
            config=config,
            summarizer=OpenAISummarizer(base_url=NOWHERE, model="cheap"),
            params=ContextSummarizerParams(trigger=trigger),
        )
    assert _warnings(logs) == []


async def test_limit_6_keep_4_compacts_on_every_turn_after_the_first_two(openai_server):
    """What the warning announces: 10 of 12 turns (from the 3rd on), as the issue measured.
    The offline summarizer lands each summary well before the next turn."""
    run = await Run(openai_server, cfg(messages=6, keep=4), summarizer=ExtractiveSummarizer()).run(
        turns([f"user message number {i}" for i in range(1, 13)])
    )
    assert not run.failed
    assert len(run.applied) == 10


def _all_pages() -> str:
    """The README and the docs pages, as one text with whitespace collapsed."""
    pages = [README, *sorted(DOCS.glob("*.md"))]
    return " ".join(" ".join(p.read_text(encoding="utf-8").split()) for p in pages)


def test_readme_says_what_the_code_does_for_every_turn_thresholds():
    text = _all_pages()
    assert "one WARNING at construction" in " ".join(
        (DOCS / "configuration.md").read_text(encoding="utf-8").split()
    )
    assert "configs that would fire every turn are rejected" not in text


# -- messages_kept: the tail at the moment of the splice -----------------------------------


class GatedSummarizer:
    """A slow summarizer (the package's public protocol): it answers once the context holds
    ``answers`` assistant messages, i.e. once that many exchanges have completed."""

    def __init__(self, answers: int):
        self.answers = answers
        self.context: LLMContext | None = None

    async def summarize(self, request: SummaryRequest) -> str:
        for _ in range(1000):  # at most ~10 s: a missed condition fails on the counts below
            assert self.context is not None
            done = [m for m in self.context.messages if m.get("role") == "assistant"]
            if len(done) >= self.answers:
                break
            await asyncio.sleep(0.01)
        return "FACTS:\n- summarized"


def _after_summary(messages: list) -> list:
    (at,) = [
        i
        for i, m in enumerate(messages)
        if str(m.get("content", "")).startswith("Conversation summary:")
    ]
    return messages[at + 1 :]


async def _kept_with_summary_landing_after(server, answers: int, user_turns: int):
    gate = GatedSummarizer(answers)
    run = Run(server, cfg(messages=8, keep=4), summarizer=gate)
    gate.context = run.context
    await run.run(turns([f"user message number {i}" for i in range(1, user_turns + 1)]))
    assert not run.failed
    (event,) = run.applied
    # nothing reached the context after the splice (no turn followed it): what follows the
    # summary now is what followed it at the splice
    assert event.messages_kept == len(_after_summary(run.context.messages))
    return event.messages_kept


async def test_messages_kept_is_the_planned_tail_when_the_summary_lands_before_the_next_turn(
    openai_server,
):
    # limit 8, keep 4: the compaction starts on the 4th turn's request and lands after its
    # answer: the tail is the 4 planned, that answer among them
    assert await _kept_with_summary_landing_after(openai_server, answers=4, user_turns=4) == 4


async def test_messages_kept_counts_what_arrived_while_a_slow_summary_ran(openai_server):
    # the same compaction, its summary landing only after two more exchanges: 4 + 2 * 2
    assert await _kept_with_summary_landing_after(openai_server, answers=6, user_turns=6) == 8


def test_messages_kept_definition_is_in_the_docs():
    from pipecat_summarizer.events import ContextCompactedEvent

    doc = " ".join((ContextCompactedEvent.__doc__ or "").split())
    events = " ".join((DOCS / "events.md").read_text(encoding="utf-8").split())
    text = _all_pages()
    for where in (doc, events):
        assert "at the moment of the splice" in where
        assert "arrived while the summary ran" in where
    assert "the kept tail is exactly `min_messages_after_summary`" not in text


# -- the comparison with Pipecat's built-in ------------------------------------------------

# Each row read line by line against the installed Pipecat 1.14 source
# (processors/aggregators/llm_context_summarizer.py, utils/context/llm_context_summarization.py,
# services/llm_service.py); the source checks below pin the facts each row rests on.
VERIFIED_BUILTIN_COLUMN = [
    "A barge-in clears its in-progress flag: the next response requests another summary and "
    "the one in flight is discarded when it lands; with a summarizer slower than a turn, 40 "
    "turns gave 30 requests and 1 applied summary (`benchmarks/barge_in.py`)",
    "A context replaced mid-summary (`LLMMessagesUpdateFrame`, a Flows node change) is checked "
    "by length only: when long enough, the old summary is applied and new messages are "
    "silently dropped",
    "Unbounded summarizer input; the output budget is sent as `max_tokens` but not stated in "
    "the prompt",
    "The token threshold counts the whole context, so a large system prompt makes it fire "
    "every turn",
    "Only a `system` message at index 0 is protected",
    "A failure is logged at ERROR and requested again on the next response: no backoff, no "
    "escalation",
    "The transcript is a plain user message (`Conversation history: ...`): the summarizer may "
    "answer the user instead of summarizing",
]


def _comparison_rows() -> list[tuple[str, str]]:
    text = (DOCS / "switching.md").read_text(encoding="utf-8")
    header = "| Pipecat 1.14 built-in | pipecat-summarizer |"
    block = text.split(header, 1)[1].split("\n\n", 1)[0]
    rows = [line for line in block.strip().splitlines()[1:]]  # after the |---| line
    cells = [[c.strip() for c in row.strip().strip("|").split(" | ")] for row in rows]
    return [(a, b) for a, b in cells]


def test_comparison_table_rows_are_the_verified_ones():
    assert version("pipecat-ai").startswith("1.14."), "re-read the table against this Pipecat"
    rows = _comparison_rows()
    assert [builtin for builtin, _ in rows] == VERIFIED_BUILTIN_COLUMN
    ours = " ".join(b for _, b in rows)
    # Pipecat 1.14 counts messages since the last summary too: not a difference
    assert "since the last summary" not in ours
    assert "rejected" not in ours


def _code(function) -> str:
    """A function's code without its docstring."""
    (node,) = ast.parse(textwrap.dedent(inspect.getsource(function))).body
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    return "\n".join(ast.unparse(statement) for statement in node.body[1:])


def test_the_builtin_facts_the_table_rests_on():
    src = inspect.getsource
    # counted since the last summary (so not listed as a difference)
    assert "_messages_since_summary()" in src(LLMContextSummarizer._should_summarize)
    # a barge-in only clears the flag; the pending id is replaced by the next request
    interruption = src(LLMContextSummarizer._handle_interruption)
    assert "self._summarization_in_progress = False" in interruption
    assert "_pending_summary_request_id = None" not in interruption
    assert "request_id != self._pending_summary_request_id" in src(
        LLMContextSummarizer._handle_summary_result
    )
    # the replaced-context check compares lengths, not messages
    validate = _code(LLMContextSummarizer._validate_summary_context)
    assert " is " not in validate and "len(self._context.messages)" in validate
    # the token threshold estimates the whole context, system message included
    assert "estimate_context_tokens(self._context)" in src(LLMContextSummarizer._should_summarize)
    # only messages[0] is protected; selection has no input budget
    assert "messages[0]" in src(LLMContextSummarizer._leading_system_message_count)
    params = inspect.signature(LLMContextSummarizationUtil.get_messages_to_summarize).parameters
    assert list(params) == ["context", "min_messages_to_keep"]
    # a failure: logged, state cleared, nothing delays the next request
    result = src(LLMContextSummarizer._handle_summary_result)
    assert "if frame.error:" in result and "backoff" not in result


# -- the inspect example -------------------------------------------------------------------


def test_readme_inspect_search_example_finds_on_the_bundled_call(tmp_path, capsys):
    text = (DOCS / "memory.md").read_text(encoding="utf-8")
    (replay,) = re.findall(r"`(pipecat-summarizer replay nutrition_call --store \S+)`", text)
    (search,) = re.findall(r"^(pipecat-summarizer inspect \S+ --search \"[^\"]+\")", text, re.M)
    replay_argv, search_argv = shlex.split(replay)[1:], shlex.split(search)[1:]
    db = replay_argv[-1]
    assert search_argv[1] == db, "the example searches the store the replay wrote"
    replay_argv[-1] = search_argv[1] = str(tmp_path / db)
    assert main([*replay_argv, "--no-progress"]) == 0
    capsys.readouterr()
    assert main(search_argv) == 0
    found = capsys.readouterr().out.splitlines()
    assert len(found) >= 3 and "no dropped message" not in found[0].lower()
    assert all("(summarized)" in line for line in found)


# -- LoCoMo's origin, and no machine paths -------------------------------------------------


def test_locomo_origin_is_named_where_it_is_used():
    pages = [README, *sorted(DOCS.glob("*.md"))]
    using = [p for p in pages if "--locomo" in p.read_text(encoding="utf-8")]
    assert using
    for page in using:
        text = " ".join(page.read_text(encoding="utf-8").split())
        assert "snap-research/locomo" in text and "data/locomo10.json" in text, page.name


def _docs() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [ROOT / name for name in listed if (ROOT / name).is_file()]


def test_no_machine_paths_in_docs():
    docs = _docs()
    assert ROOT / "README.md" in docs and ROOT / "benchmarks/README.md" in docs
    found = [
        f"{doc.relative_to(ROOT)}:{n}"
        for doc in docs
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"(?<![\w.])/(work|home|root)/", line)
    ]
    assert found == []

"""The command line of ``pipecat-summarizer replay``: its argument types and arguments.

Each type checks one value and names what is wrong (argparse then exits with status 2);
combinations are checked when the job is built (:mod:`pipecat_summarizer_cli.replay.command`).
"""

from __future__ import annotations

import argparse

STRATEGY_NAMES = ("full_buffer", "pipecat_builtin", "pipecat_summarizer")
#: Chosen only by name (``--strategies``), never by default: ours with a store and per-turn
#: recall, without and with tool-result clearing (the clearing figure).
EXTRA_STRATEGIES = ("pipecat_summarizer_recall", "pipecat_summarizer_clearing")
INSTALL_HINT = 'pip install "pipecat-summarizer[replay]"'

# dest -> Pipecat's default; a flag not given takes the default of the input's preset
PIPECAT_THRESHOLDS: dict[str, int | None] = {
    "max_context_tokens": 8000,
    "max_unsummarized_messages": 20,
    "keep": 4,
    "target_tokens": None,
}


# -- argument types ------------------------------------------------------------------------


def _threshold(value: str) -> int | None:
    if value.lower() in ("none", "off", "0"):
        return None
    n = _int(value)
    if n < 1:
        raise argparse.ArgumentTypeError("must be positive (or 'none' to disable)")
    return n


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None


def _non_negative_int(value: str) -> int:
    n = _int(value)
    if n < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return n


def _positive_int(value: str) -> int:
    n = _int(value)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


def _ceiling(value: str) -> int:
    n = _positive_int(value)
    if n < 200:
        raise argparse.ArgumentTypeError("must be at least 200")
    return n


def _number(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if not x >= 0 or x == float("inf"):
        raise argparse.ArgumentTypeError("must be a non-negative number")
    return x


def _share(value: str) -> float:
    x = _number(value)
    if x > 1:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return x


def _span(value: str):
    from pipecat_summarizer_cli.replay.timing import Span

    try:
        return Span.parse(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _strategies(value: str) -> tuple[str, ...]:
    names = [s.strip() for s in value.split(",") if s.strip()]
    known = (*STRATEGY_NAMES, *EXTRA_STRATEGIES)
    bad = [s for s in names if s not in known]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown strategy {', '.join(bad) or '(none)'}; choose from {', '.join(known)}"
        )
    return tuple(s for s in known if s in names)


MAIN_PRICES = (3.0, 15.0, 0.3)
"""The main LLM's default prices (input, output, cached input), dollars per million tokens: a
large model's (Claude Sonnet's published $3 / $15, cached reads at a tenth)."""

SUMMARY_PRICES = (0.15, 0.60)
"""The summarizer's default prices (input, output), dollars per million tokens: OpenAI's
published prices for gpt-4o-mini, the small model this package's examples use."""


# -- the parser ----------------------------------------------------------------------------


def add_arguments(rp: argparse.ArgumentParser) -> None:
    """Add the replay's arguments to its parser."""
    src = rp.add_argument_group("input (exactly one)")
    src.add_argument(
        "transcript",
        nargs="?",
        help="JSONL file, one OpenAI-format chat message per line (system first); user "
        'messages may carry a "timestamp" (seconds or ISO 8601) that sets the turn cadence. '
        "Or the name of a conversation shipped with the package (nutrition_call, "
        "support_call), whose probes come with it",
    )
    src.add_argument(
        "--synthetic",
        nargs="?",
        const=200,
        type=_positive_int,
        metavar="N",
        help="replay the article's scenario: N exchanges of 480 tokens after a 3,000-token "
        "prefix (default N: 200)",
    )
    src.add_argument(
        "--locomo",
        metavar="PATH",
        help="replay LoCoMo conversations (locomo10.zip, a JSON file or a folder); "
        "all of them unless --locomo-id/--locomo-index",
    )
    src.add_argument(
        "--locomo-id",
        action="append",
        default=[],
        metavar="ID",
        help="LoCoMo conversation id, e.g. 30 or conv-30 (repeatable)",
    )
    src.add_argument(
        "--locomo-index", type=int, metavar="I", help="LoCoMo conversation by 0-based index"
    )

    probes = rp.add_argument_group("facts that must stay known")
    probes.add_argument("--probe", action="append", default=[], metavar="TEXT", help="repeatable")
    probes.add_argument("--probes-file", metavar="PATH", help="one probe per line")

    out = rp.add_argument_group("output")
    out.add_argument("--report", metavar="PATH", help="write the JSON report here")
    out.add_argument("--plot", metavar="PATH", help="write the PNG plot here (needs matplotlib)")
    out.add_argument(
        "--store",
        metavar="PATH",
        help="ours archives each replayed call (compactions, every dropped message, pinned "
        "facts) into this SQLite file or postgresql:// DSN; read it with "
        "'pipecat-summarizer inspect PATH'",
    )
    out.add_argument("--no-progress", action="store_true", help="no progress bar")
    out.add_argument("-v", "--verbose", action="count", default=0, help="-v info, -vv debug logs")

    tm = rp.add_argument_group(
        "time",
        "The replay runs on a simulated clock: a 160-turn call replays in seconds, with "
        "every event in the order it has at full speed. Each user turn starts with an "
        "InterruptionFrame (as Pipecat's user aggregator sends at every turn start); the "
        "user speaks at 2.5 words/s, the end of the turn takes 0.5 s to detect, the bot "
        "starts answering after 0.8-1.6 s and speaks its answer; the user then pauses "
        "0.4-2 s, or barges in while the bot speaks.",
    )
    tm.add_argument(
        "--instant",
        action="store_true",
        help="no time: every summary lands before the next turn, no interruptions",
    )
    tm.add_argument(
        "--summary-latency",
        type=_span,
        default=None,
        metavar="LOW-HIGH",
        help="seconds before the summarizer answers (default 0.5-3)",
    )
    tm.add_argument(
        "--summary-tokens-per-second",
        type=_number,
        default=None,
        metavar="N",
        help="the summarizer's output rate: an N-token summary takes N/rate s more "
        "(default 100; 0: none)",
    )
    tm.add_argument(
        "--answer-tokens-per-second",
        type=_number,
        default=None,
        metavar="N",
        help="the main LLM's output rate: an answer reaches the context N/rate s after its "
        "first token (default 100; 0: at once)",
    )
    tm.add_argument(
        "--barge-ins",
        type=_share,
        default=None,
        metavar="SHARE",
        help="share of the bot's answers the user interrupts (default 0.2)",
    )
    tm.add_argument("--seed", type=_int, default=0, help="seed of the simulated call")
    tm.add_argument(
        "--compare-busy",
        action="store_true",
        help="replay the transcript twice, as set by the other flags (the calm call) and busy "
        "(the summarizer writing 40 tokens/s, a barge-in on half the answers; the rest "
        "alike), in one table, one report and one plot (what make demo runs)",
    )

    th = rp.add_argument_group(
        "thresholds",
        "Pipecat's defaults (8000 / 20 / 4 / 6000), except that --synthetic with none of "
        "these flags uses the article's hybrid: max_context_tokens=15000, "
        "max_unsummarized_messages=40 (20 exchanges), keep=20 (10 exchanges), "
        "target_tokens=700. Any of these flags replaces the preset: the flags not given "
        "then take Pipecat's defaults.",
    )
    th.add_argument("--max-context-tokens", type=_threshold, default=argparse.SUPPRESS, metavar="N")
    th.add_argument(
        "--max-unsummarized-messages", type=_threshold, default=argparse.SUPPRESS, metavar="N"
    )
    th.add_argument(
        "--keep",
        type=_non_negative_int,
        default=argparse.SUPPRESS,
        metavar="N",
        help="min_messages_after_summary",
    )
    th.add_argument(
        "--target-tokens",
        type=_threshold,
        default=argparse.SUPPRESS,
        metavar="N",
        help="target_context_tokens, the summary's output budget (Pipecat's default: 6000)",
    )
    th.add_argument(
        "--strategies",
        type=_strategies,
        default=STRATEGY_NAMES,
        metavar="LIST",
        help="comma-separated subset of "
        + ",".join(STRATEGY_NAMES)
        + " (the default), and pipecat_summarizer_recall (ours with RecallParams()) or "
        "pipecat_summarizer_clearing (the same with ClearingParams()), whose store is a "
        "temporary SQLite file unless --store",
    )

    cg = rp.add_argument_group(
        "ceiling and outage",
        "Show the hard ceiling at work: ours evicts the oldest units into a pending queue "
        "when a request would exceed --max-request-tokens and no summary is ready; the "
        "report counts every strategy's requests over it. During a simulated outage every "
        "summarizer call of both summarizing strategies fails (the failures are counted, not "
        "logged, unless -v); ours retries on its own backoff (5 s doubling to 120 s).",
    )
    cg.add_argument(
        "--max-request-tokens",
        type=_ceiling,
        default=None,
        metavar="N",
        help="CeilingParams(max_request_tokens=N) for ours (at least 200)",
    )
    cg.add_argument(
        "--summarizer-down-from",
        type=_positive_int,
        default=None,
        metavar="TURN",
        help="first user turn (1-based) of the outage",
    )
    cg.add_argument(
        "--summarizer-down-for",
        type=_positive_int,
        default=None,
        metavar="TURNS",
        help="length of the outage in turns",
    )

    sm = rp.add_argument_group("summarizer (the same backend for both summarizing strategies)")
    sm.add_argument("--summarizer", choices=("extractive", "openai"), default="extractive")
    sm.add_argument("--base-url", help="OpenAI-compatible base URL (openai)")
    sm.add_argument("--model", default="gpt-4o-mini", help="model name (openai)")
    sm.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        metavar="VAR",
        help="environment variable holding the API key (openai)",
    )

    pr = rp.add_argument_group(
        "prices, dollars per million tokens",
        "The main LLM and the summarizer are priced apart. Main LLM defaults: a large "
        f"model's ${MAIN_PRICES[0]:g} input / ${MAIN_PRICES[1]:g} output / "
        f"${MAIN_PRICES[2]:g} cached input. Summarizer defaults: gpt-4o-mini's published "
        f"${SUMMARY_PRICES[0]:g} input / ${SUMMARY_PRICES[1]:g} output.",
    )
    pr.add_argument("--input-price", type=_number, default=MAIN_PRICES[0], metavar="USD")
    pr.add_argument("--output-price", type=_number, default=MAIN_PRICES[1], metavar="USD")
    pr.add_argument("--cached-input-price", type=_number, default=MAIN_PRICES[2], metavar="USD")
    pr.add_argument("--summary-input-price", type=_number, default=SUMMARY_PRICES[0], metavar="USD")
    pr.add_argument(
        "--summary-output-price", type=_number, default=SUMMARY_PRICES[1], metavar="USD"
    )

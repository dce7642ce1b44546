"""``pipecat-summarizer replay``: parse the command line, run the replay, print the results.

Needs the ``replay`` extra (``pip install "pipecat-summarizer[replay]"``: tqdm, matplotlib).
The arguments are turned once into a frozen :class:`ReplayJob` (nothing mutates the parsed
namespace); the thresholds are checked by the library itself (Pipecat's config and
``ContextSummarizer``'s construction), not again here. A missing plotting library is reported
before anything is replayed, and the JSON report is written before the plot, so a failing
later step never loses it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loguru import logger

STRATEGY_NAMES = ("full_buffer", "pipecat_builtin", "pipecat_summarizer")
INSTALL_HINT = 'pip install "pipecat-summarizer[replay]"'

# dest -> Pipecat's default; a flag not given takes the default of the input's preset
PIPECAT_THRESHOLDS: dict[str, int | None] = {
    "max_context_tokens": 8000,
    "max_unsummarized_messages": 20,
    "keep": 4,
    "target_tokens": None,
}


class UsageError(Exception):
    """A problem with the command line or its inputs (exit status 2)."""


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
    from pipecat_summarizer.replay.timing import Span

    try:
        return Span.parse(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _strategies(value: str) -> tuple[str, ...]:
    names = [s.strip() for s in value.split(",") if s.strip()]
    bad = [s for s in names if s not in STRATEGY_NAMES]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown strategy {', '.join(bad) or '(none)'}; "
            f"choose from {', '.join(STRATEGY_NAMES)}"
        )
    return tuple(s for s in STRATEGY_NAMES if s in names)


# -- the parser ----------------------------------------------------------------------------


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``replay`` subcommand to ``subparsers``; it runs :func:`run`."""
    from pipecat_summarizer.replay.report import MAIN_PRICES, SUMMARY_PRICES

    rp = subparsers.add_parser(
        "replay",
        help="replay a conversation through three context strategies and compare them",
        description=(
            "Replay a conversation turn by turn through real Pipecat pipelines with three "
            "strategies (full_buffer: no summarization; pipecat_builtin: Pipecat's "
            "auto context summarization; pipecat_summarizer: this package), with the same "
            "thresholds and summarizer, and compare what the main LLM is sent. By default "
            "the call is replayed in simulated real time: user turns seconds apart, a "
            "summarizer that takes seconds, barge-ins; --instant replays without time. "
            f"Needs the replay extra: {INSTALL_HINT}."
        ),
    )
    rp.set_defaults(run=run)
    src = rp.add_argument_group("input (exactly one)")
    src.add_argument(
        "transcript",
        nargs="?",
        help="JSONL file, one OpenAI-format chat message per line (system first); user "
        'messages may carry a "timestamp" (seconds or ISO 8601) that sets the turn cadence',
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
        "--barge-ins",
        type=_share,
        default=None,
        metavar="SHARE",
        help="share of the bot's answers the user interrupts (default 0.2)",
    )
    tm.add_argument("--seed", type=_int, default=0, help="seed of the simulated call")

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
        help="comma-separated subset of " + ",".join(STRATEGY_NAMES),
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
        help="SummarizerOptions(max_request_tokens=N) for ours (at least 200)",
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
    return rp


# -- the job -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayJob:
    """Everything the command line asked for, resolved and checked.

    Parameters:
        args: The parsed arguments (read only).
        thresholds: The trigger thresholds.
        thresholds_source: Where they came from, for the report.
        model: The call model (``None``: instant).
        outage: The simulated summarizer outage, if any.
        prices: Prices per million tokens.
        probes: Facts that must stay known.
    """

    args: argparse.Namespace
    thresholds: Any
    thresholds_source: str
    model: Any
    outage: Any
    prices: Any
    probes: list[str] = field(default_factory=list)

    @property
    def strategies(self) -> tuple[str, ...]:
        """The strategies to run."""
        return tuple(self.args.strategies)


def resolve_thresholds(given: dict[str, Any], synthetic: bool) -> tuple[dict[str, Any], str]:
    """The threshold values and a description of where they came from.

    Args:
        given: The threshold flags given on the command line, by name.
        synthetic: Whether the input is ``--synthetic`` (whose preset is the article's).

    Returns:
        ``(values, source)``: every threshold, and where they came from.
    """
    from pipecat_summarizer.replay.synthetic import HYBRID_THRESHOLDS

    if synthetic and not given:
        return dict(HYBRID_THRESHOLDS), (
            "the article's hybrid (the --synthetic default): compact at 20 exchanges "
            "(40 messages), keep the last 10 (20 messages), ~700-token summary"
        )
    if not given:
        return dict(PIPECAT_THRESHOLDS), "Pipecat's defaults"
    source = "command line (" + ", ".join("--" + k.replace("_", "-") for k in given) + ")"
    if len(given) < len(PIPECAT_THRESHOLDS):
        source += ", Pipecat's defaults for the rest"
    return PIPECAT_THRESHOLDS | given, source


def _check_thresholds(thresholds: Any, strategies: tuple[str, ...]) -> None:
    """Let the library judge the thresholds: Pipecat's config, then ours' constructor."""
    from pipecat.processors.aggregators.llm_context import LLMContext

    from pipecat_summarizer import ContextSummarizer, ExtractiveSummarizer

    try:
        config = thresholds.config()
        if "pipecat_summarizer" in strategies:
            ContextSummarizer(
                context=LLMContext(), config=config, summarizer=ExtractiveSummarizer()
            )
    except (TypeError, ValueError) as e:
        raise UsageError(f"thresholds: {e}") from None


def build_job(args: argparse.Namespace) -> ReplayJob:
    """Resolve and check the arguments.

    Raises:
        UsageError: On a bad combination or value.
    """
    from pipecat_summarizer.replay.backends import Outage
    from pipecat_summarizer.replay.report import Prices
    from pipecat_summarizer.replay.strategies import Thresholds
    from pipecat_summarizer.replay.timing import CallModel

    sources = [args.transcript is not None, args.synthetic is not None, args.locomo is not None]
    if sum(sources) != 1:
        raise UsageError("give exactly one of TRANSCRIPT, --synthetic [N] or --locomo PATH")
    if (args.locomo_id or args.locomo_index is not None) and not args.locomo:
        raise UsageError("--locomo-id/--locomo-index need --locomo PATH")
    if (args.summarizer_down_from is None) != (args.summarizer_down_for is None):
        raise UsageError("--summarizer-down-from and --summarizer-down-for go together")
    timed = [
        f
        for f, v in (
            ("--summary-latency", args.summary_latency),
            ("--summary-tokens-per-second", args.summary_tokens_per_second),
            ("--barge-ins", args.barge_ins),
        )
        if v is not None
    ]
    if args.instant and timed:
        raise UsageError(f"{', '.join(timed)} model time: not with --instant")
    if args.plot and not _importable("matplotlib"):
        raise UsageError(f"--plot needs matplotlib: {INSTALL_HINT}")
    given = {k: getattr(args, k) for k in PIPECAT_THRESHOLDS if hasattr(args, k)}
    values, source = resolve_thresholds(given, args.synthetic is not None)
    thresholds = Thresholds(
        values["max_context_tokens"],
        values["max_unsummarized_messages"],
        values["keep"],
        values["target_tokens"],
    )
    _check_thresholds(thresholds, tuple(args.strategies))
    model = None
    if not args.instant:
        defaults = CallModel()
        model = CallModel(
            summary_latency_s=args.summary_latency or defaults.summary_latency_s,
            summary_tokens_per_second=(
                defaults.summary_tokens_per_second
                if args.summary_tokens_per_second is None
                else args.summary_tokens_per_second
            ),
            barge_in_share=defaults.barge_in_share if args.barge_ins is None else args.barge_ins,
            seed=args.seed,
        )
    outage = None
    if args.summarizer_down_from is not None:
        outage = Outage(args.summarizer_down_from, args.summarizer_down_for)
    prices = Prices(
        args.input_price,
        args.output_price,
        args.cached_input_price,
        args.summary_input_price,
        args.summary_output_price,
    )
    return ReplayJob(args, thresholds, source, model, outage, prices, _probes(args))


def _probes(args: argparse.Namespace) -> list[str]:
    from pipecat_summarizer.replay.transcript import load_probes

    probes = list(args.probe)
    if args.probes_file:
        try:
            probes += load_probes(args.probes_file)
        except OSError as e:
            raise UsageError(
                f"cannot read probes file {args.probes_file}: {e.strerror or e}"
            ) from None
    return probes


def _backend(job: ReplayJob):
    from pipecat_summarizer.replay.backends import extractive_backend, openai_backend

    args = job.args
    if "pipecat_builtin" not in job.strategies and "pipecat_summarizer" not in job.strategies:
        return None
    if args.summarizer == "openai":
        api_key = os.environ.get(args.api_key_env)
        if not api_key and not args.base_url:
            raise UsageError(
                f"--summarizer openai needs an API key in ${args.api_key_env} "
                "(or a --base-url for a local server that needs none)"
            )
        return openai_backend(model=args.model, base_url=args.base_url, api_key=api_key)
    return extractive_backend()


# -- running -------------------------------------------------------------------------------


class _Progress:
    """A tqdm bar on stderr, or one line per strategy when stderr is not a terminal."""

    def __init__(self, total: int, enabled: bool, label: str):
        self._bar = None
        self._enabled = enabled
        self._label = label
        self._started = time.monotonic()
        self._last: str | None = None
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="turn", file=sys.stderr, leave=False)

    def __call__(self, strategy: str, turn: int) -> None:
        if self._bar is not None:
            if strategy != self._last:
                self._bar.set_description(f"{self._label} {strategy}")
            self._bar.update(1)
        self._last = strategy

    def done(self, strategy: str, turns: int) -> None:
        now = time.monotonic()
        elapsed, self._started = now - self._started, now
        if self._bar is None and self._enabled:
            print(
                f"  {self._label} {strategy}: {turns} turns replayed ({elapsed:.1f}s)",
                file=sys.stderr,
            )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def replay_transcript(job: ReplayJob, transcript: Any, backend: Any) -> list:
    """Replay one transcript with every strategy of ``job`` (with a progress display)."""
    from pipecat_summarizer.replay import clock
    from pipecat_summarizer.replay.runner import replay_options, run_all

    for warning in transcript.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    n = len(transcript.turns)
    progress = _Progress(n * len(job.strategies), not job.args.no_progress, transcript.name)
    try:
        return clock.run(
            run_all(
                transcript,
                strategies=job.strategies,
                thresholds=job.thresholds,
                backend=backend,
                options=replay_options(job.args.max_request_tokens),
                progress=progress,
                outage=job.outage,
                model=job.model,
                on_strategy_done=lambda strategy: progress.done(strategy, n),
            )
        )
    finally:
        progress.close()


def _write_json(path: str, data: Any) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def run(args: argparse.Namespace) -> int:
    """Run ``replay``; returns the exit status (2 on a bad command line or input)."""
    try:
        return _run(args)
    except UsageError as e:
        print(f"pipecat-summarizer: error: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from pipecat_summarizer.replay import output

    if not _importable("tqdm"):
        raise UsageError(f"the replay needs its extra (tqdm, matplotlib): {INSTALL_HINT}")
    _configure_logging(args.verbose)
    job = build_job(args)
    backend = _backend(job)
    if args.synthetic is not None:
        report, plots = output.synthetic(job, backend)
    elif args.locomo is not None:
        report, plots = output.locomo(job, backend)
    else:
        report, plots = output.single(job, backend)
    if args.report:  # first: a failing plot must not lose the report
        try:
            _write_json(args.report, report)
        except OSError as e:
            print(f"pipecat-summarizer: error: cannot write the report: {e}", file=sys.stderr)
            return 1
        print(f"report written to {args.report}")
    for plot in plots:
        try:
            plot()
        except Exception as e:  # the figures are printed and saved already
            print(f"pipecat-summarizer: error: the plot failed: {e}", file=sys.stderr)
            return 1
    return 0


def _importable(module: str) -> bool:
    """Whether ``module`` imports (really imported: a broken install counts as missing)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def _configure_logging(verbose: int) -> None:
    logger.remove()
    level = "WARNING" if verbose == 0 else "INFO" if verbose == 1 else "DEBUG"
    if verbose:
        logger.add(sys.stderr, level=level)
    else:
        # a simulated outage makes every summary attempt log a failure: counted in the
        # report instead (-v shows them)
        logger.add(
            sys.stderr, level=level, filter=lambda r: "(simulated outage)" not in r["message"]
        )

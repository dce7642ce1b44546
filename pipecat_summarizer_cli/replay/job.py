"""The replay job: the command line resolved and checked, and the replay of one transcript.

:func:`build_job` turns the parsed arguments into a frozen :class:`ReplayJob` once (nothing
mutates the namespace); the thresholds are judged by the library itself (Pipecat's config
and ``ContextSummarizer``'s constructor), not by checks repeated here. A missing plotting
library is reported here, before anything is replayed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pipecat_summarizer_cli.replay.arguments import INSTALL_HINT, PIPECAT_THRESHOLDS

if TYPE_CHECKING:
    from pipecat_summarizer_cli.replay.backends import Backend, Outage
    from pipecat_summarizer_cli.replay.report import Prices, StrategyResult
    from pipecat_summarizer_cli.replay.strategies import Thresholds
    from pipecat_summarizer_cli.replay.timing import CallModel
    from pipecat_summarizer_cli.replay.transcript import Transcript


class UsageError(Exception):
    """A problem with the command line or its inputs (exit status 2)."""


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
    thresholds: Thresholds
    thresholds_source: str
    model: CallModel | None
    outage: Outage | None
    prices: Prices
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
    from pipecat_summarizer_cli.replay.synthetic import HYBRID_THRESHOLDS

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


def _check_thresholds(thresholds: Thresholds, strategies: tuple[str, ...]) -> None:
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
    from pipecat_summarizer_cli.replay.backends import Outage
    from pipecat_summarizer_cli.replay.bundled import resolve_transcript_argument
    from pipecat_summarizer_cli.replay.report import Prices
    from pipecat_summarizer_cli.replay.strategies import Thresholds
    from pipecat_summarizer_cli.replay.timing import CallModel

    sources = [args.transcript is not None, args.synthetic is not None, args.locomo is not None]
    if sum(sources) != 1:
        raise UsageError("give exactly one of TRANSCRIPT, --synthetic [N] or --locomo PATH")
    try:  # a bundled conversation's name becomes its file (and its probes); a copy of args
        args = resolve_transcript_argument(args)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if (args.locomo_id or args.locomo_index is not None) and not args.locomo:
        raise UsageError("--locomo-id/--locomo-index need --locomo PATH")
    if (args.summarizer_down_from is None) != (args.summarizer_down_for is None):
        raise UsageError("--summarizer-down-from and --summarizer-down-for go together")
    timed = [
        f
        for f, v in (
            ("--summary-latency", args.summary_latency),
            ("--summary-tokens-per-second", args.summary_tokens_per_second),
            ("--answer-tokens-per-second", args.answer_tokens_per_second),
            ("--barge-ins", args.barge_ins),
        )
        if v is not None
    ]
    if args.instant and timed:
        raise UsageError(f"{', '.join(timed)} model time: not with --instant")
    if args.plot and not importable("matplotlib"):
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
            answer_tokens_per_second=(
                defaults.answer_tokens_per_second
                if args.answer_tokens_per_second is None
                else args.answer_tokens_per_second
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
    from pipecat_summarizer_cli.replay.transcript import load_probes

    probes = list(args.probe)
    if args.probes_file:
        try:
            probes += load_probes(args.probes_file)
        except OSError as e:
            raise UsageError(
                f"cannot read probes file {args.probes_file}: {e.strerror or e}"
            ) from None
    return probes


def backend_for(job: ReplayJob) -> Backend | None:
    """The summarizer backend the job asks for (``None`` without a summarizing strategy).

    Raises:
        UsageError: If the OpenAI backend has neither a key nor a base URL.
    """
    from pipecat_summarizer_cli.replay.backends import extractive_backend, openai_backend

    args = job.args
    if set(job.strategies) <= {"full_buffer"}:
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


def replay_transcript(
    job: ReplayJob, transcript: Transcript, backend: Backend | None
) -> list[StrategyResult]:
    """Replay one transcript with every strategy of ``job`` (with a progress display)."""
    from pipecat_summarizer_cli.replay import clock
    from pipecat_summarizer_cli.replay.runner import replay_options, run_all

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
                store=job.args.store,
            )
        )
    finally:
        progress.close()


def importable(module: str) -> bool:
    """Whether ``module`` imports (really imported: a broken install counts as missing)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True

"""``pipecat-summarizer replay``: parse the command line, run the replay, print the results.

Needs the ``replay`` extra (``pip install "pipecat-summarizer[replay]"``: tqdm, matplotlib).
The arguments are in :mod:`~pipecat_summarizer_cli.replay.arguments`, their resolution and the
replay of one transcript in :mod:`~pipecat_summarizer_cli.replay.job`, what is printed per kind
of input in :mod:`~pipecat_summarizer_cli.replay.output`. The JSON report is written before the
plot, so a failing later step never loses it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from loguru import logger

from pipecat_summarizer_cli.replay.arguments import INSTALL_HINT, add_arguments
from pipecat_summarizer_cli.replay.job import UsageError, backend_for, build_job, importable

# -- the parser ----------------------------------------------------------------------------


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``replay`` subcommand to ``subparsers``; it runs :func:`run`."""
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
    add_arguments(rp)
    return rp


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
    from pipecat_summarizer_cli.replay import output

    if not importable("tqdm"):
        raise UsageError(f"the replay needs its extra (tqdm, matplotlib): {INSTALL_HINT}")
    _configure_logging(args.verbose)
    if args.compare_busy:
        others = [
            flag
            for flag, given in (
                ("--instant", args.instant),
                ("--synthetic", args.synthetic is not None),
                ("--locomo", args.locomo is not None),
            )
            if given
        ]
        if others:
            raise UsageError(
                f"--compare-busy replays one transcript in simulated time: not with {others[0]}"
            )
    job = build_job(args)
    backend = backend_for(job)
    if args.compare_busy:
        report, plots = output.conditions(job, backend)
    elif args.synthetic is not None:
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

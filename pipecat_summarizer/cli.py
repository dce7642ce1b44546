"""``pipecat-summarizer``: the command-line tool.

``pipecat-summarizer replay TRANSCRIPT.jsonl`` replays a recorded conversation through real
Pipecat pipelines with three strategies (no summarization, Pipecat's built-in, this
package) and compares what each sends to the main LLM. ``--synthetic N`` replays the
article's 200-exchange scenario instead, and ``--locomo PATH`` LoCoMo conversations.
``--max-request-tokens N`` gives ours a hard ceiling, and ``--summarizer-down-from TURN
--summarizer-down-for TURNS`` makes the summarizer fail for a span of turns, to show the
ceiling at work.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from loguru import logger

STRATEGY_NAMES = ("full_buffer", "pipecat_builtin", "pipecat_summarizer")

# dest -> Pipecat's default; a flag not given takes the default of the input's preset
PIPECAT_THRESHOLDS = {
    "max_context_tokens": 8000,
    "max_unsummarized_messages": 20,
    "keep": 4,
    "target_tokens": None,
}


class UsageError(Exception):
    """A problem with the command line or its inputs (exit status 2)."""


def _threshold(value: str) -> int | None:
    if value.lower() in ("none", "off", "0"):
        return None
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer or 'none', got {value!r}"
        ) from None
    if n < 1:
        raise argparse.ArgumentTypeError("must be positive (or 'none' to disable)")
    return n


def _non_negative_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return n


def _positive_int(value: str) -> int:
    n = _non_negative_int(value)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


def _ceiling(value: str) -> int:
    n = _positive_int(value)
    if n < 200:
        raise argparse.ArgumentTypeError("must be at least 200")
    return n


def _price(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if x < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return x


def _strategies(value: str) -> list[str]:
    names = [s.strip() for s in value.split(",") if s.strip()]
    bad = [s for s in names if s not in STRATEGY_NAMES]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown strategy {', '.join(bad) or '(none)'}; "
            f"choose from {', '.join(STRATEGY_NAMES)}"
        )
    return [s for s in STRATEGY_NAMES if s in names]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser."""
    parser = argparse.ArgumentParser(
        prog="pipecat-summarizer",
        description="Background context summarization for Pipecat: tools.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    rp = sub.add_parser(
        "replay",
        help="replay a conversation through three context strategies and compare them",
        description=(
            "Replay a conversation turn by turn through real Pipecat pipelines with three "
            "strategies (full_buffer: no summarization; pipecat_builtin: Pipecat's "
            "auto context summarization; pipecat_summarizer: this package), with the same "
            "thresholds and summarizer, and compare what the main LLM is sent."
        ),
    )
    src = rp.add_argument_group("input (exactly one)")
    src.add_argument(
        "transcript",
        nargs="?",
        help="JSONL file, one OpenAI-format chat message per line (system first)",
    )
    src.add_argument(
        "--synthetic",
        nargs="?",
        const=200,
        type=int,
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
        default=list(STRATEGY_NAMES),
        metavar="LIST",
        help="comma-separated subset of " + ",".join(STRATEGY_NAMES),
    )

    cg = rp.add_argument_group(
        "ceiling and outage",
        "Show the hard ceiling at work: ours evicts the oldest units into a pending queue "
        "when a request would exceed --max-request-tokens and no summary is ready; the "
        "report counts every strategy's requests over it. During a simulated outage every "
        "summarizer call of both summarizing strategies fails (the failures are counted, not "
        "logged, unless -v). In the replay ours retries after 10 ms instead of 5 s (doubling "
        "to 120 s), i.e. once per turn, since turns come faster than real time.",
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

    pr = rp.add_argument_group("prices, dollars per million tokens")
    pr.add_argument("--input-price", type=_price, default=3.0)
    pr.add_argument("--output-price", type=_price, default=15.0)
    pr.add_argument("--cached-input-price", type=_price, default=0.3)
    return parser


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


def _backend(args: argparse.Namespace):
    from pipecat_summarizer.replay.runner import extractive_backend, openai_backend

    if "pipecat_builtin" not in args.strategies and "pipecat_summarizer" not in args.strategies:
        return None
    if args.summarizer == "openai":
        api_key = os.environ.get(args.api_key_env)
        if not api_key and not args.base_url:
            raise UsageError(
                f"--summarizer openai needs an API key in ${args.api_key_env} "
                "(or a --base-url for a local server that needs none)"
            )
        return openai_backend(model=args.model, base_url=args.base_url, api_key=api_key)
    try:
        return extractive_backend()
    except ImportError as e:
        raise UsageError(f"the extractive summarizer is not available: {e}") from None


def _outage(args: argparse.Namespace):
    from pipecat_summarizer.replay.runner import Outage

    if args.summarizer_down_from is None:
        return None
    return Outage(args.summarizer_down_from, args.summarizer_down_for)


async def _replay(transcript, args, backend, progress: _Progress):
    from pipecat_summarizer.replay.runner import Thresholds, replay_options, run_all

    return await run_all(
        transcript,
        strategies=args.strategies,
        thresholds=Thresholds(
            args.max_context_tokens, args.max_unsummarized_messages, args.keep, args.target_tokens
        ),
        backend=backend,
        options=replay_options(args.max_request_tokens),
        progress=progress,
        outage=_outage(args),
        on_strategy_done=lambda strategy: progress.done(strategy, len(transcript.turns)),
    )


def _write_json(path: str, data: Any) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _plot(args, results, title: str, path: str, turns: int) -> None:
    from pipecat_summarizer.replay.plot import plot_results

    outage = _outage(args)
    plot_results(
        results,
        path,
        title=title,
        threshold=args.max_context_tokens,
        turns=turns,
        ceiling=args.max_request_tokens,
        outage=(outage.start, outage.end) if outage else None,
    )
    print(f"plot written to {path}")


def _meta(args, backend, transcript) -> dict[str, Any]:
    from pipecat_summarizer.replay.runner import Thresholds, replay_options

    options = replay_options(args.max_request_tokens)
    outage = _outage(args)
    return {
        "transcript": transcript.name,
        "thresholds_source": args.thresholds_source,
        "thresholds": {
            "max_context_tokens": args.max_context_tokens,
            "max_unsummarized_messages": args.max_unsummarized_messages,
            "min_messages_after_summary": args.keep,
            "target_context_tokens": Thresholds(
                args.max_context_tokens,
                args.max_unsummarized_messages,
                args.keep,
                args.target_tokens,
            )
            .config()
            .summary_config.target_context_tokens,
        },
        "summarizer": backend.name if backend else None,
        "max_request_tokens": args.max_request_tokens,
        "summarizer_outage": (
            {"from_turn": outage.start, "turns": outage.turns, "recovered_at_turn": outage.end}
            if outage
            else None
        ),
        "summarizer_options": {
            "max_request_tokens": options.max_request_tokens,
            "soft_trigger_ratio": options.soft_trigger_ratio,
            "retry_backoff_s": options.retry_backoff_s,
            "max_retry_backoff_s": options.max_retry_backoff_s,
        },
        "prices_per_million": {
            "input": args.input_price,
            "output": args.output_price,
            "cached_input": args.cached_input_price,
        },
        "token_counter": "EstimateTokenCounter",
    }


def _title(transcript, args) -> str:
    limits = []
    if args.max_context_tokens:
        limits.append(f"max_context_tokens={args.max_context_tokens:,}")
    if args.max_unsummarized_messages:
        limits.append(f"max_unsummarized_messages={args.max_unsummarized_messages}")
    limits.append(f"keep={args.keep}")
    if args.target_tokens:
        limits.append(f"target_context_tokens={args.target_tokens:,}")
    if args.max_request_tokens:
        limits.append(f"max_request_tokens={args.max_request_tokens:,}")
    outage = _outage(args)
    if outage:
        limits.append(f"summarizer down turns {outage.start}-{outage.end - 1}")
    return f"{transcript.name}: {len(transcript.turns)} turns, " + ", ".join(limits)


def _run_single(args, transcript, probes, backend, prices, extra_meta=None) -> dict[str, Any]:
    from pipecat_summarizer.replay.report import build_report, format_table

    for warning in transcript.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    progress = _Progress(
        len(transcript.turns) * len(args.strategies), not args.no_progress, transcript.name
    )
    try:
        results = asyncio.run(_replay(transcript, args, backend, progress))
    finally:
        progress.close()
    meta = _meta(args, backend, transcript) | (extra_meta or {})
    report = build_report(
        results,
        turns=len(transcript.turns),
        prices=prices,
        probes=probes,
        meta=meta,
        ceiling=args.max_request_tokens,
    )
    print(f"\n{_title(transcript, args)}; summarizer: {meta['summarizer'] or '-'}")
    print(f"thresholds: {args.thresholds_source}\n")
    print(format_table(report))
    for name, s in report["strategies"].items():
        if s["probes_missing"]:
            print(f"  {name} lost by the end: " + "; ".join(s["probes_missing"]))
        dropped = s.get("probes_dropped_at_turn") or {}
        if dropped:
            print(
                f"  {name} dropped mid-call: "
                + "; ".join(
                    f"{p} (turn {t})" if t else f"{p} (never sent)" for p, t in dropped.items()
                )
            )
    outage = _outage(args)
    ours = report["strategies"].get("pipecat_summarizer")
    if outage and ours and args.max_request_tokens:
        drained = ours.get("pending_drained_turn")
        print(
            f"  pipecat_summarizer pending queue: at most {ours['pending_max_messages']} "
            f"messages, {ours['pending_final_messages']} at the end"
            + (f", drained by the end of turn {drained}" if drained else "")
            + f" (summarizer back at turn {outage.end})"
        )
    if args.plot:
        _plot(args, results, _title(transcript, args), args.plot, len(transcript.turns))
    return report


def _cmd_synthetic(args, probes, backend, prices) -> dict[str, Any]:
    from pipecat_summarizer.replay import synthetic

    if args.synthetic < 1:
        raise UsageError("--synthetic needs at least 1 exchange")
    transcript = synthetic.synthetic_transcript(args.synthetic)
    probes = probes or list(synthetic.PROBES)
    article = synthetic.article_full_buffer_tokens(args.synthetic)
    report = _run_single(args, transcript, probes, backend, prices)
    full = report["strategies"].get("full_buffer")
    info: dict[str, Any] = {
        "exchanges": args.synthetic,
        "article_full_buffer_input_tokens": article,
        "expected_replay_full_buffer_input_tokens": synthetic.replay_full_buffer_tokens(
            args.synthetic
        ),
    }
    if full:
        diff = (full["input_tokens"] - article) / article
        info["full_buffer_vs_article"] = round(diff, 5)
        print(
            f"\nfull buffer: {full['input_tokens']:,} input tokens; the article's "
            f"sum(3,000 + 480 N, N = 1..{args.synthetic}) = {article:,} ({100 * diff:+.2f}%)"
        )
    report["synthetic"] = info
    return report


def _cmd_locomo(args, probes, backend, prices) -> dict[str, Any]:
    from pipecat_summarizer.replay import locomo
    from pipecat_summarizer.replay.report import (
        build_report,
        format_table,
        merge_reports,
    )

    try:
        samples = locomo.select_samples(
            locomo.load_samples(args.locomo), ids=args.locomo_id, index=args.locomo_index
        )
    except (OSError, ValueError) as e:
        raise UsageError(str(e)) from None
    reports = []
    pooled_hot: dict[str, list[int]] = {}
    recall_rows = []
    for sid, sample in samples:
        conv = locomo.convert(sample, sid)
        t = conv.transcript
        progress = _Progress(len(t.turns) * len(args.strategies), not args.no_progress, t.name)
        try:
            results = asyncio.run(_replay(t, args, backend, progress))
        finally:
            progress.close()
        for res in results:
            recall, items = locomo.answer_recall(res.final_text, conv.qa)
            res.extra["answer_recall"] = round(recall, 4)
            res.extra["qa_items"] = items
            pooled_hot.setdefault(res.strategy, []).extend(res.hot_path_ns)
        meta = _meta(args, backend, t) | {
            "locomo": {
                "sample_id": conv.sample_id,
                "speakers": [conv.speaker_a, conv.speaker_b],
                "sessions": conv.sessions,
                "dialog_lines": conv.dialog_turns,
                "qa_items": len(conv.qa),
            }
        }
        report = build_report(
            results,
            turns=len(t.turns),
            prices=prices,
            probes=probes,
            meta=meta,
            ceiling=args.max_request_tokens,
        )
        reports.append(report)
        recall_rows.append((conv.sample_id, len(t.turns), report))
        if len(samples) == 1:
            print(f"\n{_title(t, args)}; summarizer: {meta['summarizer'] or '-'}\n")
            print(format_table(report))
        if args.plot:
            path = args.plot
            if len(samples) > 1:
                p = Path(args.plot)
                path = str(p.with_name(f"{p.stem}_{conv.sample_id}{p.suffix or '.png'}"))
            _plot(args, results, _title(t, args), path, len(t.turns))
    if len(samples) == 1:
        return reports[0]
    merged = merge_reports(reports, pooled_hot)
    merged["summarizer"] = backend.name if backend else None
    merged["conversations"] = reports
    print(f"\nLoCoMo, {len(samples)} conversations; summarizer: {merged['summarizer'] or '-'}\n")
    print(_locomo_table(recall_rows, merged, args.strategies))
    print("\nAll conversations together:\n")
    print(format_table(merged))
    return merged


def _locomo_table(rows, merged, strategies) -> str:
    head = ["conversation", "turns"] + [f"recall {s}" for s in strategies]
    if "full_buffer" in strategies:
        head += [f"billed {s}" for s in strategies if s != "full_buffer"]
    lines = []

    def fmt(report) -> list[str]:
        st = report["strategies"]
        cells = [f"{100 * st[s]['answer_recall']:.1f}%" for s in strategies]
        if "full_buffer" in strategies:
            base = st["full_buffer"]["input_tokens"]
            for s in strategies:
                if s != "full_buffer":
                    billed = st[s]["input_tokens"] + st[s]["summary_input_tokens"]
                    cells.append(f"{100 * billed / base:.1f}%" if base else "-")
        return cells

    body = [[sid, str(turns), *fmt(rep)] for sid, turns, rep in rows]
    body.append(["all (item-weighted)", str(merged["turns"]), *fmt(merged)])
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines.append("  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)))
    lines.append("-" * (sum(widths) + 2 * (len(widths) - 1)))
    for r in body:
        lines.append("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
    return "\n".join(lines)


def _resolve_thresholds(args: argparse.Namespace) -> None:
    """Fill in the threshold flags not given: the article's hybrid for ``--synthetic`` when
    none is given, Pipecat's defaults otherwise; record which in ``thresholds_source``."""
    from pipecat_summarizer.replay.synthetic import HYBRID_THRESHOLDS

    given = [k for k in PIPECAT_THRESHOLDS if hasattr(args, k)]
    if args.synthetic is not None and not given:
        defaults = HYBRID_THRESHOLDS
        args.thresholds_source = (
            "the article's hybrid (the --synthetic default): compact at 20 exchanges "
            "(40 messages), keep the last 10 (20 messages), ~700-token summary"
        )
    else:
        defaults = PIPECAT_THRESHOLDS
        args.thresholds_source = (
            "Pipecat's defaults"
            if not given
            else "command line ("
            + ", ".join("--" + k.replace("_", "-") for k in given)
            + ")"
            + (", Pipecat's defaults for the rest" if len(given) < len(PIPECAT_THRESHOLDS) else "")
        )
    for key, value in defaults.items():
        if not hasattr(args, key):
            setattr(args, key, value)


def cmd_replay(args: argparse.Namespace) -> int:
    """Run ``replay``; returns the exit status."""
    from pipecat_summarizer.replay.report import Prices
    from pipecat_summarizer.replay.transcript import TranscriptError, load_transcript

    sources = [args.transcript is not None, args.synthetic is not None, args.locomo is not None]
    if sum(sources) != 1:
        raise UsageError("give exactly one of TRANSCRIPT, --synthetic [N] or --locomo PATH")
    _resolve_thresholds(args)
    if (args.summarizer_down_from is None) != (args.summarizer_down_for is None):
        raise UsageError("--summarizer-down-from and --summarizer-down-for go together")
    if (args.locomo_id or args.locomo_index is not None) and not args.locomo:
        raise UsageError("--locomo-id/--locomo-index need --locomo PATH")
    if (
        args.max_unsummarized_messages is not None
        and args.keep >= args.max_unsummarized_messages
        and "pipecat_summarizer" in args.strategies
    ):
        raise UsageError(
            f"--keep ({args.keep}) must be smaller than --max-unsummarized-messages "
            f"({args.max_unsummarized_messages})"
        )
    if args.max_context_tokens is None and args.max_unsummarized_messages is None:
        raise UsageError("at least one of --max-context-tokens and --max-unsummarized-messages")
    probes = _probes(args)
    prices = Prices(args.input_price, args.output_price, args.cached_input_price)
    backend = _backend(args)
    if args.synthetic is not None:
        report = _cmd_synthetic(args, probes, backend, prices)
    elif args.locomo is not None:
        report = _cmd_locomo(args, probes, backend, prices)
    else:
        try:
            transcript = load_transcript(args.transcript)
        except TranscriptError as e:
            raise UsageError(str(e)) from None
        report = _run_single(args, transcript, probes, backend, prices)
    if args.report:
        _write_json(args.report, report)
        print(f"report written to {args.report}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``pipecat-summarizer`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    _configure_logging(getattr(args, "verbose", 0))
    try:
        return cmd_replay(args)
    except UsageError as e:
        print(f"pipecat-summarizer: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""What ``pipecat-summarizer replay`` prints and writes, per kind of input.

Each function replays, prints the tables and returns ``(report, plots)``: the JSON report and
the plots still to draw, as callables, so the command writes the report before any plot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipecat_summarizer_cli.replay.clearing import CLEARING_STRATEGY, add_clearing_figures
from pipecat_summarizer_cli.replay.job import ReplayJob, UsageError, replay_transcript
from pipecat_summarizer_cli.replay.report import StrategyResult, build_report
from pipecat_summarizer_cli.replay.tables import (
    conditions_table,
    format_table,
    merge_reports,
    takeaway,
)

Plot = Callable[[], None]


def _meta(job: ReplayJob, backend: Any, transcript: Any) -> dict[str, Any]:
    from pipecat_summarizer_cli.replay.runner import replay_options

    options = replay_options(job.args.max_request_tokens)
    th, outage, prices, model = job.thresholds, job.outage, job.prices, job.model
    return {
        "transcript": transcript.name,
        "thresholds_source": job.thresholds_source,
        "thresholds": {
            "max_context_tokens": th.max_context_tokens,
            "max_unsummarized_messages": th.max_unsummarized_messages,
            "min_messages_after_summary": th.keep,
            "target_context_tokens": th.config().summary_config.target_context_tokens,
        },
        "summarizer": backend.name if backend else None,
        "timing": (
            "instant"
            if model is None
            else {
                "summary_latency_s": [model.summary_latency_s.low, model.summary_latency_s.high],
                "summary_tokens_per_second": model.summary_tokens_per_second,
                "answer_tokens_per_second": model.answer_tokens_per_second,
                "response_latency_s": [
                    model.response_latency_s.low,
                    model.response_latency_s.high,
                ],
                "user_pause_s": [model.user_pause_s.low, model.user_pause_s.high],
                "end_of_turn_s": model.end_of_turn_s,
                "words_per_second": model.words_per_second,
                "barge_in_share": model.barge_in_share,
                "seed": model.seed,
                "transcript_timestamps": all(t.started_at is not None for t in transcript.turns),
            }
        ),
        "max_request_tokens": job.args.max_request_tokens,
        "summarizer_outage": (
            {"from_turn": outage.start, "turns": outage.turns, "recovered_at_turn": outage.end}
            if outage
            else None
        ),
        "summarizer_options": {
            "max_request_tokens": (
                options.ceiling.max_request_tokens if options.ceiling is not None else None
            ),
            "soft_trigger_ratio": options.trigger.soft_ratio,
            "retry_backoff_s": options.retry.backoff_s,
            "max_retry_backoff_s": options.retry.max_backoff_s,
        },
        "prices_per_million": {
            "input": prices.input,
            "output": prices.output,
            "cached_input": prices.cached_input,
            "summary_input": prices.summary_input,
            "summary_output": prices.summary_output,
        },
        "token_counter": "EstimateTokenCounter",
    }


def title(job: ReplayJob, transcript: Any) -> str:
    """The one-line description of a run (the table's header, the plot's title)."""
    th = job.thresholds
    limits = []
    if th.max_context_tokens:
        limits.append(f"max_context_tokens={th.max_context_tokens:,}")
    if th.max_unsummarized_messages:
        limits.append(f"max_unsummarized_messages={th.max_unsummarized_messages}")
    limits.append(f"keep={th.keep}")
    if th.target_tokens:
        limits.append(f"target_context_tokens={th.target_tokens:,}")
    if job.args.max_request_tokens:
        limits.append(f"max_request_tokens={job.args.max_request_tokens:,}")
    if job.outage:
        limits.append(f"summarizer down turns {job.outage.start}-{job.outage.end - 1}")
    return f"{transcript.name}: {len(transcript.turns)} turns, " + ", ".join(limits)


def timing_line(job: ReplayJob, results: Sequence[StrategyResult]) -> str:
    """How time was modelled, with the call's simulated length and barge-ins."""
    model = job.model
    if model is None:
        return "timing: instant (every summary lands before the next turn; no interruptions)"
    first = next(iter(results), None)
    seconds = first.extra.get("call_seconds", 0.0) if first else 0.0
    barge = first.extra.get("barge_ins", 0) if first else 0
    rate = model.summary_tokens_per_second
    return (
        f"timing: simulated real time, a {seconds / 60:.0f}-minute call, {barge} barge-ins; "
        f"summarizer latency {model.summary_latency_s} s"
        + (f" + output at {rate:g} tokens/s" if rate else "")
    )


def turn_minutes(job: ReplayJob, transcript: Any) -> list[float] | None:
    """The minute each user turn starts, then the call's end (``None`` when instant): the
    replay's own schedule, planned from the call model."""
    from pipecat_summarizer_cli.replay.timing import plan_call, turn_starts

    if job.model is None or not transcript.turns:
        return None
    return [s / 60 for s in turn_starts(plan_call(transcript, job.model), job.model)]


def _plot(job: ReplayJob, results: list[StrategyResult], transcript: Any, path: str) -> Plot:
    def draw() -> None:
        from pipecat_summarizer_cli.replay.plot import plot_results

        plot_results(
            results,
            path,
            title=title(job, transcript),
            subtitle=timing_line(job, results).removeprefix("timing: "),
            threshold=job.thresholds.max_context_tokens,
            turns=len(transcript.turns),
            ceiling=job.args.max_request_tokens,
            outage=(job.outage.start, job.outage.end) if job.outage else None,
            probes=job.probes,
            prices=job.prices,
            minutes=turn_minutes(job, transcript),
        )
        print(f"plot written to {path}")

    return draw


def _print_details(job: ReplayJob, report: dict[str, Any]) -> None:
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
    ours = report["strategies"].get("pipecat_summarizer")
    if job.outage and ours and job.args.max_request_tokens:
        drained = ours.get("pending_drained_turn")
        print(
            f"  pipecat_summarizer pending queue: at most {ours['pending_max_messages']} "
            f"messages, {ours['pending_final_messages']} at the end"
            + (f", drained by the end of turn {drained}" if drained else "")
            + f" (summarizer back at turn {job.outage.end})"
        )


def _single(
    job: ReplayJob, backend: Any, transcript: Any, extra_meta: dict[str, Any] | None = None
) -> tuple[dict[str, Any], list[StrategyResult]]:
    results = replay_transcript(job, transcript, backend)
    meta = _meta(job, backend, transcript) | (extra_meta or {})
    report = build_report(
        results,
        turns=len(transcript.turns),
        prices=job.prices,
        probes=job.probes,
        meta=meta,
        ceiling=job.args.max_request_tokens,
    )
    if CLEARING_STRATEGY in job.strategies:
        add_clearing_figures(report, results, transcript, job.probes)
    return report, results


def _print_report(job: ReplayJob, transcript: Any, report: dict[str, Any], results) -> None:
    print(f"\n{title(job, transcript)}; summarizer: {report['summarizer'] or '-'}")
    print(f"thresholds: {job.thresholds_source}")
    print(timing_line(job, results) + "\n")
    print(format_table(report))
    _print_details(job, report)


def single(job: ReplayJob, backend: Any) -> tuple[dict[str, Any], list[Plot]]:
    """Replay the transcript file of ``job``."""
    transcript = _load(job)
    report, results = _single(job, backend, transcript)
    _print_report(job, transcript, report, results)
    plots = [_plot(job, results, transcript, job.args.plot)] if job.args.plot else []
    return report, plots


def _load(job: ReplayJob) -> Any:
    from pipecat_summarizer_cli.replay.transcript import TranscriptError, load_transcript

    try:
        return load_transcript(job.args.transcript)
    except TranscriptError as e:
        raise UsageError(str(e)) from None


def conditions(job: ReplayJob, backend: Any) -> tuple[dict[str, Any], list[Plot]]:
    """Replay the transcript of ``job`` as a calm call (as configured) and a busy one
    (:func:`~pipecat_summarizer_cli.replay.timing.busy`): both tables, then the two side by side
    and what they show; one report (``{"conditions": {"calm": report, "busy": report}}``)
    and one plot with a column per condition."""
    from pipecat_summarizer_cli.replay.timing import busy

    if job.model is None:
        raise UsageError("--compare-busy needs simulated time: not with --instant")
    transcript = _load(job)
    jobs = {"calm": job, "busy": replace(job, model=busy(job.model))}
    reports: dict[str, dict[str, Any]] = {}
    runs: dict[str, list[StrategyResult]] = {}
    for name, each in jobs.items():
        reports[name], runs[name] = _single(each, backend, transcript, {"condition": name})
        print(f"\n== the {name} call ==")
        _print_report(each, transcript, reports[name], runs[name])
    print("\nCalm against busy: the summarizing strategies\n")
    print(conditions_table(reports))
    words = takeaway(reports)
    if words:
        print("\n" + "\n".join(words))
    report: dict[str, Any] = {
        "transcript": transcript.name,
        "turns": len(transcript.turns),
        "conditions": reports,
        "takeaway": words,
    }
    plots = []
    if job.args.plot:
        plots.append(_conditions_plot(jobs, runs, transcript, words, job.args.plot))
    return report, plots


def _conditions_plot(
    jobs: dict[str, ReplayJob],
    runs: dict[str, list[StrategyResult]],
    transcript: Any,
    words: Sequence[str],
    path: str,
) -> Plot:
    def draw() -> None:
        from pipecat_summarizer_cli.replay.plot import Condition, plot_conditions

        job = jobs["calm"]
        compared = " vs ".join(
            label
            for name, label in (
                ("pipecat_builtin", "Pipecat's built-in summarization"),
                ("pipecat_summarizer", "pipecat-summarizer"),
            )
            if name in job.strategies
        )
        if "full_buffer" in job.strategies:
            compared += " (and the full buffer, no summarization)"
        heading = f"{compared}: the same call replayed calm and busy. {title(job, transcript)}"
        if words:
            heading += "\n" + words[0]
        plot_conditions(
            [
                Condition(
                    f"{name} call",
                    timing_line(each, runs[name]).removeprefix("timing: simulated real time, "),
                    runs[name],
                    turn_minutes(each, transcript),
                    (each.outage.start, each.outage.end) if each.outage else None,
                )
                for name, each in jobs.items()
            ],
            path,
            title=heading,
            threshold=job.thresholds.max_context_tokens,
            turns=len(transcript.turns),
            ceiling=job.args.max_request_tokens,
            probes=job.probes,
            prices=job.prices,
        )
        print(f"plot written to {path}")

    return draw


def synthetic(job: ReplayJob, backend: Any) -> tuple[dict[str, Any], list[Plot]]:
    """Replay the article's synthetic scenario."""
    from pipecat_summarizer_cli.replay import synthetic as synth

    n = job.args.synthetic
    transcript = synth.synthetic_transcript(n)
    if not job.probes:
        job = replace(job, probes=list(synth.PROBES))
    report, results = _single(job, backend, transcript)
    _print_report(job, transcript, report, results)
    article = synth.article_full_buffer_tokens(n)
    full = report["strategies"].get("full_buffer")
    info: dict[str, Any] = {
        "exchanges": n,
        "article_full_buffer_input_tokens": article,
        "expected_replay_full_buffer_input_tokens": synth.replay_full_buffer_tokens(n),
    }
    if full:
        diff = (full["input_tokens"] - article) / article
        info["full_buffer_vs_article"] = round(diff, 5)
        print(
            f"\nfull buffer: {full['input_tokens']:,} input tokens; the article's "
            f"sum(3,000 + 480 N, N = 1..{n}) = {article:,} ({100 * diff:+.2f}%)"
        )
    report["synthetic"] = info
    plots = [_plot(job, results, transcript, job.args.plot)] if job.args.plot else []
    return report, plots


def locomo(job: ReplayJob, backend: Any) -> tuple[dict[str, Any], list[Plot]]:
    """Replay LoCoMo conversations (one report, or a merged one with each inside)."""
    from pipecat_summarizer_cli.replay import locomo as lm

    args = job.args
    try:
        samples = lm.select_samples(
            lm.load_samples(args.locomo), ids=args.locomo_id, index=args.locomo_index
        )
    except (OSError, ValueError) as e:
        raise UsageError(str(e)) from None
    reports, plots, rows = [], [], []
    pooled_hot: dict[str, list[int]] = {}
    for sid, sample in samples:
        conv = lm.convert(sample, sid)
        t = conv.transcript
        results = replay_transcript(job, t, backend)
        for res in results:
            recall, items = lm.answer_recall(res.final_text, conv.qa)
            res.extra["answer_recall"] = round(recall, 4)
            res.extra["qa_items"] = items
            pooled_hot.setdefault(res.strategy, []).extend(res.hot_path_ns)
        meta = _meta(job, backend, t) | {
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
            prices=job.prices,
            probes=job.probes,
            meta=meta,
            ceiling=args.max_request_tokens,
        )
        reports.append(report)
        rows.append((conv.sample_id, len(t.turns), report))
        if len(samples) == 1:
            _print_report(job, t, report, results)
        if args.plot:
            path = args.plot
            if len(samples) > 1:
                p = Path(args.plot)
                path = str(p.with_name(f"{p.stem}_{conv.sample_id}{p.suffix or '.png'}"))
            plots.append(_plot(job, results, t, path))
    if len(samples) == 1:
        return reports[0], plots
    merged = merge_reports(reports, pooled_hot)
    merged["summarizer"] = backend.name if backend else None
    merged["conversations"] = reports
    print(f"\nLoCoMo, {len(samples)} conversations; summarizer: {merged['summarizer'] or '-'}\n")
    print(locomo_table(rows, merged, job.strategies))
    print("\nAll conversations together:\n")
    print(format_table(merged))
    return merged, plots


def locomo_table(rows, merged: dict[str, Any], strategies: Sequence[str]) -> str:
    """Answer recall and billed input per LoCoMo conversation, then all together."""
    head = ["conversation", "turns"] + [f"recall {s}" for s in strategies]
    if "full_buffer" in strategies:
        head += [f"billed {s}" for s in strategies if s != "full_buffer"]

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
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True))]
    lines.append("-" * (sum(widths) + 2 * (len(widths) - 1)))
    for r in body:
        lines.append("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
    return "\n".join(lines)

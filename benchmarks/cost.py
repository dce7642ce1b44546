"""Cost comparison on every conversation: billed tokens, cost without and with a prompt cache.

Replays each conversation (simulated real time, the replay's defaults) with the full buffer,
Pipecat's built-in summarization and ours, all with Pipecat's default thresholds (8,000
tokens / 20 messages / keep 4) and the same offline extractive summarizer, and adds a
fourth run, ours with ``cached_input_discount`` set from the prices (1 - cached / input:
0.9 at $3 / $0.30), the cache-aware cadence of :mod:`pipecat_summarizer._compaction.cadence`.

Conversations: the bundled calls (``pipecat_summarizer_cli/replay/data/*.jsonl``, with probes),
``--synthetic 200`` with Pipecat's defaults, a held-out synthetic call generated with another
seed, length and message sizes (never used to tune anything), and, with ``--locomo PATH``,
every LoCoMo conversation.

``--by-turn NAME`` shows where the tokens go on one conversation instead: every main-LLM
request of the built-in and of ours side by side (tokens, messages, their roles) with the
running difference, and every summarizer request's input and output tokens.

Usage::

    .venv/bin/python benchmarks/cost.py [--locomo /path/to/locomo10.zip] [--only NAME]
        [--json out/cost.json] [--by-turn NAME]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loguru import logger  # noqa: E402

from pipecat_summarizer_cli.replay import clock  # noqa: E402
from pipecat_summarizer_cli.replay.backends import extractive_backend  # noqa: E402
from pipecat_summarizer_cli.replay.report import Prices, TokenTable, strategy_metrics  # noqa: E402
from pipecat_summarizer_cli.replay.runner import replay_options, run_strategy  # noqa: E402
from pipecat_summarizer_cli.replay.strategies import Thresholds  # noqa: E402
from pipecat_summarizer_cli.replay.synthetic import PROBES, synthetic_transcript  # noqa: E402
from pipecat_summarizer_cli.replay.timing import CallModel  # noqa: E402
from pipecat_summarizer_cli.replay.transcript import load_probes, load_transcript  # noqa: E402

RUNS = ("full_buffer", "pipecat_builtin", "pipecat_summarizer", "ours_cache_aware")
HELD_OUT = {"exchanges": 130, "seed": 2027, "prefix_tokens": 1200, "user_tokens": 70,
            "assistant_tokens": 230}  # fmt: skip


def conversations(locomo: str | None) -> list[tuple[str, Any, list[str], Any]]:
    """``(name, transcript, probes, qa)`` for every conversation to compare."""
    out = []
    places = (ROOT / "pipecat_summarizer" / "replay" / "data", ROOT / "examples" / "conversations")
    paths = {p.stem: p for place in reversed(places) for p in place.glob("*.jsonl")}
    for path in sorted(paths.values(), key=lambda p: p.stem):
        probes_path = path.with_suffix(".probes.txt")
        probes = load_probes(probes_path) if probes_path.exists() else []
        out.append((path.stem, load_transcript(path), probes, None))
    out.append(("synthetic_200", synthetic_transcript(200), list(PROBES), None))
    out.append(("held_out_130", synthetic_transcript(**HELD_OUT), list(PROBES), None))
    if locomo:
        from pipecat_summarizer_cli.replay.locomo import convert, load_samples

        for sample_id, sample in load_samples(locomo):
            conv = convert(sample, sample_id)
            out.append((f"locomo_{conv.sample_id}", conv.transcript, [], conv.qa))
    return out


def cache_aware_options(discount: float) -> Any:
    """Ours' replay options with the prompt-cache discount (grouped params, or the flat
    options of earlier versions)."""
    try:
        from pipecat_summarizer.params import ContextSummarizerParams, TriggerParams
    except ImportError:
        return replay_options(cached_input_discount=discount)
    options = replay_options()
    if isinstance(options, ContextSummarizerParams):
        options.trigger = TriggerParams(cached_input_discount=discount)
        return options
    return replay_options(cached_input_discount=discount)


def measure(
    transcript: Any, probes: list[str], qa: Any, prices: Prices, seed: int = 0
) -> dict[str, dict]:
    """Every run of :data:`RUNS` on one transcript, as report entries (``seed``: the call
    model's, i.e. the turn cadence, summarizer latencies and barge-ins)."""
    discount = 1 - prices.cached_input / prices.input
    backend = extractive_backend()
    table = TokenTable()
    model = CallModel(seed=seed)

    async def go() -> dict[str, Any]:
        results = {}
        for run in RUNS:
            strategy = "pipecat_summarizer" if run == "ours_cache_aware" else run
            if run == "ours_cache_aware":
                try:
                    options = cache_aware_options(discount)
                except TypeError:  # a version without the option (a "before" run)
                    continue
            else:
                options = replay_options()
            results[run] = await run_strategy(
                transcript,
                strategy,
                thresholds=Thresholds(),
                backend=backend,
                options=options,
                table=table,
                model=model,
            )
        return results

    results = clock.run(go())
    out = {}
    for run, result in results.items():
        entry = strategy_metrics(result, prices=prices, probes=probes)
        if qa:
            from pipecat_summarizer_cli.replay.locomo import answer_recall

            entry["answer_recall"], _ = answer_recall(result.final_text, qa)
        out[run] = entry
    return out


def layout(request: Any) -> str:
    """A request's messages as letters: s system, S the summary, u user, a assistant, t tool,
    d developer."""
    letters = []
    for serialized in request.messages:
        message = json.loads(serialized)
        role = message.get("role") if isinstance(message, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        summary = isinstance(content, str) and content.startswith("Conversation summary")
        letters.append("S" if summary else {"system": "s", "user": "u", "assistant": "a",
                       "tool": "t", "developer": "d"}.get(str(role), "?"))  # fmt: skip
    return "".join(letters)


def by_turn(transcript: Any) -> list[str]:
    """The built-in and ours on one conversation, request by request (see the module
    docstring)."""
    table = TokenTable()

    async def go() -> dict[str, Any]:
        return {
            run: await run_strategy(
                transcript,
                run,
                thresholds=Thresholds(),
                backend=extractive_backend(),
                options=replay_options(),
                table=table,
                model=CallModel(),
            )
            for run in ("pipecat_builtin", "pipecat_summarizer")
        }

    results = clock.run(go())
    builtin, ours = results["pipecat_builtin"], results["pipecat_summarizer"]
    lines = [
        f"{'turn':>6}  {'built-in':>8} {'n':>3} {'':<28} {'ours':>8} {'n':>3} {'':<28} "
        f"{'diff':>6} {'running':>8}"
    ]
    running = 0
    for b, o in zip(builtin.requests, ours.requests, strict=False):
        running += o.total - b.total
        lines.append(
            f"{b.turn:>4}.{b.step}  {b.total:>8,} {len(b.messages):>3} {layout(b):<28} "
            f"{o.total:>8,} {len(o.messages):>3} {layout(o):<28} {o.total - b.total:>6,} "
            f"{running:>8,}"
        )
    for name, result in (("built-in", builtin), ("ours", ours)):
        calls = ", ".join(
            f"t{turn}: {i:,}/{out:,}"
            for turn, (i, out) in zip(result.requested_turns, result.summary_calls, strict=False)
        )
        main = sum(r.total for r in result.requests)
        summary = sum(i for i, _ in result.summary_calls)
        lines.append(f"{name}: main LLM {main:,}, summarizer in {summary:,} ({calls})")
    return lines


def row(name: str, runs: dict[str, dict]) -> list[str]:
    """One line per run: billed tokens, costs, facts."""
    full = runs["full_buffer"]["input_tokens"]
    lines = []
    for run, e in runs.items():
        billed = e["input_tokens"] + e["summary_input_tokens"]
        if "answer_recall" in e:
            facts = f"recall {e['answer_recall']:.1%}"
        else:
            facts = (
                f"{e['probes_retained']}/{e['probes_total']} ({e['probes_retained_every_turn']})"
            )
        lines.append(
            f"{name:<16} {run:<20} {billed:>11,} {billed / full:>7.1%} "
            f"{e['summaries_applied']:>4} ${e['cost_usd']:>8.4f} ${e['cost_usd_with_cache']:>8.4f}"
            f"  {facts}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--locomo", help="locomo10.zip (every conversation)")
    parser.add_argument("--only", action="append", help="only conversations with this name")
    parser.add_argument("--json", help="write the entries here")
    parser.add_argument(
        "--seed",
        type=int,
        action="append",
        metavar="N",
        help="the call model's seed (cadence, summarizer latency, barge-ins; default 0); "
        "repeat it to see which differences are systematic and which are the phase of one run",
    )
    parser.add_argument(
        "--by-turn", metavar="NAME", help="the built-in and ours request by request on NAME"
    )
    args = parser.parse_args(argv)
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    if args.by_turn:
        found = [c for c in conversations(args.locomo) if c[0] == args.by_turn]
        if not found:
            parser.error(f"--by-turn: no conversation named {args.by_turn!r}")
        print("\n".join(by_turn(found[0][1])))
        return 0
    prices = Prices()
    header = (
        f"{'conversation':<16} {'run':<20} {'billed in':>11} {'vs full':>7} {'sum':>4} "
        f"{'no cache':>9} {'cached':>9}  facts (every turn)"
    )
    print(
        "Pipecat's default thresholds, extractive summarizer, simulated real time; prices "
        f"${prices.input}/${prices.cached_input} cached per M input, summarizer "
        f"${prices.summary_input}/${prices.summary_output}"
    )
    print(header)
    print("-" * len(header))
    report = {}
    seeds = args.seed or [0]
    for name, transcript, probes, qa in conversations(args.locomo):
        if args.only and not any(o in name for o in args.only):
            continue
        for seed in seeds:
            label = name if seeds == [0] else f"{name}@{seed}"
            runs = measure(transcript, probes, qa, prices, seed=seed)
            report[label] = runs
            print("\n".join(row(label, runs)), flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

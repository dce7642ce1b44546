"""``pipecat-summarizer``: the command-line tool.

Each subcommand lives with its code and registers itself here with a ``register(subparsers)``
function that sets a ``run(args) -> int`` default; ``run`` reports its own usage errors (exit
status 2). This module only parses and dispatches.

* ``replay``: replays a recorded conversation through real Pipecat pipelines with three
  strategies and compares them (:mod:`pipecat_summarizer.replay.command`; needs the
  ``replay`` extra).
* ``questions``: LoCoMo answer recall at question time and across calls, with and without
  recall (:mod:`pipecat_summarizer.replay.questions`).
* ``inspect``: shows what a memory store holds: a caller's calls, a call's compactions and
  dropped messages, the pinned facts' history, a search of dropped messages
  (:mod:`pipecat_summarizer.store.command`).
"""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, with every subcommand registered."""
    from pipecat_summarizer.replay import command as replay_command
    from pipecat_summarizer.replay import questions as questions_command
    from pipecat_summarizer.store import command as inspect_command

    parser = argparse.ArgumentParser(
        prog="pipecat-summarizer",
        description="Background context summarization for Pipecat: tools.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    replay_command.register(sub)
    questions_command.register(sub)
    inspect_command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``pipecat-summarizer`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    run = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 2
    try:
        return run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""``pipecat-summarizer``: the command-line tool.

Each subcommand lives with its code and registers itself with a ``register(subparsers)``
function that sets a ``run(args) -> int`` default; ``run`` reports its own usage errors (exit
status 2). This module only parses and dispatches.

* ``replay``: replays a recorded conversation through real Pipecat pipelines with three
  strategies and compares them (:mod:`pipecat_summarizer_cli.replay.command`; needs the
  ``replay`` extra).
* ``questions``: LoCoMo answer recall at question time and across calls, with and without
  recall (:mod:`pipecat_summarizer_cli.replay.questions`).
* ``inspect``: shows what a memory store holds: a caller's calls, a call's compactions and
  dropped messages, the pinned facts' history, a search of dropped messages
  (:mod:`pipecat_summarizer_cli.inspect`).

The tool answers at once: importing Pipecat takes about a second and logs its banner, so only
the module of the command being run is imported (the others appear in ``--help`` by their
one-line summary below), and the ``replay`` and ``inspect`` parsers import no Pipecat: their
``--help`` stays instant. A command imports Pipecat when it runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    """A subcommand: its name, the module whose ``register`` adds it, its one-line help."""

    name: str
    module: str
    help: str


COMMANDS: tuple[Command, ...] = (
    Command(
        "replay",
        "pipecat_summarizer_cli.replay.command",
        "replay a conversation through three context strategies and compare them",
    ),
    Command(
        "questions",
        "pipecat_summarizer_cli.replay.questions",
        "LoCoMo answer recall at question time (and across calls), with and without recall",
    ),
    Command(
        "inspect",
        "pipecat_summarizer_cli.inspect",
        "show what a memory store holds: calls, compactions, dropped messages, facts",
    ),
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; ``command``'s module is imported and registers its arguments.

    Args:
        command: The subcommand about to run, or ``None`` for the top-level parser alone
            (every subcommand is then listed by name and help, without importing its module).
    """
    parser = argparse.ArgumentParser(
        prog="pipecat-summarizer",
        description="Background context summarization for Pipecat: tools.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for cmd in COMMANDS:
        if cmd.name == command:
            importlib.import_module(cmd.module).register(sub)
        else:  # a placeholder: listed in --help, never parsed (main builds the real one)
            sub.add_parser(cmd.name, help=cmd.help, add_help=False)
    return parser


def command_in(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line, if any.

    The top-level parser takes no option but ``-h``, so the first argument that is not an
    option is the subcommand (an unknown one is left for argparse to refuse).
    """
    names = {cmd.name for cmd in COMMANDS}
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in names else None
    return None


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``pipecat-summarizer`` console script."""
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(command_in(argv))
    args = parser.parse_args(argv)
    run = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 2
    try:
        return int(run(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

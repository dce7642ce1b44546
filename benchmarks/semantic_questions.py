"""LoCoMo at question time with semantic recall: a thin wrapper kept for older commands.

``pipecat-summarizer questions --semantic`` does the same (and takes ``--min-similarity`` and
``--candidates``); this script passes its arguments on with ``--semantic`` added, unless
``--lexical`` asks for the lexical baseline::

    .venv/bin/python benchmarks/semantic_questions.py --locomo /path/to/locomo10.zip
"""

from __future__ import annotations

import sys

from pipecat_summarizer_cli.main import main as cli_main


def main(argv: list[str] | None = None) -> int:
    """Run ``pipecat-summarizer questions --semantic`` with these arguments."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--lexical" in args:
        args.remove("--lexical")
    elif "--semantic" not in args:
        args.append("--semantic")
    return cli_main(["questions", *args])


if __name__ == "__main__":
    sys.exit(main())

"""The conversations shipped inside the package, so ``replay NAME`` works from an installed wheel.

The bundled calls live in ``pipecat_summarizer_cli/replay/data/`` (``NAME.jsonl`` with an optional
``NAME.probes.txt``) and are read through :mod:`importlib.resources`, so they are found wherever
the package is installed. The checkout has no second copy: ``make demo`` replays them by name.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

_SUFFIX = ".jsonl"
_PROBES_SUFFIX = ".probes.txt"


@dataclass(frozen=True)
class BundledConversation:
    """One shipped conversation.

    Attributes:
        name: What to pass to ``replay`` (the file name without ``.jsonl``).
        transcript: The JSONL file.
        probes: Its probes file, if it has one.
    """

    name: str
    transcript: Path
    probes: Path | None


def _data_dir() -> Path:
    # A wheel or an editable install puts the package on the file system; a zipped import
    # (not something pip produces) would need resources.as_file, which nothing here needs.
    return Path(str(resources.files("pipecat_summarizer_cli.replay") / "data"))


def bundled_conversations() -> dict[str, BundledConversation]:
    """Every shipped conversation by name, sorted."""
    data = _data_dir()
    if not data.is_dir():
        return {}
    out = {}
    for path in sorted(data.glob(f"*{_SUFFIX}")):
        name = path.name.removesuffix(_SUFFIX)
        probes = data / f"{name}{_PROBES_SUFFIX}"
        out[name] = BundledConversation(name, path, probes if probes.is_file() else None)
    return out


def find_bundled(arg: str) -> BundledConversation | None:
    """The shipped conversation ``arg`` names, or ``None`` if it names an existing file or none.

    A path that exists always wins, so a local file called like a bundled one is replayed as is.
    ``nutrition_call`` and ``nutrition_call.jsonl`` both name the bundled call.
    """
    if Path(arg).exists():
        return None
    return bundled_conversations().get(arg.removesuffix(_SUFFIX))


def looks_like_name(arg: str) -> bool:
    """Whether ``arg`` reads as a bare name rather than a path (no separator, no suffix)."""
    return "/" not in arg and "\\" not in arg and not Path(arg).suffix


def resolve_transcript_argument(args: argparse.Namespace) -> argparse.Namespace:
    """The replay's arguments with a bundled name resolved to its file (a copy; ``args`` is kept).

    When the transcript names a bundled conversation, it becomes that file's path, and its probes
    file is used unless the command line gives probes of its own (``--probe``/``--probes-file``).

    Raises:
        ValueError: If the argument is a bare name that is neither a file nor a bundled
            conversation (the message lists the bundled names).
    """
    arg = getattr(args, "transcript", None)
    if arg is None:
        return args
    found = find_bundled(arg)
    if found is None:
        if not Path(arg).exists() and looks_like_name(arg):
            names = ", ".join(bundled_conversations()) or "none installed"
            raise ValueError(
                f"no file {arg!r} and no bundled conversation of that name (bundled: {names})"
            )
        return args
    resolved = argparse.Namespace(**vars(args))
    resolved.transcript = str(found.transcript)
    if found.probes is not None and not args.probe and not args.probes_file:
        resolved.probes_file = str(found.probes)
    return resolved

"""The command line answers at once: ``--help`` imports no Pipecat and prints no banner.

Speed itself is measured, not asserted (``/usr/bin/time -f %e pipecat-summarizer --help``);
what is checked here is what makes it fast: Pipecat is not imported until a command runs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipecat_summarizer_cli.main import COMMANDS, build_parser, command_in, main

SCRIPT = Path(sys.executable).parent / "pipecat-summarizer"
BANNER = "ᓚᘏᗢ"  # Pipecat logs "ᓚᘏᗢ Pipecat 1.x ... ᓚᘏᗢ" when it is imported


def _pipecat_modules_after(code: str) -> list[str]:
    probe = code + "\nprint(sorted(m for m in sys.modules if m.split('.')[0] == 'pipecat'))\n"
    out = subprocess.run(
        [sys.executable, "-c", "import sys\n" + probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return eval(out.stdout.strip().splitlines()[-1])


def _help(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args, "--help"], capture_output=True, text=True, check=True, timeout=60
    )


@pytest.mark.parametrize(
    "command",
    [
        None,
        "inspect",
        "replay",
    ],
)
def test_building_the_parser_does_not_import_pipecat(command):
    code = f"from pipecat_summarizer_cli.main import build_parser\nbuild_parser({command!r})"
    assert _pipecat_modules_after(code) == []


def test_the_top_level_help_lists_every_command_without_the_banner():
    out = _help()
    assert out.stdout.startswith("usage: pipecat-summarizer")
    for cmd in COMMANDS:
        assert cmd.name in out.stdout
    assert BANNER not in out.stdout + out.stderr


@pytest.mark.parametrize(
    "command",
    [
        "inspect",
        "replay",
    ],
)
def test_a_command_help_shows_its_own_arguments_without_the_banner(command):
    out = _help(command)
    assert out.stdout.startswith(f"usage: pipecat-summarizer {command}")
    assert "--" in out.stdout  # its own options, registered by its module
    assert BANNER not in out.stdout + out.stderr


def test_the_command_is_found_wherever_it_stands_and_typos_are_refused(capsys):
    assert command_in(["inspect", "memory.db"]) == "inspect"
    assert command_in(["-h"]) is None
    assert command_in(["replay", "--instant", "support_call"]) == "replay"
    assert command_in(["inspct", "memory.db"]) is None
    with pytest.raises(SystemExit) as exit_info:
        main(["inspct", "memory.db"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'inspct'" in capsys.readouterr().err


def test_the_parser_of_a_command_is_the_commands_own():
    args = build_parser("inspect").parse_args(["inspect", "memory.db", "--json"])
    assert args.command == "inspect" and callable(args.run)
    assert build_parser().parse_args([]).command is None

"""S17 attack round (helper A): a read-only opening read as immutable (its folder read-only,
S16-A-8) while another process writes the file after all.

A live store's folder mounted read-only for a support tool (``inspect``, a dashboard with
``read_only=True``) while the application writes it through a writable mount: the opening
found no -wal (the application closed cleanly), so SQLite took the file as immutable: no
lock, no look at the file's change counter, its pages cached. The application then writes,
forgets a caller and checkpoints. Before S17-A-3 the read-only store went on answering from
its cache: the forgotten caller's rows after their forget had returned (and after the file
no longer held them), none of the new rows. Now the store notices the change (the file's
stamp, a -wal beside it) and reads the file as it is now.

Runs as root in a mount namespace of its own (``unshare -m``), as
tests/attacks_s16/test_attack_read_only_files.py; skipped where that is not allowed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import asyncio, dataclasses, os, random, subprocess, sys
from loguru import logger
from pipecat_summarizer.store import SQLiteMemoryStore
from tests.store.test_s15_checkpoints import _batch

logger.remove()


def of(user, messages):
    return [dataclasses.replace(m, user_id=user) for m in messages]


async def step(name, work):
    try:
        print(what, name, "ok", await work, flush=True)
    except Exception as e:
        print(what, name, "raised", type(e).__name__, flush=True)


async def main(folder, view):
    path = os.path.join(folder, "memory.db")
    rng = random.Random(1)
    store = SQLiteMemoryStore(path)
    await store.write(_batch("c1", 0, rng, word="lighthouse"))
    await store.write(of("caller-2", _batch("c2", 0, rng, n=30, word="lighthouse")))
    await store.close()  # closed cleanly: no -wal
    os.makedirs(view)
    subprocess.run(["mount", "--bind", folder, view], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", view], check=True)
    reader = SQLiteMemoryStore(os.path.join(view, "memory.db"), read_only=True)

    async def hits(user):
        return len(await reader.search("lighthouse", user_id=user, limit=100))

    async def messages(call):
        return len(await reader.messages(call))

    await step("before caller-1", hits("caller-1"))
    await step("before c2", messages("c2"))
    writer = SQLiteMemoryStore(path)
    if what == "small":  # a few writes, in the -wal only (no checkpoint, no forget)
        await writer.write(of("caller-3", _batch("c3-2", 0, rng, n=30)))
    else:
        for i in range(3):
            await writer.write(of("caller-3", _batch(f"c3-{i}", 0, rng, n=30)))
        await writer.forget("caller-1")
    if what == "closed":
        await writer.close()
    await step("after caller-1", hits("caller-1"))
    await step("after c2", messages("c2"))
    await step("after c3", messages("c3-2"))
    await reader.close()
    await writer.close()


for what, folder, view in zip(sys.argv[1::3], sys.argv[2::3], sys.argv[3::3]):
    asyncio.run(main(folder, view))
"""


CASES = ("closed", "open", "small")


def _lines(root: Path) -> dict[str, list[str]]:
    """Every case's lines, from one process running them in turn (each with a folder and a
    read-only view of its own)."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        pytest.skip("no unshare/mount here")
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("mount namespaces not allowed here")
    args = []
    for what in CASES:
        (root / what).mkdir()
        args += [what, str(root / what), str(root / f"{what}-ro")]
    done = subprocess.run(
        ["unshare", "-m", sys.executable, "-c", SCRIPT, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if "mount:" in done.stderr and "permission denied" in done.stderr.lower():
        pytest.skip("bind mounts not allowed here")
    out: dict[str, list[str]] = {what: [] for what in CASES}
    for line in done.stdout.splitlines():
        what, _, rest = line.strip().partition(" ")
        out.setdefault(what, []).append(rest)
    if done.returncode:
        out["rc"] = [done.stderr[-2000:]]
    return out


BEFORE = ["before caller-1 ok 12", "before c2 ok 30"]


def test_attack_a_file_opened_immutable_then_written(tmp_path):
    """``closed`` / ``open``: the application writes 90 messages, forgets caller-1 (its
    truncation checkpoints the file: the immutable reader holds no lock to refuse it), and
    closes or stays open: the read-only store never serves caller-1's rows again, and sees
    the new ones. ``small``: a few writes after the opening, in a -wal only (the file itself
    unchanged): the read-only store reads them too. One test (one process for the three
    cases): a module fixture would run once per worker."""
    lines = _lines(tmp_path)
    assert "rc" not in lines, lines["rc"]
    after = ["after caller-1 ok 0", "after c2 ok 30", "after c3 ok 30"]
    assert lines["closed"] == [*BEFORE, *after]
    assert lines["open"] == [*BEFORE, *after]
    assert lines["small"] == [*BEFORE, "after caller-1 ok 12", "after c2 ok 30", "after c3 ok 30"]

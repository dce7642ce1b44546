"""S17 attack round B: the immutable read-only opening's reopen (``store/_sqlite_schema.py``
``FileStamp``, S17-A-3) when the file under it is not written but replaced.

A read-only store of a folder mounted read-only (opened as immutable: SQLite takes no lock
and never looks at the file again) notices a change of the file and opens it again. Here
the file is replaced by another memory store (a restore: renamed over it, or copied into the
same file), truncated to 0 bytes, deleted, or replaced by a SQLite file that is no memory
store. Each read after it answers the file as it is now or raises a clear ``StoreError``
(never another exception, never the old file's rows), and the store reads again once a
memory store is back. All held.

Runs as root in a mount namespace of its own (``unshare -m``), as
tests/attacks_s17/test_attack_immutable_opening.py; skipped where that is not allowed.
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
import asyncio, os, random, shutil, sqlite3, subprocess, sys
from loguru import logger
from pipecat_summarizer.store import SQLiteMemoryStore
from tests.store.test_s15_checkpoints import _batch

logger.remove()


async def made(path, n):
    store = SQLiteMemoryStore(path)
    await store.write(_batch("c1", 0, random.Random(n), n=n))
    await store.close()  # closed cleanly: no -wal


async def main(folder, view):
    path = os.path.join(folder, "memory.db")
    await made(path, 12)
    await made(os.path.join(folder, "backup-a.db"), 5)
    await made(os.path.join(folder, "backup-b.db"), 7)
    os.makedirs(view)
    subprocess.run(["mount", "--bind", folder, view], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", view], check=True)
    reader = SQLiteMemoryStore(os.path.join(view, "memory.db"), read_only=True)

    async def read(name):
        try:
            print(what, name, "ok", len(await reader.messages("c1")), flush=True)
        except Exception as e:
            print(what, name, "raised", type(e).__name__, flush=True)

    def restore(backup):
        # a restore: another store's bytes at the path, its files beside it gone
        for end in ("-wal", "-shm"):
            if os.path.exists(path + end):
                os.remove(path + end)
        if what == "copied":
            shutil.copyfile(os.path.join(folder, backup), path)  # into the same file
        else:
            shutil.copyfile(os.path.join(folder, backup), path + ".new")
            os.replace(path + ".new", path)  # renamed over it

    await read("opened")
    if what in ("renamed", "copied"):
        restore("backup-a.db")
        await read("restored")
        restore("backup-b.db")
        await read("again")
    else:
        if what == "deleted":
            os.remove(path)
        elif what == "zero":
            os.truncate(path, 0)
        elif what == "other":
            os.remove(path)
            other = sqlite3.connect(path)
            other.execute("CREATE TABLE notes (x TEXT)")
            other.execute("INSERT INTO notes VALUES ('hello')")
            other.commit()
            other.close()
        await read("changed")
        await read("changed twice")
        restore("backup-a.db")
        await read("restored")
    await reader.close()


for what, folder, view in zip(sys.argv[1::3], sys.argv[2::3], sys.argv[3::3]):
    asyncio.run(main(folder, view))
"""

CASES = ("renamed", "copied", "deleted", "zero", "other")


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


def test_attack_the_immutable_file_replaced_truncated_or_deleted(tmp_path):
    """One test (one process for the five cases): a module fixture would run once per
    worker."""
    lines = _lines(tmp_path)
    assert "rc" not in lines, lines["rc"]
    for what in ("renamed", "copied"):
        assert lines[what] == ["opened ok 12", "restored ok 5", "again ok 7"], what
    for what in ("deleted", "zero", "other"):
        assert lines[what] == [
            "opened ok 12",
            "changed raised StoreError",
            "changed twice raised StoreError",
            "restored ok 5",
        ], what

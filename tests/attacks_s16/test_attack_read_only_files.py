"""The SQLite store's file on a read-only directory or a read-only file (S16, helper A).

The tests run as root here, where file modes are not enforced: each case runs in a process of
its own in a mount namespace of its own (``unshare -m``) where the store's directory, or its
file alone, is bind-mounted read-only after the store was written. Skipped where that is not
allowed.
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
import asyncio, os, random, subprocess, sys, threading
from loguru import logger
from pipecat_summarizer.store import SQLiteMemoryStore
from tests.store.test_s15_checkpoints import _batch

logger.remove()
warnings = []
logger.add(lambda m: warnings.append(m.record["message"]), level="WARNING")
folder, what = sys.argv[1], sys.argv[2]
path = os.path.join(folder, "memory.db")


def checkpointers():
    return sum(t.name.startswith("sqlite-checkpoint") for t in threading.enumerate())


async def step(name, work):
    try:
        result = await work
        print(name, "ok", result if isinstance(result, int) else "", flush=True)
    except Exception as e:
        print(name, "raised", type(e).__name__, flush=True)


async def main():
    rng = random.Random(1)
    store = SQLiteMemoryStore(path)
    await store.write(_batch("c", 0, rng, word="lighthouse"))
    if what == "unclean":  # a -wal copied beside the file without its -shm
        await store.close()
        with open(path + "-wal", "wb") as wal:
            wal.write(b"\0" * 4096)
        subprocess.run(["mount", "--bind", folder, folder], check=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", folder], check=True)
        try:
            await SQLiteMemoryStore(path, read_only=True).open()
            print("unclean opened", flush=True)
        except Exception as e:
            print("unclean", type(e).__name__, "closed cleanly" in str(e), flush=True)
        return
    await store.close()
    target = folder if what == "folder" else path
    subprocess.run(["mount", "--bind", target, target], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", target], check=True)
    store = SQLiteMemoryStore(path)
    await step("write", store.write(_batch("c", 900, rng)))

    async def hits(s):
        return len(await s.search("lighthouse", user_id="caller-1"))

    await step("search", hits(store))
    await store.close()
    print("checkpointers after close", checkpointers(), flush=True)
    reader = SQLiteMemoryStore(path, read_only=True)
    await step("read_only search", hits(reader))
    await reader.close()
    print("checkpoint warnings", sum("checkpoint" in w for w in warnings), flush=True)


asyncio.run(main())
"""


def _run(tmp_path: Path, what: str) -> list[str]:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        pytest.skip("no unshare/mount here")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("mount namespaces not allowed here")
    done = subprocess.run(
        ["unshare", "-m", sys.executable, "-c", SCRIPT, str(tmp_path), what],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if "mount:" in done.stderr and "permission denied" in done.stderr.lower():
        pytest.skip("bind mounts not allowed here")
    return [line.strip() for line in done.stdout.splitlines()] or [done.stderr[-2000:]]


def test_attack_a_read_only_file(tmp_path):
    """The store's file read-only (its folder writable): a write fails (raised to the
    writer, which retries and logs), searches answer, the checkpointer never complains and
    ends with the close, a read-only opening reads."""
    assert _run(tmp_path, "file") == [
        "write raised OperationalError",
        "search ok 10",
        "checkpointers after close 0",
        "read_only search ok 10",
        "checkpoint warnings 0",
    ]


def test_attack_a_read_only_folder(tmp_path):
    """The store's folder read-only (a backup mounted read-only): the store cannot open
    (SQLite cannot make the WAL's files), and leaves no checkpointer behind."""
    lines = _run(tmp_path, "folder")
    assert lines[:3] == [
        "write raised OperationalError",
        "search raised OperationalError",
        "checkpointers after close 0",
    ], lines
    assert lines[-1] == "checkpoint warnings 0"


def test_attack_a_read_only_opening_reads_a_store_in_a_read_only_folder(tmp_path):
    """``read_only=True`` (``inspect``) on a store whose folder is read-only (a backup on
    read-only media): it reads it (S16-A-8: it said "not a memory store (unable to open
    database file)": a WAL-mode file needs its -shm, which cannot be made there)."""
    assert "read_only search ok 10" in _run(tmp_path, "folder")


def test_attack_a_read_only_folder_with_a_wal_left_says_so(tmp_path):
    """The read-only folder holds a -wal without its -shm (copied from a store not closed):
    the read-only opening cannot read it as immutable (the WAL's writes would be missed),
    and says why."""
    assert _run(tmp_path, "unclean") == ["unclean StoreError True"]

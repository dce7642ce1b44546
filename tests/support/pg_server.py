"""A throwaway PostgreSQL server for the tests, from the Debian binaries.

``initdb`` and ``pg_ctl`` (``/usr/lib/postgresql/*/bin`` or on ``PATH``) build a cluster in a
temporary folder, owned by an unprivileged user when the tests run as root (PostgreSQL
refuses to run as root), listening on 127.0.0.1 on a free port; :meth:`PgServer.stop`
removes it. Each test gets a fresh database from :meth:`PgServer.create_database`.

The cluster lives in memory (``/dev/shm``) when there is room: each database is a ~8 MB copy
of the template, a worker makes dozens, and on disk under load a ``createdb`` took ~0.12 s
(0.04 s in memory) and the cluster's removal at the end of a worker's session 5-15 s.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

#: CI sets this so a missing PostgreSQL fails the tests instead of skipping them.
REQUIRE_ENV = "PIPECAT_SUMMARIZER_REQUIRE_POSTGRES"


def find_bin() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, newest version first, or ``None``."""
    for initdb in sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True):
        folder = Path(initdb).parent
        if (folder / "pg_ctl").exists():
            return folder
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).parent
    return None


#: Where clusters go when it has this much free space (else the system's temporary folder).
MEMORY_DIR = "/dev/shm"
MEMORY_MIN_FREE = 4 * 1024**3


def _cluster_parent() -> str | None:
    """``MEMORY_DIR`` when it exists with room to spare, else ``None`` (the default)."""
    try:
        st = os.statvfs(MEMORY_DIR)
    except OSError:
        return None
    return MEMORY_DIR if st.f_bavail * st.f_frsize >= MEMORY_MIN_FREE else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    """One running PostgreSQL cluster.

    Raises:
        RuntimeError: If the binaries are missing or the server does not start.
    """

    def __init__(self):
        """Create the cluster and start it."""
        bindir = find_bin()
        if bindir is None:
            raise RuntimeError("PostgreSQL binaries (initdb, pg_ctl) not found")
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="pgtest-", dir=_cluster_parent()))
        self.data = self.root / "data"
        self.port = _free_port()
        self._user: str | None = None
        if os.geteuid() == 0:  # PostgreSQL will not run as root
            self._user = "postgres"
            try:
                entry = pwd.getpwnam(self._user)
            except KeyError:
                subprocess.run(
                    ["useradd", "--system", "--no-create-home", self._user],
                    check=True,
                    capture_output=True,
                )
                entry = pwd.getpwnam(self._user)
            os.chmod(self.root, 0o755)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        )
        self.start()

    @property
    def dsn(self) -> str:
        """DSN of the ``postgres`` database."""
        return self.dsn_for("postgres")

    def dsn_for(self, database: str) -> str:
        """DSN of ``database`` on this server."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, tool: str, *args: str) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [str(self.bindir / tool), *args],
            user=self._user,
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{tool} failed: {result.stderr.strip()[-500:]}")
        return result

    def start(self) -> None:
        """Start (or restart) the server and wait until it accepts connections."""
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "log"),
            "-w",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (it can be started again)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def create_database(self, name: str, template: str | None = None) -> str:
        """Create ``name`` and return its DSN; with ``template``, a copy of that database
        (a file copy: a test's big archive built once, copied per test; nobody may be
        connected to ``template`` meanwhile)."""
        copy = ("-T", template) if template else ()
        self._run(
            "createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", *copy, name
        )
        return self.dsn_for(name)

    def destroy(self) -> None:
        """Stop the server and remove its folder."""
        try:
            self.stop("immediate")
        except Exception:
            pass
        shutil.rmtree(self.root, ignore_errors=True)

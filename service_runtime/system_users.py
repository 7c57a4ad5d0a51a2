"""Unprivileged OS users that a root process runs its children as, created on first use."""

from __future__ import annotations

import pwd
import subprocess


def system_user(name: str) -> pwd.struct_passwd:
    """The system user `name` (no home, no login shell), created if it does not exist; only
    root can create it."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            check=True,
            capture_output=True,
        )
    return pwd.getpwnam(name)

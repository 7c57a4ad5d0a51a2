"""Handing a started unit its identity: the contract between a launcher's pool and the unit.

A pooled unit is started with no identity: no id of a user's unit, no credential, no
certificate, no owner. It starts Spark, warms it up and then waits on a named pipe (the
file ``TEXERA_LAKE_CU_HAND_OVER_PIPE`` names, in the unit's own folder of mode 0700). Handing it over
writes one JSON object to the pipe: the ``TEXERA_LAKE_*`` variables that make it a user's
unit (its id, port and address, and the ``_FILE`` variables naming its secrets' files,
written beforehand the way a launch writes them). The unit reads it, removes the pipe, and
from then on starts as any launched unit does: it reads its settings, removes its secrets'
files, and registers. No user's code ever ran in it before, and it never returns to the
pool: a unit that stops ends its process.

The unit shows it is ready (warm, waiting) by a file beside the pipe (``READY_SUFFIX``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path

from service_runtime.config import ENV_PREFIX
from unit_launcher.unit_settings import ComputingUnitSettings

#: The setting that names a pooled unit's pipe; absent for a unit launched as itself.
HAND_OVER_SETTING = ComputingUnitSettings.variable_of("hand_over_pipe")
#: Appended to the pipe's path: the file a pooled unit makes once it is warm and waits.
READY_SUFFIX = ".ready"
#: How often a hand-over looks again for the unit to open its pipe.
_POLL_SECONDS = 0.02


class HandOverFailed(Exception):
    """The pooled unit did not take its identity (it ended, or never opened its pipe)."""


def make_pipe(path: Path) -> None:
    """The pipe a pooled unit waits on (mode 0600; the launcher makes it the unit's)."""
    os.mkfifo(path, 0o600)


def secret_file(folder: Path, name: str) -> Path:
    """Where the secret of setting name is written in folder."""
    return folder / name.lower()


def write_secret_files(folder: Path, secrets: Mapping[str, str]) -> dict[str, Path]:
    """Each secret in a new file of mode 0600 in folder (see secret_file); the files by
    setting name. A file left from before is replaced."""
    paths: dict[str, Path] = {}
    for name, value in secrets.items():
        path = secret_file(folder, name)
        path.unlink(missing_ok=True)
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
            file.write(value)
        paths[name] = path
    return paths


def file_variables(paths: Mapping[str, Path]) -> dict[str, str]:
    """The ``_FILE`` settings that name the secrets' files to the unit."""
    return {f"{name}_FILE": str(path) for name, path in paths.items()}


def is_ready(pipe: Path) -> bool:
    """The pooled unit is warm and waits on pipe."""
    return pipe.with_name(pipe.name + READY_SUFFIX).exists()


def deliver(pipe: Path, variables: Mapping[str, str], timeout_seconds: float) -> None:
    """Writes the unit's variables to its pipe, waiting up to timeout_seconds for the unit to
    open it (a unit still warming up opens it when done)."""
    foreign = [name for name in variables if not name.startswith(ENV_PREFIX)]
    if foreign:
        raise ValueError(f"a hand-over sets {ENV_PREFIX}* variables only, not {foreign}")
    message = json.dumps(dict(variables)).encode()
    descriptor = _open_for_writing(pipe, time.monotonic() + timeout_seconds)
    try:
        os.set_blocking(descriptor, True)
        view = memoryview(message)
        while view:
            view = view[os.write(descriptor, view) :]
    except OSError as exc:  # the unit closed its end: it ended meanwhile
        raise HandOverFailed(f"the pooled unit stopped reading its hand-over ({exc})") from exc
    finally:
        os.close(descriptor)


def _open_for_writing(pipe: Path, deadline: float) -> int:
    while True:
        try:
            return os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            # ENXIO: nobody reads the pipe yet; ENOENT: the unit's folder is gone.
            if exc.errno != errno.ENXIO or time.monotonic() >= deadline:
                raise HandOverFailed(
                    f"the pooled unit did not take its hand-over ({exc.strerror})"
                ) from exc
        time.sleep(_POLL_SECONDS)


def await_identity(pipe: Path) -> dict[str, str]:
    """Shows the unit ready, then blocks until its hand-over arrives; the variables it sets.
    The pipe and the ready file are removed."""
    ready = pipe.with_name(pipe.name + READY_SUFFIX)
    ready.touch(mode=0o600)
    try:
        while True:
            with open(pipe, "rb") as reading:  # blocks until the launcher opens it
                message = reading.read()
            if message:
                break
    finally:
        ready.unlink(missing_ok=True)
        with contextlib.suppress(FileNotFoundError):
            pipe.unlink()
    variables = json.loads(message)
    if not isinstance(variables, dict) or not all(
        isinstance(name, str) and name.startswith(ENV_PREFIX) and isinstance(value, str)
        for name, value in variables.items()
    ):
        raise ValueError(f"a hand-over must be an object of {ENV_PREFIX}* strings")
    return variables

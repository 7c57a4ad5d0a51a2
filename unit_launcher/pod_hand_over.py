"""The in-Pod end of a pooled unit's hand-over on Kubernetes: ``texera-lake-cu-hand-over``.

The registry runs it in a pooled unit's container through the API server's exec (its
connection to the kubelet is the API server's, authenticated and encrypted; nothing listens
in the Pod for it). It finds the unit's pipe from the container's own setting
(``TEXERA_LAKE_CU_HAND_OVER_PIPE``, see unit_launcher.hand_over).

- ``ready`` exits 0 when the pooled unit is warm and waits for its identity, 1 when not yet.
- ``take [--wait SECONDS]`` reads one line of JSON from standard input,
  ``{"variables": {...}, "secrets": {...}}``, writes each secret to a file of mode 0600 beside
  the pipe (an in-memory folder of the Pod), and hands the unit its variables and the files'
  names. Secrets come on standard input, never on a command line. If the unit does not take
  them, the files are removed again and it exits 1.

Messages name what failed, never a value that was sent.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from unit_launcher.hand_over import (
    HAND_OVER_SETTING,
    HandOverFailed,
    deliver,
    file_variables,
    is_ready,
    write_secret_files,
)

#: A hand-over's message is a few settings and a certificate: far below this.
MAX_MESSAGE_BYTES = 1 << 20
_SECRET_NAME = re.compile(r"^TEXERA_LAKE_[A-Z0-9_]+$")
NOT_READY = 1
FAILED = 1
MISUSED = 2


class BadMessage(ValueError):
    """The hand-over's message is not what ``take`` reads."""


def parse_message(line: bytes) -> tuple[dict[str, str], dict[str, str]]:
    """The variables and secrets of a hand-over's message; BadMessage says what is wrong."""
    try:
        message = json.loads(line)
    except ValueError:
        raise BadMessage("the message is not JSON") from None
    if not isinstance(message, dict) or set(message) != {"variables", "secrets"}:
        raise BadMessage('the message must be an object of "variables" and "secrets"')
    parts = []
    for part in ("variables", "secrets"):
        values = message[part]
        if not isinstance(values, dict) or not all(
            isinstance(name, str) and _SECRET_NAME.match(name) and isinstance(value, str)
            for name, value in values.items()
        ):
            raise BadMessage(f"{part} must map TEXERA_LAKE_* names to strings")
        parts.append(values)
    return parts[0], parts[1]


def take(pipe: Path, line: bytes, wait_seconds: float) -> None:
    """Writes the message's secrets beside the pipe and delivers its variables with the
    files' names; nothing stays written when the unit does not take them."""
    variables, secrets = parse_message(line)
    paths = write_secret_files(pipe.parent, secrets)
    try:
        deliver(pipe, {**variables, **file_variables(paths)}, wait_seconds)
    except BaseException:
        for path in paths.values():
            path.unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="texera-lake-cu-hand-over", description="Hands a pooled unit its identity."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("ready", help="exit 0 when the pooled unit waits for its identity")
    taking = commands.add_parser("take", help="hand over what standard input carries")
    taking.add_argument("--wait", type=float, default=60.0, help="seconds to wait for the unit")
    arguments = parser.parse_args(argv)
    pipe_path = os.environ.get(HAND_OVER_SETTING)
    if not pipe_path:
        print(f"{HAND_OVER_SETTING} is not set: this is no pooled unit", file=sys.stderr)
        return MISUSED
    pipe = Path(pipe_path)
    if arguments.command == "ready":
        return 0 if is_ready(pipe) else NOT_READY
    line = sys.stdin.buffer.readline(MAX_MESSAGE_BYTES + 1)
    try:
        if len(line) > MAX_MESSAGE_BYTES or not line.endswith(b"\n"):
            raise BadMessage("the message must be one line of at most 1 MiB")
        take(pipe, line, arguments.wait)
    except (BadMessage, HandOverFailed, OSError) as exc:
        print(f"hand-over failed: {exc}", file=sys.stderr)
        return FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())

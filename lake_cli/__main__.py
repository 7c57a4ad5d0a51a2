"""``texera-lake``: the command line for people using the mesh."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from embedded_stack.stack import ENDPOINTS_FILE, SECRET_FILE
from service_runtime.auth import mint_token
from service_runtime.health_probe import probe


class CliError(Exception):
    """A problem to report in one line, without a traceback."""


def _read_state(state_dir: Path, name: str) -> str:
    try:
        return (state_dir / name).read_text()
    except FileNotFoundError as exc:
        raise CliError(
            f"no running stack found in {state_dir}: start one with `make run`, or pass --state-dir"
        ) from exc


def token(args: argparse.Namespace) -> None:
    """Prints a development token for a user, signed with the embedded stack's secret."""
    secret = _read_state(args.state_dir, SECRET_FILE).strip()
    print(mint_token(secret, args.user, ttl_seconds=args.ttl))


def status(args: argparse.Namespace) -> None:
    """Prints each service's health; fails if any is not serving."""
    endpoints: dict[str, Any] = json.loads(_read_state(args.state_dir, ENDPOINTS_FILE))
    unhealthy = 0
    for name, target in endpoints["grpc"].items():
        state = probe(target, timeout=3)
        unhealthy += state != "SERVING"
        print(f"{name:<18} {target:<22} {state}")
    if unhealthy:
        raise CliError(f"{unhealthy} service(s) not serving")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="texera-lake", description=__doc__)
    parser.add_argument(
        "--state-dir", type=Path, default=Path(".stack"), help="the embedded stack's folder"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    token_parser = commands.add_parser("token", help=token.__doc__)
    token_parser.add_argument("--user", required=True, help="user id to put in the token")
    token_parser.add_argument(
        "--ttl", type=float, default=3600.0, help="lifetime in seconds (default 3600)"
    )
    token_parser.set_defaults(run=token)
    commands.add_parser("status", help=status.__doc__).set_defaults(run=status)
    args = parser.parse_args(argv)
    try:
        args.run(args)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

"""``texera-lake``: the command line for people using the mesh.

Calls go to the gateway (--target, TEXERA_LAKE_TARGET, or the embedded stack's)
over TLS with the token in TEXERA_LAKE_TOKEN, or, against the embedded stack, a token
minted for --user.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import grpc

from lake_cli import dev, executions, results, retention, units, usage, warehouses
from lake_cli.connection import CliError, Connection, read_state, stack_endpoints, stack_tls
from lake_cli.render import error_text
from lake_client.stack_state import JWT_SECRET_FILE
from service_runtime.auth import mint_token
from service_runtime.health_probe import probe


def token(args: argparse.Namespace) -> None:
    """Prints a development token for a user, signed with the embedded stack's secret."""
    secret = read_state(args.state_dir, JWT_SECRET_FILE).strip()
    print(mint_token(secret, args.user, ttl_seconds=args.ttl))


def status(args: argparse.Namespace) -> None:
    """Prints each service's health; fails if any is not serving."""
    endpoints = stack_endpoints(args.state_dir)
    # The gateway takes any client; the services behind it, in TLS mode, only the mesh's.
    edge, mesh = stack_tls(endpoints), stack_tls(endpoints, presenting=True)
    unhealthy = 0
    for name, target in endpoints["grpc"].items():
        state = probe(target, timeout=3, tls=edge if name == "gateway" else mesh)
        unhealthy += state != "SERVING"
        print(f"{name:<18} {target:<22} {state}")
    if unhealthy:
        raise CliError(f"{unhealthy} service(s) not serving")


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="texera-lake", description=__doc__)
    root.add_argument(
        "--state-dir", type=Path, default=Path(".stack"), help="the embedded stack's folder"
    )
    root.add_argument("--target", help="the gateway's host:port")
    root.add_argument(
        "--ca-file",
        help="with --target: the CA bundle that verifies the gateway's certificate (default: "
        "TEXERA_LAKE_CA_FILE, else the system's)",
    )
    root.add_argument(
        "--plaintext",
        action="store_true",
        help="with --target: call without TLS (a gateway serving plaintext, for debugging)",
    )
    root.add_argument("--user", help="act as this user of the embedded stack (development)")
    commands = root.add_subparsers(dest="command", required=True)
    minting = commands.add_parser("token", help=token.__doc__)
    minting.add_argument("--user", dest="token_user", required=True, help="user id in the token")
    minting.add_argument("--ttl", type=float, default=3600.0, help="lifetime in seconds")
    minting.set_defaults(offline=token)
    commands.add_parser("status", help=status.__doc__).set_defaults(offline=status)
    warehouses.add_commands(commands)
    units.add_commands(commands)
    executions.add_commands(commands)
    results.add_commands(commands)
    usage.add_commands(commands)
    retention.add_commands(commands)
    dev.add_commands(commands)
    return root


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    try:
        if offline := getattr(args, "offline", None):
            if args.command == "token":
                args.user = args.token_user
            offline(args)
        else:
            connection = Connection.open(
                args.target,
                args.user,
                args.state_dir,
                ca_file=args.ca_file,
                plaintext=args.plaintext,
            )
            args.run(connection, args)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except grpc.RpcError as exc:
        print(f"error: {error_text(exc)}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except json.JSONDecodeError as exc:  # a malformed stack.json
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

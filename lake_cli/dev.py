"""`texera-lake dev user NAME`: a user of the embedded stack, from the shell.

It gives the user what a real one would bring and hold: a bucket of their own on the stack's
S3 endpoint with an access key and a role for short-lived credentials, and a Texera token. It
reaches the endpoint's administrator through the key the stack keeps in its state folder (a
file of mode 0600), never through the environment or an argument. The secret key is printed
once and kept nowhere: whoever needs it again provisions a new bucket.
"""

from __future__ import annotations

import argparse

from embedded_stack.extra import missing
from lake_cli.connection import CliError


def user(args: argparse.Namespace) -> None:
    """Provisions a bucket, access key and role for a user of the embedded stack and prints
    them as JSON with a token for that user (the secret key is shown this once)."""
    try:
        from lake_cli import stack_users  # noqa: PLC0415 - only here: the `stack` extra
    except ModuleNotFoundError as exc:
        raise CliError(missing("`texera-lake dev`", exc)) from exc
    stack_users.print_new_user(args)


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = commands.add_parser("dev", help="users of the embedded stack (development)")
    actions = group.add_subparsers(dest="action", required=True)
    making = actions.add_parser("user", help=user.__doc__)
    making.add_argument("name", help="the user's id (any name)")
    making.add_argument("--ttl", type=float, default=3600.0, help="token lifetime in seconds")
    making.set_defaults(offline=user)

"""`texera-lake dev user NAME`: a user of the embedded stack, from the shell.

It gives the user what a real one would bring and hold: a bucket of their own on the stack's
S3 endpoint with an access key and a role for short-lived credentials, and a Texera token. It
reaches the endpoint's administrator through the key the stack keeps in its state folder (a
file of mode 0600), never through the environment or an argument. The secret key is printed
once and kept nowhere: whoever needs it again provisions a new bucket.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import botocore.exceptions
from google.protobuf import json_format

from embedded_stack.s3.endpoint import S3Admin, provision_bucket, read_admin_key
from embedded_stack.secrets import JWT_SECRET_FILE, S3_ADMIN_KEY_FILE
from embedded_stack.warehouse_request import storage_profile
from lake_cli.connection import CliError, read_state, stack_endpoints
from service_runtime.auth import mint_token


def user(args: argparse.Namespace) -> None:
    """Provisions a bucket, access key and role for a user of the embedded stack and prints
    them as JSON with a token for that user (the secret key is shown this once)."""
    if not args.name.strip():
        raise CliError("a user needs a name")
    endpoints = stack_endpoints(args.state_dir)
    secret = read_state(args.state_dir, JWT_SECRET_FILE).strip()
    try:
        admin = S3Admin(str(endpoints["s3"]), read_admin_key(args.state_dir / S3_ADMIN_KEY_FILE))
    except FileNotFoundError as exc:
        raise CliError(f"the stack in {args.state_dir} has no S3 endpoint running") from exc
    try:
        grant = provision_bucket(admin, args.name)
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
        raise CliError(f"the S3 endpoint refused to provision a bucket: {exc}") from exc
    answer: dict[str, Any] = {
        "user_id": args.name,
        "token": mint_token(secret, args.name, ttl_seconds=args.ttl),
        "gateway": endpoints["grpc"]["gateway"],
        # The fields of a CreateWarehouseRequest, as grpcurl takes them.
        "storage": json_format.MessageToDict(
            storage_profile(grant), preserving_proto_field_name=True
        ),
        "credentials": {
            "access_key_id": grant.access_key.access_key_id,
            "secret_access_key": grant.access_key.secret_access_key,
        },
    }
    print(json.dumps(answer, indent=2))


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = commands.add_parser("dev", help="users of the embedded stack (development)")
    actions = group.add_subparsers(dest="action", required=True)
    making = actions.add_parser("user", help=user.__doc__)
    making.add_argument("name", help="the user's id (any name)")
    making.add_argument("--ttl", type=float, default=3600.0, help="token lifetime in seconds")
    making.set_defaults(offline=user)

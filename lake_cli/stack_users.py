"""The embedded stack's users, made from the shell (`texera-lake dev user`; see lake_cli.dev).

It needs the embedded stack's own packages (the `stack` extra: boto3 for the S3 endpoint's
administrator), which the services' image does not install.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import botocore.exceptions
from google.protobuf import json_format

from embedded_stack.s3.endpoint import S3Admin, provision_bucket, read_admin_key
from embedded_stack.warehouse_request import storage_profile
from lake_cli.connection import CliError, read_state, stack_endpoints
from lake_client.stack_state import JWT_SECRET_FILE, S3_ADMIN_KEY_FILE
from service_runtime.auth import mint_token


def print_new_user(args: argparse.Namespace) -> None:
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

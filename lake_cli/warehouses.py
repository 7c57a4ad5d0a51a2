"""`texera-lake warehouse …`: register, list, show and share warehouses."""

from __future__ import annotations

import argparse
import getpass
import os
import uuid

from lake_cli.connection import CliError, Connection
from lake_cli.render import as_json, table
from texera.lake.v1 import warehouse_pb2, warehouse_service_pb2

SECRET_VARIABLE = "TEXERA_LAKE_S3_SECRET_ACCESS_KEY"  # noqa: S105 - the variable's name
ws = warehouse_service_pb2
#: The roles an owner grants, as the command line names them.
ROLES = {
    "reader": warehouse_pb2.WAREHOUSE_ROLE_READER,
    "writer": warehouse_pb2.WAREHOUSE_ROLE_WRITER,
}


def _role_name(role: warehouse_pb2.WarehouseRole.ValueType) -> str:
    return warehouse_pb2.WarehouseRole.Name(role).removeprefix("WAREHOUSE_ROLE_").lower()


def _secret() -> str:
    """The bucket's secret key: from the environment, else asked for (never an argument)."""
    if secret := os.environ.get(SECRET_VARIABLE):
        return secret
    try:
        secret = getpass.getpass("S3 secret access key: ")
    except (EOFError, KeyboardInterrupt) as exc:
        raise CliError(f"no secret key: set {SECRET_VARIABLE} or type it when asked") from exc
    if not secret:
        raise CliError(f"no secret key: set {SECRET_VARIABLE} or type it when asked")
    return secret


def create(connection: Connection, args: argparse.Namespace) -> None:
    """Registers a warehouse on your bucket; the secret key is asked for or read from
    TEXERA_LAKE_S3_SECRET_ACCESS_KEY."""
    request = ws.CreateWarehouseRequest(
        warehouse=warehouse_pb2.Warehouse(
            display_name=args.name,
            storage=warehouse_pb2.S3StorageProfile(
                bucket=args.bucket,
                key_prefix=args.key_prefix,
                region=args.region,
                endpoint=args.endpoint,
                path_style_access=args.path_style,
                flavor=warehouse_pb2.S3_FLAVOR_S3_COMPAT
                if args.endpoint
                else warehouse_pb2.S3_FLAVOR_AWS,
                sts_enabled=bool(args.sts_role_arn),
                sts_role_arn=args.sts_role_arn,
            ),
        ),
        credentials=warehouse_pb2.S3Credentials(
            access_key_id=args.access_key_id, secret_access_key=_secret()
        ),
        request_id=str(uuid.uuid4()),  # the gateway may then repeat it safely
    )
    created = connection.warehouses.CreateWarehouse(
        request, metadata=connection.metadata, timeout=120
    ).warehouse
    print(as_json(created))


def list_warehouses(connection: Connection, args: argparse.Namespace) -> None:
    """Lists your warehouses and those shared with you, with your role on each."""
    token, rows = "", []
    while True:
        page = connection.warehouses.ListWarehouses(
            ws.ListWarehousesRequest(page_size=100, page_token=token),
            metadata=connection.metadata,
            timeout=60,
        )
        rows += [
            (
                w.warehouse_id,
                w.display_name,
                warehouse_pb2.WarehouseState.Name(w.state).removeprefix("WAREHOUSE_STATE_"),
                f"{w.storage.bucket}/{w.storage.key_prefix}",
                _role_name(w.caller_role),
            )
            for w in page.warehouses
        ]
        token = page.next_page_token
        if not token:
            break
    table(("warehouse", "name", "state", "location", "role"), rows)


def get(connection: Connection, args: argparse.Namespace) -> None:
    """Shows one warehouse."""
    answer = connection.warehouses.GetWarehouse(
        ws.GetWarehouseRequest(warehouse_id=args.warehouse_id),
        metadata=connection.metadata,
        timeout=60,
    )
    print(as_json(answer.warehouse))


def share(connection: Connection, args: argparse.Namespace) -> None:
    """Grants a user a role on your warehouse (reader: read its results; writer: also run
    workflows into it), or changes the role granted before."""
    answer = connection.warehouses.ShareWarehouse(
        ws.ShareWarehouseRequest(
            warehouse_id=args.warehouse_id,
            member=warehouse_pb2.WarehouseMember(user_id=args.user_id, role=ROLES[args.role]),
        ),
        metadata=connection.metadata,
        timeout=60,
    )
    print(as_json(answer.member))


def unshare(connection: Connection, args: argparse.Namespace) -> None:
    """Takes a user's role on your warehouse back."""
    connection.warehouses.UnshareWarehouse(
        ws.UnshareWarehouseRequest(warehouse_id=args.warehouse_id, user_id=args.user_id),
        metadata=connection.metadata,
        timeout=60,
    )
    print(f"unshared {args.warehouse_id} with {args.user_id}")


def members(connection: Connection, args: argparse.Namespace) -> None:
    """Lists the users your warehouse is shared with."""
    token, rows = "", []
    while True:
        page = connection.warehouses.ListWarehouseMembers(
            ws.ListWarehouseMembersRequest(
                warehouse_id=args.warehouse_id, page_size=100, page_token=token
            ),
            metadata=connection.metadata,
            timeout=60,
        )
        rows += [(m.user_id, _role_name(m.role), m.grant_time.ToJsonString()) for m in page.members]
        token = page.next_page_token
        if not token:
            break
    table(("user", "role", "granted"), rows)


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = commands.add_parser("warehouse", help="register, list, show and share warehouses")
    actions = group.add_subparsers(dest="action", required=True)
    creating = actions.add_parser("create", help=create.__doc__)
    creating.add_argument("--name", required=True, help="display name")
    creating.add_argument("--bucket", required=True)
    creating.add_argument("--key-prefix", default="", help="folder of the warehouse in the bucket")
    creating.add_argument("--region", default="us-east-1")
    creating.add_argument("--endpoint", default="", help="S3 endpoint URL; empty for AWS")
    creating.add_argument("--path-style", action="store_true", help="path-style bucket access")
    creating.add_argument("--access-key-id", required=True)
    creating.add_argument(
        "--sts-role-arn", default="", help="role for short-lived credentials (turns STS on)"
    )
    creating.set_defaults(run=create)
    actions.add_parser("list", help=list_warehouses.__doc__).set_defaults(run=list_warehouses)
    getting = actions.add_parser("get", help=get.__doc__)
    getting.add_argument("warehouse_id")
    getting.set_defaults(run=get)
    sharing = actions.add_parser("share", help=share.__doc__)
    sharing.add_argument("warehouse_id")
    sharing.add_argument("user_id")
    sharing.add_argument("--role", choices=sorted(ROLES), default="reader")
    sharing.set_defaults(run=share)
    unsharing = actions.add_parser("unshare", help=unshare.__doc__)
    unsharing.add_argument("warehouse_id")
    unsharing.add_argument("user_id")
    unsharing.set_defaults(run=unshare)
    listing = actions.add_parser("members", help=members.__doc__)
    listing.add_argument("warehouse_id")
    listing.set_defaults(run=members)

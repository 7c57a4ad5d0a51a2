"""`texera-lake retention get | set`: a warehouse's retention policy."""

from __future__ import annotations

import argparse

from google.protobuf.duration_pb2 import Duration
from google.protobuf.field_mask_pb2 import FieldMask

from lake_cli.connection import CliError, Connection
from texera.lake.v1 import retention_service_pb2

rs = retention_service_pb2


def _show(policy: rs.RetentionPolicy) -> None:
    age = f"{policy.max_age.seconds / 86400:g} days" if policy.max_age.seconds else "no limit"
    last = f"the newest {policy.keep_last} per workflow" if policy.keep_last else "no limit"
    print(f"warehouse {policy.warehouse_id}: maximum age {age}; keep {last}")


def get(connection: Connection, args: argparse.Namespace) -> None:
    """Shows which ended executions of a warehouse the registry deletes by itself."""
    _show(
        connection.retention.GetRetentionPolicy(
            rs.GetRetentionPolicyRequest(warehouse_id=args.warehouse_id),
            metadata=connection.metadata,
            timeout=60,
        ).policy
    )


def set_policy(connection: Connection, args: argparse.Namespace) -> None:
    """Sets your warehouse's retention policy (only the limits given; 0 removes one)."""
    policy = rs.RetentionPolicy(warehouse_id=args.warehouse_id)
    paths = []
    if args.max_age_days is not None:
        policy.max_age.CopyFrom(Duration(seconds=round(args.max_age_days * 86400)))
        paths.append("max_age")
    if args.keep_last is not None:
        policy.keep_last = args.keep_last
        paths.append("keep_last")
    if not paths:  # an empty mask would set both limits (to none)
        raise CliError("give --max-age-days, --keep-last or both")
    _show(
        connection.retention.UpdateRetentionPolicy(
            rs.UpdateRetentionPolicyRequest(policy=policy, update_mask=FieldMask(paths=paths)),
            metadata=connection.metadata,
            timeout=60,
        ).policy
    )


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = commands.add_parser("retention", help="a warehouse's retention policy")
    actions = group.add_subparsers(dest="action", required=True)
    getting = actions.add_parser("get", help=get.__doc__)
    getting.add_argument("warehouse_id")
    getting.set_defaults(run=get)
    setting = actions.add_parser("set", help=set_policy.__doc__)
    setting.add_argument("warehouse_id")
    setting.add_argument("--max-age-days", type=float, help="delete executions ended before")
    setting.add_argument("--keep-last", type=int, help="keep the newest N per workflow")
    setting.set_defaults(run=set_policy)

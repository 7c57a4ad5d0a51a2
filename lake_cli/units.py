"""`texera-lake unit …`: create, list, show, share and delete your computing units."""

from __future__ import annotations

import argparse
import uuid

from lake_cli.connection import Connection
from lake_cli.render import as_json, table
from texera.lake.v1 import computing_unit_service_pb2

cus = computing_unit_service_pb2


def _state(unit: cus.ComputingUnit) -> str:
    return cus.ComputingUnitState.Name(unit.state).removeprefix("COMPUTING_UNIT_STATE_")


def create(connection: Connection, args: argparse.Namespace) -> None:
    """Creates a computing unit of yours and starts it."""
    request = cus.CreateComputingUnitRequest(
        computing_unit=cus.ComputingUnit(
            display_name=args.name, cores=args.cores, memory_mib=args.memory_mib
        ),
        request_id=str(uuid.uuid4()),  # the gateway may then repeat it safely
    )
    created = connection.units.CreateComputingUnit(
        request, metadata=connection.metadata, timeout=60
    ).computing_unit
    print(as_json(created))


def list_units(connection: Connection, args: argparse.Namespace) -> None:
    """Lists your computing units and those shared with you."""
    token, rows = "", []
    while True:
        page = connection.units.ListComputingUnits(
            cus.ListComputingUnitsRequest(page_size=100, page_token=token),
            metadata=connection.metadata,
            timeout=60,
        )
        rows += [
            (
                u.computing_unit_id,
                u.display_name + (" (default)" if u.default_unit else ""),
                u.owner_user_id,
                _state(u),
                f"{u.cores} cores, {u.memory_mib} MiB",
            )
            for u in page.computing_units
        ]
        token = page.next_page_token
        if not token:
            break
    table(("unit", "name", "owner", "state", "size"), rows)


def get(connection: Connection, args: argparse.Namespace) -> None:
    """Shows one computing unit."""
    answer = connection.units.GetComputingUnit(
        cus.GetComputingUnitRequest(computing_unit_id=args.unit_id),
        metadata=connection.metadata,
        timeout=60,
    )
    print(as_json(answer.computing_unit))


def share(connection: Connection, args: argparse.Namespace) -> None:
    """Lets another user run workflows on your unit (into that user's own warehouses)."""
    answer = connection.units.ShareComputingUnit(
        cus.ShareComputingUnitRequest(computing_unit_id=args.unit_id, user_id=args.user_id),
        metadata=connection.metadata,
        timeout=60,
    )
    print(as_json(answer.computing_unit))


def unshare(connection: Connection, args: argparse.Namespace) -> None:
    """Takes the right to run on your unit back from a user."""
    answer = connection.units.UnshareComputingUnit(
        cus.UnshareComputingUnitRequest(computing_unit_id=args.unit_id, user_id=args.user_id),
        metadata=connection.metadata,
        timeout=60,
    )
    print(as_json(answer.computing_unit))


def delete(connection: Connection, args: argparse.Namespace) -> None:
    """Stops and deletes your unit; with --force, cancels the executions it still runs."""
    answer = connection.units.DeleteComputingUnit(
        cus.DeleteComputingUnitRequest(computing_unit_id=args.unit_id, force=args.force),
        metadata=connection.metadata,
        timeout=180,
    )
    print(f"deleted {args.unit_id}")
    for execution_id in answer.cancelled_execution_ids:
        print(f"cancelled {execution_id}")


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = commands.add_parser("unit", help="create, list, share and delete computing units")
    actions = group.add_subparsers(dest="action", required=True)
    creating = actions.add_parser("create", help=create.__doc__)
    creating.add_argument("--name", required=True, help="display name")
    creating.add_argument("--cores", type=int, default=1)
    creating.add_argument("--memory-mib", type=int, default=1024)
    creating.set_defaults(run=create)
    actions.add_parser("list", help=list_units.__doc__).set_defaults(run=list_units)
    for name, action in (("get", get), ("delete", delete)):
        parser = actions.add_parser(name, help=action.__doc__)
        parser.add_argument("unit_id")
        parser.set_defaults(run=action)
    deleting = actions.choices["delete"]
    deleting.add_argument("--force", action="store_true", help="cancel its executions")
    for name, action in (("share", share), ("unshare", unshare)):
        parser = actions.add_parser(name, help=action.__doc__)
        parser.add_argument("unit_id")
        parser.add_argument("user_id", help="the other user")
        parser.set_defaults(run=action)

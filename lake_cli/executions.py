"""`texera-lake submit | watch | cancel | executions | execution delete`: run workflows,
follow them, and delete what they left."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml
from google.protobuf import json_format

from lake_cli.connection import CliError, Connection
from lake_cli.render import as_json, progress_bar, table
from service_runtime.execution_states import state_name
from texera.lake.v1 import execution_pb2, execution_service_pb2, workflow_pb2

es = execution_service_pb2


def load_workflow(path: Path) -> workflow_pb2.Workflow:
    """A workflow from a JSON or YAML file (the Workflow message in its JSON form)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        content = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
        return json_format.ParseDict(content, workflow_pb2.Workflow())
    except (ValueError, yaml.YAMLError, json_format.ParseError) as exc:
        raise CliError(f"{path} is not a workflow: {exc}") from exc


def submit(connection: Connection, args: argparse.Namespace) -> None:
    """Submits a workflow (JSON or YAML file) to run on a warehouse."""
    request = es.SubmitExecutionRequest(
        warehouse_id=args.warehouse,
        computing_unit_id=args.unit,
        execution_id=args.execution_id,
        workflow=load_workflow(args.workflow),
    )
    execution = connection.executions.SubmitExecution(
        request, metadata=connection.metadata, timeout=300
    ).execution
    print(
        f"execution {execution.execution_id} {state_name(execution)} on {execution.computing_unit_id}"
    )
    if args.watch:
        follow(connection, execution.execution_id)


def _progress_line(execution: execution_pb2.Execution) -> str:
    progress = execution.progress
    return (
        f"{state_name(execution):<9} {progress_bar(progress.tasks_completed, progress.tasks_total)} "
        f"{progress.tasks_completed}/{progress.tasks_total} tasks  "
        f"{progress.rows_written:,} rows written  {progress.commits} commits"
    )


def follow(connection: Connection, execution_id: str) -> execution_pb2.Execution:
    """Shows the execution's progress until it ends; then its outputs or its error."""
    interactive = sys.stderr.isatty()
    final = None
    for event in connection.executions.WatchExecution(
        es.WatchExecutionRequest(execution_id=execution_id), metadata=connection.metadata
    ):
        final = event.execution
        line = _progress_line(final)
        sys.stderr.write(f"\r{line}" if interactive else f"{line}\n")
        sys.stderr.flush()
    if interactive:
        sys.stderr.write("\n")
    if final is None:
        raise CliError(f"the watch of execution {execution_id} ended without an event")
    report(final)
    return final


def report(execution: execution_pb2.Execution) -> None:
    if execution.state == execution_pb2.EXECUTION_STATE_SUCCEEDED:
        table(
            ("operator", "rows", "files", "table"),
            [
                (o.operator_id, o.row_count, o.file_count, f"{o.namespace}.{o.table_name}")
                for o in execution.outputs
            ],
        )
    elif execution.HasField("error"):
        print(f"{state_name(execution)}: {execution.error.reason}: {execution.error.message}")


def watch(connection: Connection, args: argparse.Namespace) -> None:
    """Follows an execution with a progress bar until it ends."""
    final = follow(connection, args.execution_id)
    if final.state != execution_pb2.EXECUTION_STATE_SUCCEEDED:
        raise CliError(f"execution {args.execution_id} ended {state_name(final)}")


def cancel(connection: Connection, args: argparse.Namespace) -> None:
    """Cancels an execution."""
    execution = connection.executions.CancelExecution(
        es.CancelExecutionRequest(execution_id=args.execution_id, reason=args.reason),
        metadata=connection.metadata,
        timeout=60,
    ).execution
    print(as_json(execution))


def delete(connection: Connection, args: argparse.Namespace) -> None:
    """Deletes an ended execution: its result, statistics and console log tables and files."""
    execution = connection.executions.DeleteExecution(
        es.DeleteExecutionRequest(execution_id=args.execution_id),
        metadata=connection.metadata,
        timeout=60,
    ).execution
    done = execution.cleanup_state == execution_pb2.CLEANUP_STATE_DONE
    print(
        f"execution {execution.execution_id} deleted at {execution.delete_time.ToJsonString()}; "
        + ("its tables are gone" if done else "its tables are being dropped")
    )


def list_executions(connection: Connection, args: argparse.Namespace) -> None:
    """Lists your executions, newest first."""
    listed = connection.executions.ListExecutions(
        es.ListExecutionsRequest(page_size=args.limit, warehouse_id=args.warehouse),
        metadata=connection.metadata,
        timeout=60,
    )
    table(
        ("execution", "state", "warehouse", "unit", "rows"),
        [
            (
                e.execution_id,
                state_name(e) + (" (deleted)" if e.HasField("delete_time") else ""),
                e.warehouse_id,
                e.computing_unit_id,
                e.progress.rows_written,
            )
            for e in listed.executions
        ],
    )


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    submitting = commands.add_parser("submit", help=submit.__doc__)
    submitting.add_argument("workflow", type=Path, help="the workflow, a .json or .yaml file")
    submitting.add_argument(
        "--warehouse",
        default="",
        help="warehouse id to write into (required per-user; a global catalog mode's platform "
        "warehouse without it)",
    )
    submitting.add_argument(
        "--unit",
        default="",
        help="computing unit id (default: your default unit, made on first use)",
    )
    submitting.add_argument("--execution-id", default="", help="your own id for the execution")
    submitting.add_argument("--watch", action="store_true", help="follow it until it ends")
    submitting.set_defaults(run=submit)
    watching = commands.add_parser("watch", help=watch.__doc__)
    watching.add_argument("execution_id")
    watching.set_defaults(run=watch)
    cancelling = commands.add_parser("cancel", help=cancel.__doc__)
    cancelling.add_argument("execution_id")
    cancelling.add_argument("--reason", default="", help="why, recorded with the execution")
    cancelling.set_defaults(run=cancel)
    listing = commands.add_parser("executions", help=list_executions.__doc__)
    listing.add_argument("--warehouse", default="", help="only this warehouse's")
    listing.add_argument("--limit", type=int, default=20, help="how many (default 20)")
    listing.set_defaults(run=list_executions)
    group = commands.add_parser("execution", help="manage one execution")
    actions = group.add_subparsers(dest="action", required=True)
    deleting = actions.add_parser("delete", help=delete.__doc__)
    deleting.add_argument("execution_id")
    deleting.set_defaults(run=delete)

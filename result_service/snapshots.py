"""Choosing the snapshot to read (current, by id, as of a time) and describing tables."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from lake_tables.naming import EXECUTION_ID
from result_service.file_reader import served_arrow_schema
from service_runtime.errors import Resource, not_found
from texera.lake.v1 import result_pb2


def _millis(stamp: Timestamp) -> int:
    return stamp.seconds * 1000 + stamp.nanos // 1_000_000


def _timestamp(millis: int) -> Timestamp:
    stamp = Timestamp()
    stamp.FromMilliseconds(millis)
    return stamp


def _iso(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat(timespec="milliseconds")


def choose(table: Table, selector: result_pb2.SnapshotSelector, what: str) -> Snapshot | None:
    """The snapshot selector asks for (None: the table has none yet); NOT_FOUND naming `what`
    when it names a snapshot that does not exist."""
    which = selector.WhichOneof("selector")
    if which == "snapshot_id":
        snapshot = table.snapshot_by_id(selector.snapshot_id)
        if snapshot is None:
            raise not_found(Resource.SNAPSHOT, f"{selector.snapshot_id} of the {what}")
        return snapshot
    if which == "as_of_time":
        asked = _millis(selector.as_of_time)
        snapshot = table.snapshot_as_of_timestamp(asked)
        if snapshot is None:
            history = table.history()
            first = f"; its first is from {_iso(history[0].timestamp_ms)}" if history else ""
            raise not_found(
                Resource.SNAPSHOT, f"as of {_iso(asked)} of the {what}", f"it had none then{first}"
            )
        return snapshot
    return table.current_snapshot()


def schema_at(table: Table, snapshot: Snapshot | None) -> Schema:
    """The schema the snapshot was written with; the current one without a snapshot."""
    if snapshot is not None and snapshot.schema_id is not None:
        schema = table.metadata.schema_by_id(snapshot.schema_id)
        if schema is not None:
            return schema
    return table.schema()


def columns(schema: Schema) -> list[result_pb2.ResultColumn]:
    arrow = served_arrow_schema(schema)
    return [
        result_pb2.ResultColumn(
            name=field.name,
            field_id=field.field_id,
            iceberg_type=str(field.field_type),
            arrow_type=str(arrow.field(field.name).type),
            nullable=not field.required,
        )
        for field in schema.fields
    ]


def snapshot_message(snapshot: Snapshot) -> result_pb2.Snapshot:
    summary = snapshot.summary
    properties = {**summary.additional_properties} if summary is not None else {}
    return result_pb2.Snapshot(
        snapshot_id=snapshot.snapshot_id,
        parent_snapshot_id=snapshot.parent_snapshot_id or 0,
        commit_time=_timestamp(snapshot.timestamp_ms),
        operation=summary.operation.value if summary is not None else "",
        execution_id=properties.get(EXECUTION_ID, ""),
        summary=properties,
        sequence_number=snapshot.sequence_number or 0,
    )


def result_message(
    execution_id: str, operator_id: str, table: Table, snapshot: Snapshot | None
) -> result_pb2.Result:
    namespace, name = table.name()[-2:]
    result = result_pb2.Result(
        execution_id=execution_id,
        operator_id=operator_id,
        namespace=namespace,
        table_name=name,
        columns=columns(schema_at(table, snapshot)),
    )
    if snapshot is not None:
        totals = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        result.row_count = int(totals.get("total-records", 0))
        result.file_count = int(totals.get("total-data-files", 0))
        result.total_bytes = int(totals.get("total-files-size", 0))
        result.snapshot_id = snapshot.snapshot_id
        result.commit_time.CopyFrom(_timestamp(snapshot.timestamp_ms))
    return result

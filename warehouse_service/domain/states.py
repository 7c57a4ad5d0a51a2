"""The states and storage flavors the registry's database and API name: each state's name in
the database and its number in the API."""

from __future__ import annotations

from texera.lake.v1 import execution_pb2, warehouse_pb2

WAREHOUSE_STATES = {
    "ACTIVE": warehouse_pb2.WAREHOUSE_STATE_ACTIVE,
    "ARCHIVED": warehouse_pb2.WAREHOUSE_STATE_ARCHIVED,
    "DELETING": warehouse_pb2.WAREHOUSE_STATE_DELETING,
    "DELETED": warehouse_pb2.WAREHOUSE_STATE_DELETED,
}
WAREHOUSE_STATE_NAMES = {number: name for name, number in WAREHOUSE_STATES.items()}
EXECUTION_STATES = {
    "QUEUED": execution_pb2.EXECUTION_STATE_QUEUED,
    "RUNNING": execution_pb2.EXECUTION_STATE_RUNNING,
    "SUCCEEDED": execution_pb2.EXECUTION_STATE_SUCCEEDED,
    "FAILED": execution_pb2.EXECUTION_STATE_FAILED,
    "CANCELLED": execution_pb2.EXECUTION_STATE_CANCELLED,
}
EXECUTION_STATE_NAMES = {number: name for name, number in EXECUTION_STATES.items()}
CLEANUP_STATES = {
    "NOT_NEEDED": execution_pb2.CLEANUP_STATE_NOT_NEEDED,
    "PENDING": execution_pb2.CLEANUP_STATE_PENDING,
    "DONE": execution_pb2.CLEANUP_STATE_DONE,
}
TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
#: Ends whose result tables are dropped (see warehouse_service.background.cleaner): no outputs listed.
CLEANED_UP_STATES = frozenset({"FAILED", "CANCELLED"})
FLAVORS = {"aws": warehouse_pb2.S3_FLAVOR_AWS, "s3-compat": warehouse_pb2.S3_FLAVOR_S3_COMPAT}
FLAVOR_NAMES = {
    warehouse_pb2.S3_FLAVOR_UNSPECIFIED: "aws",
    warehouse_pb2.S3_FLAVOR_AWS: "aws",
    warehouse_pb2.S3_FLAVOR_S3_COMPAT: "s3-compat",
}

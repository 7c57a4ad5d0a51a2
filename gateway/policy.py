"""Which public calls the gateway may repeat after UNAVAILABLE without changing their effect.

Reads may always be repeated, and so may archive and restore (moving to the
state a warehouse is in is a no-op), sharing and unsharing (granting a role held, or
taking back one not held, is a no-op), deleting an execution (deleting it again returns its
tombstone) and setting a retention policy (setting the same again changes nothing). A
create, rotation or submission may when
the caller made it idempotent with a request_id (or, for a submission, chose the
execution id), a delete when it allows the resource to be missing (AIP-135):
otherwise a repeat after a lost answer would report NOT_FOUND for what
succeeded.
"""

from __future__ import annotations

import enum

from google.protobuf.message import Message


class Repeat(enum.Enum):
    ALWAYS = "always"
    WHEN_IDEMPOTENT = "when the request carries its idempotency key"


REPEATABLE: dict[str, dict[str, Repeat]] = {
    "texera.lake.v1.WarehouseService": {
        "CreateWarehouse": Repeat.WHEN_IDEMPOTENT,
        "GetWarehouse": Repeat.ALWAYS,
        "ListWarehouses": Repeat.ALWAYS,
        "RotateWarehouseCredentials": Repeat.WHEN_IDEMPOTENT,
        "ArchiveWarehouse": Repeat.ALWAYS,
        "RestoreWarehouse": Repeat.ALWAYS,
        "DeleteWarehouse": Repeat.WHEN_IDEMPOTENT,
        "ShareWarehouse": Repeat.ALWAYS,
        "UnshareWarehouse": Repeat.ALWAYS,
        "ListWarehouseMembers": Repeat.ALWAYS,
        "GetWarehouseUsage": Repeat.ALWAYS,
        "GetExecutionUsage": Repeat.ALWAYS,
    },
    "texera.lake.v1.ComputingUnitService": {
        "CreateComputingUnit": Repeat.WHEN_IDEMPOTENT,
        "GetComputingUnit": Repeat.ALWAYS,
        "ListComputingUnits": Repeat.ALWAYS,
        "DeleteComputingUnit": Repeat.WHEN_IDEMPOTENT,
        "ShareComputingUnit": Repeat.ALWAYS,
        "UnshareComputingUnit": Repeat.ALWAYS,
    },
    "texera.lake.v1.ExecutionService": {
        "SubmitExecution": Repeat.WHEN_IDEMPOTENT,
        "GetExecution": Repeat.ALWAYS,
        "ListExecutions": Repeat.ALWAYS,
        "WatchExecution": Repeat.ALWAYS,
        "CancelExecution": Repeat.ALWAYS,
        "DeleteExecution": Repeat.ALWAYS,
    },
    "texera.lake.v1.RetentionService": {
        "GetRetentionPolicy": Repeat.ALWAYS,
        "UpdateRetentionPolicy": Repeat.ALWAYS,
    },
    "texera.lake.v1.ResultService": {
        "ListResults": Repeat.ALWAYS,
        "GetResult": Repeat.ALWAYS,
        "ReadResultPage": Repeat.ALWAYS,
        "StreamResult": Repeat.ALWAYS,
        "ListSnapshots": Repeat.ALWAYS,
        "ListRuntimeStatistics": Repeat.ALWAYS,
        "ListConsoleMessages": Repeat.ALWAYS,
    },
    "texera.lake.v1.IcebergAccessService": {
        # Each call mints a new access token: nothing a second one changes.
        "GetIcebergAccess": Repeat.ALWAYS,
    },
}

#: The request fields that make a call idempotent when set.
_IDEMPOTENCY_KEYS = ("request_id", "execution_id", "allow_missing")


def may_repeat(rule: Repeat, request: Message | None) -> bool:
    """Whether a call under rule may be repeated; request is needed for WHEN_IDEMPOTENT."""
    if rule is Repeat.WHEN_IDEMPOTENT:
        fields = request.DESCRIPTOR.fields_by_name if request is not None else {}
        return any(name in fields and getattr(request, name) for name in _IDEMPOTENCY_KEYS)
    return True

"""Retention policies: RetentionService (Get/UpdateRetentionPolicy), and the sweep that deletes
what a policy says to, as DeleteExecution does (a tombstone, then the cleanup queue)."""

from __future__ import annotations

import logging
from typing import Any

from google.protobuf.duration_pb2 import Duration

from service_runtime.callers import require_user
from service_runtime.errors import FieldViolations, failed_precondition
from texera.lake.v1 import retention_service_pb2, retention_service_pb2_grpc
from warehouse_service.api.validation import check_uuid
from warehouse_service.domain.permissions import Role
from warehouse_service.mode_rules import ModeRules
from warehouse_service.store import memberships, retention_store
from warehouse_service.store.db import Database, Record

log = logging.getLogger("warehouse_service.api.retention")
rs = retention_service_pb2

MIN_AGE_SECONDS = 60
MAX_KEEP_LAST = 100_000
_MASKABLE = ("max_age", "keep_last")


def policy_message(warehouse_id: str, row: Record | None) -> rs.RetentionPolicy:
    policy = rs.RetentionPolicy(warehouse_id=warehouse_id)
    if row is not None:
        if row["max_age_seconds"] is not None:
            policy.max_age.CopyFrom(Duration(seconds=row["max_age_seconds"]))
        policy.keep_last = row["keep_last"] or 0
        policy.update_time.FromDatetime(row["updated_at"])
    return policy


def check_policy(request: rs.UpdateRetentionPolicyRequest) -> list[str]:
    """The fields to change (mask paths), once the request is valid; INVALID_ARGUMENT naming
    each bad field otherwise."""
    violations = FieldViolations()
    policy = request.policy
    check_uuid(violations, policy.warehouse_id, "policy.warehouse_id")
    paths = list(request.update_mask.paths) or list(_MASKABLE)
    for index, path in enumerate(paths):
        violations.check(
            path in _MASKABLE,
            f"update_mask.paths[{index}]",
            f"{path!r} cannot be updated; only {', '.join(_MASKABLE)}",
        )
    age = policy.max_age
    violations.check(
        age.nanos == 0 and (age.seconds == 0 or age.seconds >= MIN_AGE_SECONDS),
        "policy.max_age",
        f"must be 0 (no limit) or whole seconds, at least {MIN_AGE_SECONDS}",
    )
    violations.check(
        0 <= policy.keep_last <= MAX_KEEP_LAST,
        "policy.keep_last",
        f"must be 0 (no limit) to {MAX_KEEP_LAST}",
    )
    violations.raise_if_any()
    return paths


class RetentionServicer(retention_service_pb2_grpc.RetentionServiceServicer):
    def __init__(self, db: Database, rules: ModeRules) -> None:
        self._db = db
        self._rules = rules

    async def GetRetentionPolicy(
        self, request: rs.GetRetentionPolicyRequest, context: Any
    ) -> rs.GetRetentionPolicyResponse:
        self._rules.refuse("GetRetentionPolicy")
        user = require_user().user_id
        violations = FieldViolations()
        check_uuid(violations, request.warehouse_id, "warehouse_id")
        violations.raise_if_any()
        async with self._db.connection() as connection:
            await memberships.warehouse_as(connection, request.warehouse_id, user, Role.READER)
            row = await retention_store.policy(connection, request.warehouse_id)
        return rs.GetRetentionPolicyResponse(policy=policy_message(request.warehouse_id, row))

    async def UpdateRetentionPolicy(
        self, request: rs.UpdateRetentionPolicyRequest, context: Any
    ) -> rs.UpdateRetentionPolicyResponse:
        self._rules.refuse("UpdateRetentionPolicy")
        user = require_user().user_id
        paths = check_policy(request)
        warehouse_id = request.policy.warehouse_id
        async with self._db.transaction() as connection:
            warehouse, _ = await memberships.warehouse_as(
                connection, warehouse_id, user, Role.OWNER, lock=True
            )
            if warehouse["state"] in ("DELETING", "DELETED"):
                raise failed_precondition(
                    f"warehouse {warehouse_id} is {warehouse['state'].lower()}",
                    reason=f"WAREHOUSE_{warehouse['state']}",
                )
            old = await retention_store.policy(connection, warehouse_id)
            max_age = old["max_age_seconds"] if old else None
            keep_last = old["keep_last"] if old else None
            if "max_age" in paths:
                max_age = request.policy.max_age.seconds or None
            if "keep_last" in paths:
                keep_last = request.policy.keep_last or None
            row = await retention_store.save_policy(connection, warehouse_id, max_age, keep_last)
        log.info(
            "retention policy changed",
            extra={
                "warehouse_id": warehouse_id,
                "max_age_seconds": max_age,
                "keep_last": keep_last,
            },
        )
        return rs.UpdateRetentionPolicyResponse(policy=policy_message(warehouse_id, row))


class RetentionSweep:
    """Tombstones what the policies say to delete, a batch at a time (the scheduler runs a pass
    every interval); the cleanup queue drops their tables. Repeating a pass changes nothing: a
    tombstoned execution is no longer a candidate."""

    def __init__(self, db: Database, *, batch: int = 100) -> None:
        self._db = db
        self._batch = batch

    async def apply(self) -> int:
        """One pass; how many executions it deleted."""
        total = 0
        while True:
            async with self._db.transaction() as connection:
                due = await retention_store.due_by_policy(connection, self._batch)
                deleted = await retention_store.mark_deleted(connection, due)
            for execution_id in deleted:
                log.info(
                    "execution deleted by retention policy", extra={"execution_id": execution_id}
                )
            total += len(deleted)
            if len(due) < self._batch or not deleted:
                return total

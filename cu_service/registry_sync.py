"""Keeping the registry's ledger up to date with an execution's view, one task per execution.

The latest view goes to the registry at most once a second, changes meanwhile coalesced; a
final state goes at once, since callers wait for it, and is sent again until the registry has
recorded it. Only then is it shown, as the registry recorded it.

The ledger's word is final: if the registry ended the execution itself (it failed it when this
unit's lease lapsed), the run is cancelled and what is shown is the ledger's record, even when
the run had succeeded here. Its results are then the registry's to drop, like any failed
execution's; the unit never shows a state the ledger does not hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import grpc

from cu_service.execution_view import LocalExecution
from cu_service.registry import RegistryClient
from service_runtime.errors import ServiceError
from service_runtime.execution_states import TERMINAL
from texera.lake.v1 import execution_pb2

log = logging.getLogger("cu_service.registry_sync")

#: Between reports of the same execution, unless its final state was decided meanwhile.
REPORT_INTERVAL_SECONDS = 1.0
#: After a report the registry did not take.
REPORT_RETRY_SECONDS = 2.0

Cancel = Callable[[LocalExecution, str], Awaitable[object]]


async def sync_with_registry(
    local: LocalExecution, registry: RegistryClient, cancel: Cancel
) -> None:
    """Sends local's latest view to registry until it has recorded the final state, then shows
    the registry's record of it. If the registry ended the execution itself, cancel(local,
    why) stops the run, and its end is only shown here."""
    registry_ended = False
    while True:
        await local.dirty.wait()
        local.dirty.clear()
        sent = recorded = local.final or local.snapshot()
        if registry_ended and sent.state in TERMINAL:
            try:
                recorded = await _ledger_record(registry, sent)
            except ServiceError as exc:
                await _again_shortly(local, "read the registry's record", exc)
                continue
        elif not registry_ended:
            try:
                # The ledger's record, as GetExecution answers once the execution ended.
                recorded = await registry.report(
                    sent.execution_id,
                    sent.state,
                    error=sent.error if sent.HasField("error") else None,
                    outputs=list(sent.outputs),
                    progress=sent.progress,
                )
            except ServiceError as exc:
                if exc.code == grpc.StatusCode.FAILED_PRECONDITION:
                    # The registry ended it (this unit's lease lapsed): its word is final.
                    registry_ended = True
                    await cancel(local, "the registry ended the execution: " + exc.message)
                    local.dirty.set()
                    continue
                await _again_shortly(local, "report to the registry", exc)
                continue
        if sent.state in TERMINAL:
            local.show(recorded)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(local.decided.wait(), REPORT_INTERVAL_SECONDS)


async def _again_shortly(local: LocalExecution, what: str, error: ServiceError) -> None:
    """Logs that what failed, and has the loop try again after a pause."""
    log.warning(
        f"could not {what}; retrying",
        extra={"execution_id": local.execution.execution_id, "code": error.code.name},
    )
    local.dirty.set()
    await asyncio.sleep(REPORT_RETRY_SECONDS)


async def _ledger_record(
    registry: RegistryClient, ended_here: execution_pb2.Execution
) -> execution_pb2.Execution:
    """The ledger's record of an execution the registry ended itself (the unit's own final
    view if the ledger's is not final: it never waits on a state that will not come)."""
    recorded = (await registry.resolve_execution(ended_here.execution_id)).execution
    if recorded.state not in TERMINAL:
        return ended_here
    if recorded.state != ended_here.state:
        log.error(
            "the registry ended the execution before this unit's final state reached it; the "
            "ledger's state stands",
            extra={
                "execution_id": ended_here.execution_id,
                "here": execution_pb2.ExecutionState.Name(ended_here.state),
                "ledger": execution_pb2.ExecutionState.Name(recorded.state),
                "reason": recorded.error.reason,
            },
        )
    return recorded

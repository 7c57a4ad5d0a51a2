"""Keeping the registry's ledger up to date with an execution's view, one task per execution.

The latest view goes to the registry at most once a second, changes meanwhile coalesced; a
final state goes at once, since callers wait for it, and is sent again until the registry has
recorded it. Only then is it shown, as the registry recorded it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import grpc

from cu_service.execution_view import LocalExecution
from cu_service.registry import RegistryClient
from lake_client.executions import TERMINAL
from service_runtime.errors import ServiceError

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
        if not registry_ended:
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
                log.warning(
                    "could not report to the registry; retrying",
                    extra={"execution_id": sent.execution_id, "code": exc.code.name},
                )
                local.dirty.set()
                await asyncio.sleep(REPORT_RETRY_SECONDS)
                continue
        if sent.state in TERMINAL:
            local.show(recorded)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(local.decided.wait(), REPORT_INTERVAL_SECONDS)

"""Keeping this computing unit registered: register at start, then heartbeat.

A heartbeat the registry refuses with NOT_FOUND means the lease lapsed (the
registry could not be reached for too long, say) and the registry has failed
this unit's unfinished executions: they are cancelled here too, and the unit
registers again.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from cu_service.manager import ExecutionManager
from cu_service.registry import RegistryClient
from service_runtime.errors import ServiceError

log = logging.getLogger("cu_service.lease")


async def register(
    registry: RegistryClient, endpoint: str, capacity: int, retry_seconds: float = 2.0
) -> float:
    """Registers, retrying while the registry is unavailable; returns the heartbeat interval."""
    while True:
        try:
            response = await registry.register(endpoint, capacity)
        except ServiceError as exc:
            if exc.code != grpc.StatusCode.UNAVAILABLE:
                raise
            log.warning("the registry is unavailable; registering again shortly")
            await asyncio.sleep(retry_seconds)
            continue
        log.info("registered", extra={"computing_unit_id": registry.unit_id, "endpoint": endpoint})
        return max(response.heartbeat_interval.ToTimedelta().total_seconds(), 0.2)


async def heartbeat_forever(
    registry: RegistryClient,
    manager: ExecutionManager,
    endpoint: str,
    capacity: int,
    interval: float,
) -> None:
    while True:
        await asyncio.sleep(interval)
        running, queued = manager.counts()
        try:
            await registry.heartbeat(running, queued)
        except ServiceError as exc:
            if exc.code == grpc.StatusCode.NOT_FOUND:
                log.error(
                    "the lease lapsed: cancelling this unit's executions and registering again"
                )
                await manager.cancel_all("the computing unit lost its lease with the registry")
                interval = await register(registry, endpoint, capacity)
            else:
                log.warning("heartbeat failed", extra={"code": exc.code.name})

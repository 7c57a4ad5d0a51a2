"""Runs a computing unit: ``texera-lake-cu-service``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable

from pyspark.sql import SparkSession

from catalog_map.settings import new_catalog_map
from cu_service.lease import heartbeat_forever, register
from cu_service.manager import ExecutionManager
from cu_service.registry import RegistryClient
from cu_service.servicer import ExecutionServicer, UnitParts
from cu_service.settings import ComputingUnitSettings
from cu_service.spark import start_spark
from service_runtime.server import ServiceBinding, ServiceProcess, run_service

log = logging.getLogger("cu_service")


def build() -> ServiceProcess:
    settings = ComputingUnitSettings.from_env()
    parts = UnitParts()
    background: list[asyncio.Task[None]] = []
    closers: list[Callable[[], None]] = []

    sessions: list[SparkSession] = []

    def prepare() -> None:
        # Spark's workers inherit this environment and run users' Python: secrets, read into
        # the settings already, leave it first, and their files go (where they may).
        for variable in settings.secret_variables():
            os.environ.pop(variable, None)
            secret_file = os.environ.pop(f"{variable}_FILE", None)
            if secret_file:
                with contextlib.suppress(OSError):
                    os.unlink(secret_file)
        sessions.append(start_spark(settings))

    async def start() -> None:
        [spark] = sessions
        registry = RegistryClient(
            settings.registry_target, settings.computing_unit_id, settings.credential
        )
        catalogs = new_catalog_map(settings, registry)
        manager = ExecutionManager(spark, registry, catalogs, settings)
        closers.extend([spark.stop, catalogs.close])
        endpoint = settings.address(settings.port)
        interval = await register(registry, endpoint, settings.capacity)
        parts.manager, parts.registry = manager, registry
        background.append(
            asyncio.create_task(
                heartbeat_forever(registry, manager, endpoint, settings.capacity, interval)
            )
        )
        background.append(asyncio.create_task(_every(1.0, manager.sample_progress)))

    async def stop() -> None:
        if parts.manager is not None:
            await parts.manager.close()
        for task in background:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if parts.registry is not None:
            await parts.registry.close()
        for close in reversed(closers):
            close()

    return ServiceProcess(
        name="cu-service",
        settings=settings,
        services=[ServiceBinding.of(ExecutionServicer(parts))],
        prepare=prepare,
        on_start=start,
        on_stop=stop,
    )


async def _every(seconds: float, action: Callable[[], Awaitable[None] | None]) -> None:
    while True:
        await asyncio.sleep(seconds)
        try:
            outcome = action()
            if outcome is not None:
                await outcome
        except Exception:
            log.exception("periodic task failed")


def main() -> None:
    run_service("cu-service", build)


if __name__ == "__main__":
    main()

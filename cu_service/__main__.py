"""Runs a computing unit: ``texera-lake-cu-service``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from functools import partial

from pyspark.sql import SparkSession

from catalog_map.backends import CatalogFactory
from cu_service import pyspark_private
from cu_service.execution_catalog import ExecutionCatalogs, gatekeeper_trust
from cu_service.idle_python import IdlePython
from cu_service.lease import HeartbeatThread, register
from cu_service.manager import ExecutionManager
from cu_service.pooled_start import start_pooled
from cu_service.registry import RegistryClient, UnitCredential
from cu_service.servicer import ExecutionServicer, UnitParts
from cu_service.spark import is_local, jobs_running, start_spark, worker_confinement
from cu_service.warm_up import WarmUp
from cu_service.worker_daemon import Confinement
from service_runtime.config import ConfigError
from service_runtime.internal_tokens import mesh_authenticator, unit_audience
from service_runtime.server import ServiceBinding, ServiceProcess, run_service
from service_runtime.through_gateway import ThroughGateway
from service_runtime.tls.caller_rules import UNIT_RULES, caller_rules
from service_runtime.tls.held_certificate import HeldCertificate
from service_runtime.tls.mesh_client import MeshClientTls
from service_runtime.tls.server_credentials import CertificateFiles
from unit_launcher.unit_settings import ComputingUnitSettings

log = logging.getLogger("cu_service")


def build() -> ServiceProcess:
    # A pooled unit starts Spark first and learns which unit it is afterwards.
    pooled = start_pooled(ComputingUnitSettings.from_env())
    settings = ComputingUnitSettings.from_env()
    # Read now: prepare() removes the keys' files before users' code runs.
    tls = MeshClientTls.from_settings(settings)
    certificate = held_certificate(settings)
    parts = UnitParts()
    background: list[asyncio.Task[None]] = []
    closers: list[Callable[[], None]] = []

    sessions: list[SparkSession] = []
    confinement: list[Confinement] = []

    def prepare() -> None:
        # Users' code runs as this unit's OS user: the secret files, read into the settings
        # already, go before Spark starts (where the unit may remove them).
        for variable in settings.secret_file_variables():
            if path := os.environ.pop(variable, None):
                with contextlib.suppress(OSError):
                    os.unlink(path)
        if pooled is not None:
            confinement.append(pooled.confinement)
            sessions.append(pooled.spark)
        else:
            confinement.append(worker_confinement(settings))
            sessions.append(start_spark(settings, confinement[0]))

    credential = UnitCredential(settings.credential)

    def new_registry() -> RegistryClient:
        return RegistryClient(settings.registry, settings.computing_unit_id, credential, tls=tls)

    async def start() -> None:
        [spark] = sessions
        registry = new_registry()
        catalogs = ExecutionCatalogs(
            registry,
            CatalogFactory(
                sql_warehouse=settings.sql_warehouse(),
                catalog_trust=gatekeeper_trust(tls),
                storage_io=settings.storage_io_properties(),
            ),
        )
        manager = ExecutionManager(spark, registry, catalogs, settings, tls=tls)
        closers.append(spark.stop)
        endpoint = settings.address(settings.port)
        # Sandboxed tasks of a unit that shares its OS user could still read that user's files;
        # an unbounded unit's processes could outlive it and hold memory without bound.
        confined = (
            confinement[0].sandboxed and not settings.shares_os_user and settings.processes_bounded
        )
        interval = await register(registry, endpoint, settings.capacity, workers_confined=confined)
        parts.manager, parts.registry = manager, registry
        heartbeat = HeartbeatThread(
            new_registry,
            manager,
            endpoint,
            settings.capacity,
            interval,
            workers_confined=confined,
            certificate=certificate,
        )
        heartbeat.start()
        closers.append(heartbeat.stop)
        warm_up = WarmUp(spark, manager.activity, settings.warm_up_jobs)
        warm_up.start()
        closers.append(warm_up.stop)
        background.append(asyncio.create_task(_every(1.0, manager.sample_progress)))
        # On a cluster the executors' daemons are the cluster's; in local mode they are ours.
        if settings.python_idle_seconds > 0 and is_local(settings.spark_master):
            idle = IdlePython(
                manager.activity,
                lambda: warm_up.running or jobs_running(spark),
                partial(pyspark_private.stop_python_daemons, spark),
                settings.python_idle_seconds,
            )
            background.append(asyncio.create_task(_every(1.0, idle.check)))

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
        authenticator=ThroughGateway(
            mesh_authenticator(settings, unit_audience(settings.computing_unit_id))
        ),
        services=[ServiceBinding.of(ExecutionServicer(parts))],
        prepare=prepare,
        on_start=start,
        on_stop=stop,
        extra_interceptors=caller_rules(settings, UNIT_RULES),
        certificate=certificate,
    )


def held_certificate(settings: ComputingUnitSettings) -> HeldCertificate | None:
    """The certificate the unit serves TLS with, read into memory; None: plaintext."""
    if not settings.tls_certificate:
        return None
    files = CertificateFiles(settings.tls_certificate, settings.tls_key, settings.tls_client_ca)
    try:
        return HeldCertificate.from_files(files)
    except ValueError as exc:
        raise ConfigError(f"cannot serve TLS: {exc}") from exc


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

"""Runs the warehouse registry: ``texera-lake-warehouse-service``."""

from __future__ import annotations

import dataclasses
import os
from functools import partial

from catalog_map.platform import SqlWarehouse
from service_runtime.call_steps import PUBLIC_SERVICES
from service_runtime.endpoint_guard import EndpointGuard
from service_runtime.http_server import HttpServer
from service_runtime.internal_tokens import MESH_AUDIENCE, mesh_authenticator
from service_runtime.server import ServiceBinding, ServiceProcess, run_service
from service_runtime.tls.caller_rules import REGISTRY_RULES, caller_rules
from service_runtime.tls.peers import CallCheck
from service_runtime.tls.server_credentials import CertificateFiles
from unit_launcher.cpu_groups import cpu_groups_for
from unit_launcher.factory import launcher_named
from unit_launcher.unit_groups import unit_groups_for
from warehouse_service import platform_warehouse, wiring
from warehouse_service.api.computing_units import ComputingUnitServicer
from warehouse_service.api.execution_deletion import ExecutionDeletionServicer
from warehouse_service.api.retention import RetentionServicer, RetentionSweep
from warehouse_service.api.warehouses import WarehouseServicer
from warehouse_service.background.cleaner import ExecutionPurge
from warehouse_service.background.due_work import Pacing
from warehouse_service.background.leases import LeaseSweep
from warehouse_service.background.maintenance import TableMaintenance
from warehouse_service.background.queue_worker import QueueWorker
from warehouse_service.background.reader_grants import grant_existing
from warehouse_service.background.scheduler import Scheduler
from warehouse_service.background.usage_meter import UsageMeter
from warehouse_service.catalog.catalog_client import CatalogClient
from warehouse_service.catalog.sql_catalog_tables import SqlCatalogTables
from warehouse_service.catalog_modes import CatalogMode
from warehouse_service.gatekeeper.access import ExecutionCatalogs
from warehouse_service.gatekeeper.app import Gatekeeper
from warehouse_service.gatekeeper.tokens import GatekeeperTokens
from warehouse_service.internal.execution_credential_service import ExecutionCredentialServicer
from warehouse_service.internal.execution_tokens import ExecutionTokens
from warehouse_service.internal.ledger import LedgerServicer
from warehouse_service.internal.unit_lease_service import UnitLeaseServicer
from warehouse_service.mode_rules import rules_for
from warehouse_service.settings import WarehouseServiceSettings
from warehouse_service.store.db import Database
from warehouse_service.store.gatekeeper import GatekeeperStore
from warehouse_service.store.unit_launches import UnitLaunches
from warehouse_service.store.work_queue import Queue
from warehouse_service.units.unit_certificates import UnitCertificates
from warehouse_service.units.unit_credentials import UnitCredentials
from warehouse_service.units.unit_pool import UnitPool
from warehouse_service.units.unit_port import spark_cluster_secret, unit_port, unit_trust
from warehouse_service.units.unit_supervisor import UnitSupervisor, unit_settings

#: How often the unit supervisor looks over the units.
UNIT_CHECK_SECONDS = 1.0


def build() -> ServiceProcess:
    settings = WarehouseServiceSettings.from_env()
    rules = rules_for(settings.mode)  # the one place the catalog mode is decided
    db = Database(
        settings.database_url,
        settings.database_pool_size,
        ssl_context=wiring.database_ssl_context(settings),
    )
    catalog = wiring.catalog_client(settings)
    credentials = UnitCredentials(settings.signing_key, settings.unit_credential_seconds)
    launches = UnitLaunches(db)
    certificates = wiring.unit_certificates(settings)
    supervisor = unit_supervisor(settings, db, credentials, launches, certificates)
    guard = endpoint_guard(settings)
    storage_io = settings.storage_io_properties()
    sql_warehouse = registry_sql_warehouse(settings, storage_io)
    scheduler = background_work(
        settings,
        db,
        catalog=catalog,
        supervisor=supervisor,
        guard=guard,
        storage_io=storage_io,
        sql_warehouse=sql_warehouse,
    )
    warehouses = WarehouseServicer(
        db,
        catalog,
        settings.page_token_key,
        delete_wait_seconds=settings.delete_wait_seconds,
        endpoint_guard=guard,
        rules=rules,
    )
    gatekeeper_tokens = GatekeeperTokens(settings.signing_key, settings.gatekeeper_token_seconds)
    gatekeeper = gatekeeper_server(settings, gatekeeper_tokens, db, catalog)

    async def start() -> None:
        await catalog.open()
        await db.open()
        await prepare_platform(settings, warehouses)
        scheduler.start()
        if gatekeeper is not None:
            await gatekeeper.start()

    async def stop() -> None:
        if gatekeeper is not None:
            await gatekeeper.stop()
        await scheduler.stop()
        await supervisor.close()
        await catalog.close()
        await db.close()

    internal = [
        LedgerServicer(
            db,
            catalog,
            page_token_key=settings.page_token_key,
            catalog_uri=settings.catalog_uri,
            project_id=settings.catalog_project_id,
            supervisor=supervisor,
            rules=rules,
        ),
        UnitLeaseServicer(
            db,
            supervisor,
            page_token_key=settings.page_token_key,
            heartbeat_interval_seconds=settings.heartbeat_interval_seconds,
            lease_seconds=settings.lease_seconds,
            unit_credentials=credentials,
            unit_certificates=certificates,
        ),
        ExecutionCredentialServicer(
            db,
            catalog,
            ExecutionTokens(settings.signing_key, settings.execution_token_max_seconds),
            ExecutionCatalogs(db, gatekeeper_tokens, settings.gatekeeper_address(), rules),
        ),
    ]
    authenticator = mesh_authenticator(
        settings, MESH_AUDIENCE, with_units=True, with_executions=True
    )
    return ServiceProcess(
        name="warehouse-service",
        settings=settings,
        authenticator=authenticator,
        services=[
            ServiceBinding.of(warehouses),
            *map(ServiceBinding.of, internal),
            ServiceBinding.of(ComputingUnitServicer(db, supervisor, settings.page_token_key)),
            # Only DeleteExecution: the base class answers UNIMPLEMENTED for the units' methods.
            ServiceBinding.of(ExecutionDeletionServicer(db, rules)),  # type: ignore[abstract]
            ServiceBinding.of(RetentionServicer(db, rules)),
        ],
        on_start=start,
        on_stop=stop,
        extra_interceptors=[
            *caller_rules(settings, REGISTRY_RULES),
            CallCheck(launches.check, PUBLIC_SERVICES),
        ],
        companions=unit_port(settings, internal, authenticator, launches),
    )


async def prepare_platform(
    settings: WarehouseServiceSettings, warehouses: WarehouseServicer
) -> None:
    """A global mode's platform warehouse, made or found (and its SQL catalog's tables)."""
    if settings.mode is CatalogMode.GLOBAL_SQL:
        await platform_warehouse.prepare_sql_catalog(settings)
    if settings.mode.is_global:
        await warehouses.create_platform(platform_warehouse.create_request(settings))


def background_work(
    settings: WarehouseServiceSettings,
    db: Database,
    *,
    catalog: CatalogClient,
    supervisor: UnitSupervisor,
    guard: EndpointGuard,
    storage_io: dict[str, str],
    sql_warehouse: SqlWarehouse | None,
) -> Scheduler:
    """The registry's background jobs: leases swept, units checked, the cleanup and
    maintenance queues worked, usage read, retention applied, readers granted at start."""
    scheduler = Scheduler()
    leases = LeaseSweep(db, lease_seconds=settings.lease_seconds)

    async def sweep_leases() -> None:
        await leases.sweep()

    heartbeat = settings.heartbeat_interval_seconds
    scheduler.every("lease sweep", sweep_leases, heartbeat, first_after_seconds=heartbeat)
    scheduler.every(
        "unit check", supervisor.check, UNIT_CHECK_SECONDS, first_after_seconds=UNIT_CHECK_SECONDS
    )
    if supervisor.pool is not None:
        scheduler.every("unit pool refill", supervisor.pool.refill, UNIT_CHECK_SECONDS)
    # Where the registry's background work reaches an execution's tables.
    tables = SqlCatalogTables(sql_warehouse) if sql_warehouse else catalog
    queue_worker = partial(
        QueueWorker,
        db,
        interval_seconds=settings.cleanup_interval_seconds,
        max_backoff_seconds=settings.cleanup_max_backoff_seconds,
        hold_seconds=settings.cleanup_hold_seconds,
    )
    cleaner = queue_worker(Queue.CLEANUP, ExecutionPurge(tables, guard, storage_io))
    scheduler.every(Queue.CLEANUP.prefix, cleaner.work_due, settings.cleanup_interval_seconds)
    pacing = Pacing(
        settings.usage_interval_seconds,
        settings.usage_max_backoff_seconds,
        batch=50,
        hold_seconds=settings.cleanup_hold_seconds,
    )
    meter = UsageMeter(db, tables, pacing)
    scheduler.every(
        "usage reading", meter.measure_and_publish, pacing.interval_seconds, batch=pacing.batch
    )
    if sql_warehouse is None:  # expiring snapshots commits through the REST catalog
        maintainer = queue_worker(
            Queue.MAINTENANCE,
            TableMaintenance(
                db,
                catalog,
                guard,
                margin_seconds=settings.orphan_margin_seconds,
                storage_io=storage_io,
            ),
            settled_seconds=settings.orphan_margin_seconds,
        )
        scheduler.every(
            Queue.MAINTENANCE.prefix, maintainer.work_due, settings.cleanup_interval_seconds
        )
    retention = RetentionSweep(db)
    scheduler.every("retention", retention.apply, settings.retention_interval_seconds)
    if settings.catalog_reader_client_id and sql_warehouse is None:
        scheduler.once("reader grants", partial(grant_existing, db, catalog))
    return scheduler


def endpoint_guard(settings: WarehouseServiceSettings) -> EndpointGuard:
    """The storage endpoints warehouses may not name, and the exceptions allowed."""
    # The platform warehouse's endpoint is the operator's, not a user's: it may be internal.
    platform_endpoint = settings.platform_endpoint if settings.mode.is_global else ""
    return EndpointGuard.from_setting(
        ",".join(filter(None, (settings.allowed_storage_endpoints, platform_endpoint)))
    )


def registry_sql_warehouse(
    settings: WarehouseServiceSettings, storage_io: dict[str, str]
) -> SqlWarehouse | None:
    """The platform's SQL catalog in global-sql, its files reached with storage_io too."""
    sql_warehouse = settings.sql_warehouse() if settings.mode is CatalogMode.GLOBAL_SQL else None
    if sql_warehouse is None:
        return None
    io = {**storage_io, **sql_warehouse.file_io_properties}
    return dataclasses.replace(sql_warehouse, file_io_properties=io)


def unit_supervisor(
    settings: WarehouseServiceSettings,
    db: Database,
    credentials: UnitCredentials,
    launches: UnitLaunches,
    certificates: UnitCertificates | None,
) -> UnitSupervisor:
    """Starts, watches and stops the computing units, with the launcher the settings name
    (and the warm pool they ask for)."""
    local = settings.unit_launcher == "process"
    # First: ending what earlier registries' units left lets their empty cpu groups go next.
    unit_groups = unit_groups_for(settings.unit_max_processes) if local else None
    cpu_groups = (
        cpu_groups_for(settings.unit_cpu_groups, settings.variable_of("unit_cpu_groups"))
        if local
        else None
    )
    launcher = launcher_named(
        settings.unit_launcher,
        root=settings.unit_folder,
        host=settings.host,
        advertised_host=settings.unit_advertised_host,
        cpu_groups=cpu_groups,
        unit_groups=unit_groups,
    )
    launch_settings = {
        **unit_settings(os.environ),
        **(certificates.unit_settings() if certificates else {}),
    }
    pool = (
        UnitPool(
            launcher,
            launch_settings,
            settings.pool_classes(),
            settings.unit_pool_size,
            warm_timeout_seconds=settings.unit_start_timeout_seconds,
        )
        if settings.unit_pool_size
        else None
    )
    return UnitSupervisor(
        db,
        launcher,
        credentials=credentials,
        launches=launches,
        settings=launch_settings,
        shared_secrets={
            **(settings.sql_catalog_secrets() if settings.mode is CatalogMode.GLOBAL_SQL else {}),
            **unit_trust(settings),
            **spark_cluster_secret(os.environ),
        },
        idle_seconds=settings.unit_idle_seconds,
        start_timeout_seconds=settings.unit_start_timeout_seconds,
        default_cores=settings.unit_default_cores,
        default_memory_mib=settings.unit_default_memory_mib,
        share_unconfined=settings.share_unconfined_units,
        certificates=certificates,
        pool=pool,
    )


def gatekeeper_server(
    settings: WarehouseServiceSettings,
    tokens: GatekeeperTokens,
    db: Database,
    catalog: CatalogClient,
) -> HttpServer | None:
    """The catalog gatekeeper's server (none in global-sql: units reach the SQL catalog)."""
    if settings.mode is CatalogMode.GLOBAL_SQL:
        return None
    certificate = (
        CertificateFiles(settings.tls_certificate, settings.tls_key)
        if settings.tls_certificate
        else None
    )
    app = Gatekeeper(tokens, GatekeeperStore(db), catalog).application()
    return HttpServer(
        app, settings.host, settings.gatekeeper_port, certificate, "the catalog gatekeeper"
    )


def main() -> None:
    run_service("warehouse-service", build)


if __name__ == "__main__":
    main()

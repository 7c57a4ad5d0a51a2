"""Runs the warehouse registry: ``texera-lake-warehouse-service``."""

from __future__ import annotations

from service_runtime.server import ServiceProcess, run_service
from texera.lake.v1 import registry_service_pb2, warehouse_service_pb2
from warehouse_service.settings import WarehouseServiceSettings


def build() -> ServiceProcess:
    return ServiceProcess(
        name="warehouse-service",
        settings=WarehouseServiceSettings.from_env(),
        pending_services=[
            warehouse_service_pb2.DESCRIPTOR.services_by_name["WarehouseService"],
            registry_service_pb2.DESCRIPTOR.services_by_name["RegistryService"],
        ],
    )


def main() -> None:
    run_service("warehouse-service", build)


if __name__ == "__main__":
    main()

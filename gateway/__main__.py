"""Runs the gateway: ``texera-lake-gateway``."""

from __future__ import annotations

from gateway.settings import GatewaySettings
from service_runtime.server import ServiceProcess, run_service
from texera.lake.v1 import execution_service_pb2, result_service_pb2, warehouse_service_pb2


def build() -> ServiceProcess:
    return ServiceProcess(
        name="gateway",
        settings=GatewaySettings.from_env(),
        pending_services=[
            warehouse_service_pb2.DESCRIPTOR.services_by_name["WarehouseService"],
            execution_service_pb2.DESCRIPTOR.services_by_name["ExecutionService"],
            result_service_pb2.DESCRIPTOR.services_by_name["ResultService"],
        ],
    )


def main() -> None:
    run_service("gateway", build)


if __name__ == "__main__":
    main()

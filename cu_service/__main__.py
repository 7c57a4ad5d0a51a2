"""Runs a computing unit: ``texera-lake-cu-service``."""

from __future__ import annotations

from cu_service.settings import ComputingUnitSettings
from service_runtime.server import ServiceProcess, run_service
from texera.lake.v1 import execution_service_pb2


def build() -> ServiceProcess:
    return ServiceProcess(
        name="cu-service",
        settings=ComputingUnitSettings.from_env(),
        pending_services=[execution_service_pb2.DESCRIPTOR.services_by_name["ExecutionService"]],
    )


def main() -> None:
    run_service("cu-service", build)


if __name__ == "__main__":
    main()

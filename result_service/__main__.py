"""Runs the result service: ``texera-lake-result-service``."""

from __future__ import annotations

from result_service.settings import ResultServiceSettings
from service_runtime.server import ServiceProcess, run_service
from texera.lake.v1 import result_service_pb2


def build() -> ServiceProcess:
    return ServiceProcess(
        name="result-service",
        settings=ResultServiceSettings.from_env(),
        pending_services=[result_service_pb2.DESCRIPTOR.services_by_name["ResultService"]],
    )


def main() -> None:
    run_service("result-service", build)


if __name__ == "__main__":
    main()

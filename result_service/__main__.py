"""Runs the result service: ``texera-lake-result-service``."""

from __future__ import annotations

from result_service.servicer import ResultServicer
from result_service.settings import ResultServiceSettings
from service_runtime.internal_tokens import MESH_AUDIENCE, mesh_authenticator
from service_runtime.server import ServiceBinding, ServiceProcess, run_service
from service_runtime.tls.caller_rules import RESULT_RULES, caller_rules


def build() -> ServiceProcess:
    settings = ResultServiceSettings.from_env()
    servicer = ResultServicer(settings)
    return ServiceProcess(
        name="result-service",
        settings=settings,
        authenticator=mesh_authenticator(settings, MESH_AUDIENCE),
        services=[ServiceBinding.of(servicer)],
        on_start=servicer.start,
        on_stop=servicer.stop,
        extra_interceptors=caller_rules(settings, RESULT_RULES),
    )


def main() -> None:
    run_service("result-service", build)


if __name__ == "__main__":
    main()

"""The registry's second port, for the callers that present no client certificate: computing
units (whose certificate, renewed in memory, serves their own port only) and their executions'
Spark tasks (which never hold one: they run beside users' code).

gRPC Python cannot make a client certificate optional on a port: one that requires them
refuses those callers in the handshake. So with client certificates required on the main
port, the registry serves ``WAREHOUSE_UNIT_PORT`` too: TLS with the same certificate, no
client certificate asked, only the registry's internal services, and only the tokens the
registry issues itself (a unit's credential, alone or carrying a user's token minted for that
unit, and an execution's token). The gateway's and users' tokens are refused there, so the services only
the gateway may call stay behind mutual TLS. Units reach it with the CA bundle the registry
hands each unit it launches, and verify the registry's certificate against it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from service_runtime.auth import Authenticator
from service_runtime.call_steps import PUBLIC_SERVICES
from service_runtime.config import ConfigError, read_setting_file
from service_runtime.context import identity_var
from service_runtime.errors import ServiceError
from service_runtime.server import ServiceBinding, ServiceProcess
from service_runtime.tls.peers import CallCheck
from unit_launcher.unit_settings import ComputingUnitSettings
from warehouse_service.settings import WarehouseServiceSettings
from warehouse_service.store.unit_launches import UnitLaunches
from warehouse_service.units.unit_certificates import unit_secret


def check_registry_issued(service: str, call: grpc.aio.ServicerContext[Any, Any]) -> None:
    """Raises ServiceError unless the call carries a token the registry issued: a unit's
    credential (alone or for a user) or an execution's token."""
    identity = identity_var.get()
    if identity is None:  # a public service (health, reflection): no token to check
        return
    unit = identity if identity.is_unit else identity.via
    if identity.is_execution or (unit is not None and unit.is_unit):
        return
    raise ServiceError(
        grpc.StatusCode.PERMISSION_DENIED,
        f"the registry's unit port takes only units' and executions' tokens, not a "
        f"{identity.role} token: call its main port with a client certificate",
        reason="PEER_NOT_ALLOWED",
    )


def unit_port(
    settings: WarehouseServiceSettings,
    internal: Sequence[object],
    authenticator: Authenticator,
    launches: UnitLaunches,
) -> list[ServiceProcess]:
    """The unit port's server, serving the registry's internal services (the servicers of
    texera.lake.internal.v1 in `internal`); none when not set."""
    if not settings.unit_port:
        return []
    port_settings = dataclasses.replace(
        settings,
        port=settings.unit_port,
        metrics_port=0,
        tls_require_client_certificate=False,
        tls_client_ca="",
        tls_allowed_peers="",
    )
    return [
        ServiceProcess(
            name="warehouse-service unit port",
            settings=port_settings,
            authenticator=authenticator,
            services=[ServiceBinding.of(servicer) for servicer in internal],
            extra_interceptors=[
                CallCheck(check_registry_issued, PUBLIC_SERVICES),
                CallCheck(launches.check, PUBLIC_SERVICES),
            ],
        )
    ]


def unit_trust(settings: WarehouseServiceSettings) -> dict[str, str]:
    """What each launched unit gets to verify the registry's TLS certificate and, when units
    are launched with certificates, its callers': the registry's own CA bundle, handed over as
    a file (by the unit's setting names); none without one."""
    if not settings.tls_ca_bundle:
        return {}
    name = settings.variable_of("tls_ca_bundle")
    try:
        ca_bundle = read_setting_file(settings.tls_ca_bundle, name, secret=False).decode()
    except ValueError as exc:
        raise ConfigError(f"cannot hand units the CA bundle: {exc}") from exc
    # Handed over as the launcher hands secrets: a file of the unit's, named by <variable>_FILE.
    uses = ["tls_ca_bundle", *(["tls_client_ca"] if settings.unit_issuer_certificate else [])]
    return {unit_secret(use): ca_bundle for use in uses}


def spark_cluster_secret(environ: Mapping[str, str]) -> dict[str, str]:
    """The secret of the Spark cluster that units run on, read from the file that
    TEXERA_LAKE_CU_SPARK_AUTH_SECRET_FILE names in the registry's environment, handed to each
    unit as a file of its own; none when units run Spark in their own JVM."""
    variable = ComputingUnitSettings.variable_of("spark_auth_secret")
    path = environ.get(variable, "")
    if not path:
        return {}
    try:
        secret = read_setting_file(path, variable, secret=True).decode().strip()
    except ValueError as exc:
        raise ConfigError(f"cannot hand units the Spark cluster's secret: {exc}") from exc
    return {unit_secret("spark_auth_secret"): secret}

"""Whether each public service can serve: the backends it needs answer their health checks."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2

from gateway.service import EXECUTIONS, ICEBERG_ACCESS, RESULTS, RETENTION, UNITS, WAREHOUSES
from gateway.units import UnitDirectory

#: How long a backend may take to answer its health check.
CHECK_SECONDS = 2.0


async def serving(channel: grpc.aio.Channel) -> bool:
    """The server behind channel reports SERVING."""
    check = channel.unary_unary(
        "/grpc.health.v1.Health/Check",
        request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
        response_deserializer=health_pb2.HealthCheckResponse.FromString,
    )
    try:
        answer = await check(health_pb2.HealthCheckRequest(), timeout=CHECK_SECONDS)
    except grpc.aio.AioRpcError:
        return False
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


async def readiness(
    warehouses: grpc.aio.Channel,
    results: grpc.aio.Channel,
    registry: grpc.aio.Channel,
    units: UnitDirectory,
) -> dict[str, bool]:
    """WarehouseService and ComputingUnitService need the warehouse service; ResultService the
    result service and the registry; ExecutionService the registry, which launches computing
    units on demand; IcebergAccessService the registry."""
    registry_up = await serving(registry)
    warehouses_up = await serving(warehouses)
    return {
        WAREHOUSES.full_name: warehouses_up,
        UNITS.full_name: warehouses_up,
        RETENTION.full_name: warehouses_up,
        RESULTS.full_name: registry_up and await serving(results),
        EXECUTIONS.full_name: registry_up and units.loaded,
        ICEBERG_ACCESS.full_name: registry_up,
    }

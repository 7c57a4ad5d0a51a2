"""A service process whose GetWarehouse takes two seconds, for the SIGTERM drain test.

It runs the real runtime (run_service: settings, interceptor, signals); only
its one handler is a test double.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import grpc

from service_runtime.auth import UserTokenVerifier
from service_runtime.config import ServerSettings, setting
from service_runtime.server import ServiceBinding, ServiceProcess, run_service
from texera.lake.v1 import warehouse_pb2, warehouse_service_pb2

SERVICE = "texera.lake.v1.WarehouseService"


@dataclass(frozen=True, repr=False)
class SlowSettings(ServerSettings):
    scope = "SLOW"
    port: int = setting("PORT", 0, "gRPC port.", scoped=True)
    jwt_secret: str = setting("JWT_SECRET", "", "Secret of callers' tokens.", secret=True)


async def slow_get(request: Any, call: grpc.aio.ServicerContext[Any, Any]) -> Any:
    await asyncio.sleep(2.0)
    return warehouse_service_pb2.GetWarehouseResponse(
        warehouse=warehouse_pb2.Warehouse(warehouse_id=request.warehouse_id)
    )


def add(servicer: object, server: grpc.aio.Server) -> None:
    handler: grpc.RpcMethodHandler[Any, Any] = grpc.unary_unary_rpc_method_handler(
        slow_get,
        request_deserializer=warehouse_service_pb2.GetWarehouseRequest.FromString,
        response_serializer=lambda message: message.SerializeToString(),
    )
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler(SERVICE, {"GetWarehouse": handler})]
    )


if __name__ == "__main__":

    def build() -> ServiceProcess:
        settings = SlowSettings.from_env()
        return ServiceProcess(
            name="slow",
            settings=settings,
            authenticator=UserTokenVerifier(settings.jwt_secret),
            services=[ServiceBinding(SERVICE, None, add)],
        )

    run_service("slow", build)

"""The registry calls made for the calling user: resolving warehouses and executions, listing
executions.

They go through the propagating channel, so they carry the user's token and the
registry checks the user's rights. Each is a read, repeated while the registry is
unavailable for a moment (a restart). Errors come back as ServiceError with the
registry's code and details.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from service_runtime.errors import ServiceError
from service_runtime.propagation import Credential, service_channel
from service_runtime.repeat import repeat_while_unavailable
from service_runtime.tls.mesh_client import MeshClientTls
from texera.lake.internal.v1 import registry_service_pb2, registry_service_pb2_grpc
from texera.lake.v1 import execution_service_pb2

T = TypeVar("T")
rs = registry_service_pb2


class RegistryReader:
    def __init__(
        self,
        target: str,
        timeout_seconds: float = 30.0,
        *,
        credential: Credential | None = None,
        tls: MeshClientTls | None = None,
    ) -> None:
        self._timeout = timeout_seconds
        self._channel = service_channel(target, credential=credential, tls=tls)
        self._stub = registry_service_pb2_grpc.ExecutionLedgerServiceStub(self._channel)

    @property
    def channel(self) -> grpc.aio.Channel:
        """The channel to the registry, for calls this reader does not make itself."""
        return self._channel

    async def close(self) -> None:
        await self._channel.close()

    async def _call(self, call: Callable[[], Awaitable[T]]) -> T:
        """call() once; the registry's error relayed as a ServiceError."""
        try:
            return await call()
        except grpc.aio.AioRpcError as exc:
            raise ServiceError.relayed(exc) from exc

    async def _read(self, call: Callable[[], Awaitable[T]], what: str) -> T:
        """call(), a read, repeated while the registry is unavailable for a moment."""
        return await self._call(lambda: repeat_while_unavailable(call, what))

    async def resolve_warehouse(self, warehouse_id: str) -> rs.CatalogBinding:
        request = rs.ResolveWarehouseRequest(warehouse_id=warehouse_id)
        response = await self._read(
            lambda: self._stub.ResolveWarehouse(request, timeout=self._timeout),
            "resolving a warehouse",
        )
        return response.binding

    async def resolve_execution(self, execution_id: str) -> rs.ResolveExecutionResponse:
        request = rs.ResolveExecutionRequest(execution_id=execution_id)
        return await self._read(
            lambda: self._stub.ResolveExecution(request, timeout=self._timeout),
            "resolving an execution",
        )

    async def list_executions(
        self,
        listing: execution_service_pb2.ListExecutionsRequest,
        metadata: tuple[tuple[str, str], ...] = (),
    ) -> rs.ListExecutionRecordsResponse:
        """The executions of the user named in metadata (the caller's credential and the user
        it acts for: listing is internal), filtered as asked."""
        request = rs.ListExecutionRecordsRequest(
            page_size=listing.page_size,
            page_token=listing.page_token,
            warehouse_id=listing.warehouse_id,
            states=listing.states,
        )
        return await self._read(
            lambda: self._stub.ListExecutionRecords(
                request, metadata=metadata, timeout=self._timeout
            ),
            "listing executions",
        )

"""The floor for a relay in Python: a grpc.aio server that forwards every call as bytes to one
backend, with the caller's metadata and nothing else (no authentication, limits, repeats, logs
or tracing). The gateway benchmark runs it beside the gateway, so that the gateway's own cost
per call and per stream can be told from what any Python gRPC relay costs.

Which methods answer with a stream it learns from the mesh's descriptors.

Run: python -m benchmarks.bare_relay --listen HOST:PORT --backend HOST:PORT
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import grpc
from google.protobuf import descriptor_pool

from texera.lake.v1 import result_service_pb2, warehouse_service_pb2

_SERVICES = (result_service_pb2, warehouse_service_pb2)  # imported for their descriptors

Context = grpc.aio.ServicerContext[Any, Any]


def _passed(context: Context) -> list[tuple[str, str | bytes]]:
    return [(k, v) for k, v in context.invocation_metadata() or () if k != "user-agent"]


def _server_streaming(method: str) -> bool:
    """Whether method (/package.Service/Method) answers with a stream."""
    service, _, name = method.lstrip("/").rpartition("/")
    found = descriptor_pool.Default().FindServiceByName(service).methods_by_name[name]
    return bool(found.server_streaming)


class _Relay(grpc.GenericRpcHandler):
    def __init__(self, backend: grpc.aio.Channel) -> None:
        self._backend = backend
        self._handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any]:
        method: str = details.method
        if method not in self._handlers:
            self._handlers[method] = self._handler(method)
        return self._handlers[method]

    def _handler(self, method: str) -> grpc.RpcMethodHandler[Any, Any]:
        if _server_streaming(method):
            open_stream: grpc.aio.UnaryStreamMultiCallable[bytes, bytes]
            open_stream = self._backend.unary_stream(method)

            async def relay_stream(request: bytes, context: Context) -> AsyncIterator[bytes]:
                call = open_stream(request, metadata=_passed(context))
                while (message := await call.read()) is not grpc.aio.EOF:
                    yield cast(bytes, message)

            return grpc.unary_stream_rpc_method_handler(relay_stream)
        forward: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]
        forward = self._backend.unary_unary(method)

        async def relay(request: bytes, context: Context) -> bytes:
            return await forward(request, metadata=_passed(context))

        return grpc.unary_unary_rpc_method_handler(relay)


async def serve(listen: str, backend: str) -> None:
    unlimited = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    server = grpc.aio.server(options=unlimited)
    server.add_generic_rpc_handlers([_Relay(grpc.aio.insecure_channel(backend, unlimited))])
    server.add_insecure_port(listen)
    await server.start()
    await server.wait_for_termination()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True)
    parser.add_argument("--backend", required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.listen, args.backend))


if __name__ == "__main__":
    main()

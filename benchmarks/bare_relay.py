"""The floor for a relay in Python: a grpc.aio server that forwards every unary call as bytes
to one backend, with the caller's metadata and nothing else (no authentication, limits,
repeats, logs or tracing). The gateway benchmark runs it beside the gateway, so that the
gateway's own cost per call can be told from what any Python gRPC relay costs.

Run: python -m benchmarks.bare_relay --listen HOST:PORT --backend HOST:PORT
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import grpc


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
        forward: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = self._backend.unary_unary(method)

        async def relay(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
            passed = [(k, v) for k, v in context.invocation_metadata() or () if k != "user-agent"]
            answer: bytes = await forward(request, metadata=passed)
            return answer

        return grpc.unary_unary_rpc_method_handler(relay)


async def serve(listen: str, backend: str) -> None:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([_Relay(grpc.aio.insecure_channel(backend))])
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

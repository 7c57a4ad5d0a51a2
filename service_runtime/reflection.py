"""Server reflection that also resolves method names.

grpcio-reflection looks symbols up with the descriptor pool's
FindFileContainingSymbol, which in Python does not know methods, so
``grpcurl describe pkg.Service.Method`` fails (grpc/grpc#34743). The pool
below falls back to a method lookup.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import grpc
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import FileDescriptor
from grpc_reflection.v1alpha import reflection


class _MethodAwarePool:
    """The default descriptor pool, resolving method names to their service's file."""

    def __init__(self, pool: descriptor_pool.DescriptorPool) -> None:
        self._pool = pool

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def FindFileContainingSymbol(self, symbol: str) -> FileDescriptor:
        try:
            return self._pool.FindFileContainingSymbol(symbol)
        except KeyError:
            return self._pool.FindMethodByName(symbol).containing_service.file


def enable_reflection(service_names: Iterable[str], server: grpc.aio.Server) -> None:
    # The servicer only calls lookup methods, which the wrapper forwards.
    pool = cast(descriptor_pool.DescriptorPool, _MethodAwarePool(descriptor_pool.Default()))
    reflection.enable_server_reflection(
        [*service_names, reflection.SERVICE_NAME], server, pool=pool
    )

"""Each execution's own catalog client, through the registry's catalog gatekeeper.

A unit holds no catalog token of its own. While it serves a submission, it asks the registry
(OpenExecutionCatalog, with the submitter's token) for the execution's token, which names the
execution and the source tables it reads, and builds a catalog client that reaches the
gatekeeper with it. The client's token is renewed before it expires by the unit alone, for as
long as the execution is bound to the unit and has not ended; then the client is closed.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Iterable
from functools import partial

from pyiceberg.catalog import Catalog

from catalog_map.backends import CatalogFactory
from catalog_map.cache import catalog_unavailable
from catalog_map.catalog_token import CatalogToken
from cu_service.registry import RegistryClient
from service_runtime.errors import ServiceError
from service_runtime.outbound_tls import ServerTrust
from service_runtime.tls.mesh_client import MeshClientTls
from texera.lake.internal.v1 import registry_service_pb2


def gatekeeper_trust(tls: MeshClientTls | None) -> ServerTrust:
    """How the gatekeeper's certificate (the registry's) is verified: against the mesh's CA
    bundle, which the unit holds in memory and writes to a file of its own for the catalog
    client (a CA bundle is no secret); the default trust store without one."""
    if tls is None:
        return ServerTrust()
    descriptor, path = tempfile.mkstemp(prefix="mesh-ca-", suffix=".pem")
    with os.fdopen(descriptor, "wb") as file:
        file.write(tls.ca_bundle)
    return ServerTrust(path, True)


class ExecutionCatalogs:
    def __init__(self, registry: RegistryClient, factory: CatalogFactory) -> None:
        self._registry = registry
        self._factory = factory

    async def open(
        self, execution_id: str, warehouse_id: str, sources: Iterable[tuple[str, ...]]
    ) -> Catalog:
        """The execution's catalog client; called while serving its submission. The catalog's
        failures answer UNAVAILABLE, the registry's refusals as they came."""
        binding = await self._registry.open_execution_catalog(
            execution_id,
            warehouse_id,
            [
                registry_service_pb2.SourceTable(namespace=table[:-1], name=table[-1])
                for table in sorted(set(sources))
            ],
        )
        renew = partial(self._registry.open_execution_catalog, execution_id, warehouse_id, [])
        token = CatalogToken(binding, renew, asyncio.get_running_loop())
        try:
            return await asyncio.to_thread(self._factory.build, binding, token)
        except ServiceError:
            raise
        except Exception as exc:
            raise catalog_unavailable(warehouse_id, exc) from exc

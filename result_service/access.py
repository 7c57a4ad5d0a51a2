"""From an execution id to its tables: the registry, then the warehouse's catalog.

Every read resolves the execution through the registry with the caller's
token, so the owner check happens there: another user's execution, or one
whose warehouse was deleted, is NOT_FOUND; the execution's state decides which of its
outputs may be seen (see visibility). The warehouse's catalog comes from
the catalog map. Blocking catalog and storage work runs on the service's
reader threads, and what it raises is turned into a status here: a catalog
that does not answer is UNAVAILABLE (CATALOG_UNAVAILABLE), storage that does
not answer UNAVAILABLE (STORAGE_UNAVAILABLE).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TypeVar

import grpc
import requests
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError, RESTError
from pyiceberg.table import Table

from catalog_map.cache import CatalogMap, catalog_unavailable
from catalog_map.registry import RegistryReader
from result_service.plan import RowLevelDeletesError
from result_service.visibility import visible_output
from service_runtime.errors import Resource, ServiceError, not_found
from texera.lake.internal.v1 import registry_service_pb2
from texera.lake.v1 import execution_pb2

log = logging.getLogger("result_service.access")
T = TypeVar("T")


@dataclass(frozen=True)
class Resolved:
    execution: execution_pb2.Execution
    binding: registry_service_pb2.CatalogBinding

    @property
    def warehouse_id(self) -> str:
        return self.binding.warehouse_id

    def output(self, operator_id: str) -> execution_pb2.ExecutionOutput:
        """The output, if its execution's state lets readers see it (see visibility)."""
        return visible_output(self.execution, operator_id)


@contextlib.contextmanager
def storage_failures(warehouse_id: str) -> Iterator[None]:
    """Turns what catalog and storage clients raise into the caller's status."""
    try:
        yield
    except (ServiceError, NoSuchTableError, NoSuchNamespaceError):
        raise
    except (RESTError, requests.RequestException) as exc:
        raise catalog_unavailable(warehouse_id, exc) from exc
    except RowLevelDeletesError as exc:
        raise ServiceError(
            grpc.StatusCode.FAILED_PRECONDITION,
            "the result has row-level deletes, which results never have; it was changed "
            "outside the mesh",
            reason="ROW_LEVEL_DELETES",
        ) from exc
    except FileNotFoundError as exc:
        log.error("data file missing", extra={"warehouse_id": warehouse_id, "error": _brief(exc)})
        raise ServiceError(
            grpc.StatusCode.DATA_LOSS,
            f"a data file of the result is missing from the storage of warehouse {warehouse_id}",
            reason="DATA_FILE_MISSING",
        ) from exc
    except OSError as exc:  # pyarrow's storage errors
        log.warning(
            "storage unavailable", extra={"warehouse_id": warehouse_id, "error": _brief(exc)}
        )
        raise ServiceError(
            grpc.StatusCode.UNAVAILABLE,
            f"the storage of warehouse {warehouse_id} is unavailable; retry later",
            reason="STORAGE_UNAVAILABLE",
        ) from exc


def _brief(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:300]}"


class ResultAccess:
    def __init__(self, registry: RegistryReader, catalogs: CatalogMap, executor: Executor) -> None:
        self._registry = registry
        self._catalogs = catalogs
        self._executor = executor

    async def blocking(self, resolved: Resolved, work: Callable[[], T]) -> T:
        """work() on a reader thread, its failures turned into statuses."""
        with storage_failures(resolved.warehouse_id):
            return await asyncio.get_running_loop().run_in_executor(self._executor, work)

    async def resolve(self, execution_id: str) -> Resolved:
        """The execution and its warehouse's binding; NOT_FOUND (EXECUTION_DELETED) for a
        deleted execution, whose tables are gone or going."""
        response = await self._registry.resolve_execution(execution_id)
        if response.execution.HasField("delete_time"):
            raise ServiceError(
                grpc.StatusCode.NOT_FOUND,
                f"execution {execution_id} was deleted; its results, statistics and console "
                "messages are gone",
                reason="EXECUTION_DELETED",
            )
        return Resolved(response.execution, response.binding)

    async def catalog(self, resolved: Resolved) -> Catalog:
        return await self._catalogs.get_or_unavailable(resolved.warehouse_id, resolved.binding)

    async def table(self, resolved: Resolved, identifier: tuple[str, str]) -> Table | None:
        """The table, loaded with fresh credentials; None if it does not exist."""
        catalog = await self.catalog(resolved)

        def load() -> Table | None:
            try:
                return catalog.load_table(identifier)
            except (NoSuchTableError, NoSuchNamespaceError):
                return None

        return await self.blocking(resolved, load)

    async def result_table(self, resolved: Resolved, operator_id: str) -> Table:
        output = resolved.output(operator_id)
        table = await self.table(resolved, (output.namespace, output.table_name))
        if table is None:
            raise not_found(
                Resource.RESULT, f"{operator_id} of execution {resolved.execution.execution_id}"
            )
        return table

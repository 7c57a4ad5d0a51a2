"""The per-warehouse catalog map.

Rules (DESIGN §2):
- a hit reuses the catalog; a miss resolves the warehouse's binding (unless
  the caller already has a fresh one) and builds the catalog lazily;
- building happens under a lock of that warehouse alone, never under one
  lock for all: a warehouse whose catalog is slow or down delays only the
  callers that want that warehouse, and a build that fails leaves the other
  entries untouched;
- entries are bounded (least recently used first out) and expire when idle;
  what is evicted is closed;
- a binding with another credential version than the cached entry's replaces
  the entry (credentials were rotated);
- a catalog outlives its binding's catalog token: it asks the entry's
  CatalogToken before every request, which resolves the warehouse again when
  the token is due (see catalog_map.catalog_token); a fresher binding a caller
  brings is handed to it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
from pyiceberg.catalog import Catalog

from catalog_map.backends import CatalogFactory, close_catalog
from catalog_map.catalog_token import Binding, CatalogToken, seconds_until_due
from catalog_map.registry import RegistryReader
from catalog_map.settings import WarehouseClientSettings
from service_runtime.errors import ServiceError
from service_runtime.redaction import without_credentials

log = logging.getLogger("catalog_map")

#: A binding whose token is usable for less than this is not worth building a catalog for.
MIN_TOKEN_SECONDS = 1.0

#: Builds a warehouse's catalog, whose requests carry the holder's current token.
Build = Callable[[Binding, CatalogToken], Catalog]


@dataclass
class _Entry:
    catalog: Catalog
    token: CatalogToken
    last_used: float

    @property
    def version(self) -> int:
        return self.token.binding.credential_version


class CatalogMap:
    def __init__(
        self,
        resolve: Callable[[str], Awaitable[Binding]],
        build: Build,
        *,
        max_entries: int = 64,
        idle_seconds: float = 600.0,
        build_timeout_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._resolve = resolve
        self._build = build
        self._max_entries = max_entries
        self._idle_seconds = idle_seconds
        self._build_timeout = build_timeout_seconds
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def _fresh(self, warehouse_id: str, binding: Binding | None) -> Catalog | None:
        entry = self._entries.get(warehouse_id)
        if entry is None or (binding is not None and binding.credential_version != entry.version):
            return None
        if binding is not None:
            entry.token.offer(binding)
        entry.last_used = self._clock()
        self._entries.move_to_end(warehouse_id)
        return entry.catalog

    async def get(self, warehouse_id: str, binding: Binding | None = None) -> Catalog:
        """The warehouse's catalog; binding, when the caller has a fresh one, spares a resolve."""
        self.expire_idle()
        if (catalog := self._fresh(warehouse_id, binding)) is not None:
            return catalog
        lock = self._locks.setdefault(warehouse_id, asyncio.Lock())
        async with lock:
            if (catalog := self._fresh(warehouse_id, binding)) is not None:
                return catalog  # built by the caller we waited for
            if binding is None or seconds_until_due(binding) < MIN_TOKEN_SECONDS:
                binding = await self._resolve(warehouse_id)
                if (catalog := self._fresh(warehouse_id, binding)) is not None:
                    return catalog
            token = CatalogToken(
                binding, lambda: self._resolve(warehouse_id), asyncio.get_running_loop()
            )
            catalog = await asyncio.wait_for(
                asyncio.to_thread(self._build, binding, token), self._build_timeout
            )
            self._replace(warehouse_id, _Entry(catalog, token, self._clock()))
            log.info(
                "catalog built",
                extra={
                    "warehouse_id": warehouse_id,
                    "credential_version": binding.credential_version,
                },
            )
            return catalog

    async def get_or_unavailable(self, warehouse_id: str, binding: Binding) -> Catalog:
        """get(), with a catalog that cannot be reached (HTTP errors, timeouts, refusals alike)
        answered as UNAVAILABLE for the caller to retry."""
        try:
            return await self.get(warehouse_id, binding)
        except ServiceError:
            raise  # the registry's own answer (its database down, say), relayed as it is
        except Exception as exc:
            raise catalog_unavailable(warehouse_id, exc) from exc

    def _replace(self, warehouse_id: str, entry: _Entry) -> None:
        old = self._entries.pop(warehouse_id, None)
        if old is not None:
            close_catalog(old.catalog)
        self._entries[warehouse_id] = entry
        while len(self._entries) > self._max_entries:
            evicted_id, evicted = self._entries.popitem(last=False)
            self._forget_lock(evicted_id)
            close_catalog(evicted.catalog)

    def invalidate(self, warehouse_id: str) -> None:
        """Drops (and closes) the warehouse's catalog; the next get builds a new one."""
        entry = self._entries.pop(warehouse_id, None)
        if entry is not None:
            close_catalog(entry.catalog)
        self._forget_lock(warehouse_id)

    def expire_idle(self) -> None:
        cutoff = self._clock() - self._idle_seconds
        for warehouse_id in [w for w, e in self._entries.items() if e.last_used < cutoff]:
            self.invalidate(warehouse_id)

    def _forget_lock(self, warehouse_id: str) -> None:
        lock = self._locks.get(warehouse_id)
        if lock is not None and not lock.locked():
            del self._locks[warehouse_id]

    def close(self) -> None:
        for warehouse_id in list(self._entries):
            self.invalidate(warehouse_id)


def catalog_unavailable(warehouse_id: str, exc: BaseException) -> ServiceError:
    """UNAVAILABLE for a warehouse whose catalog failed to answer, naming the cause (its first
    line, bounded, anything like a credential blanked)."""
    first_line = next(iter(str(exc).splitlines()), "")
    cause = without_credentials(f"{type(exc).__name__}: {first_line}")[:300]
    log.warning("catalog unavailable", extra={"warehouse_id": warehouse_id, "error": cause})
    return ServiceError(
        grpc.StatusCode.UNAVAILABLE,
        f"the catalog of warehouse {warehouse_id} is unavailable ({cause}); retry later",
        reason="CATALOG_UNAVAILABLE",
    )


def new_catalog_map(settings: WarehouseClientSettings, registry: RegistryReader) -> CatalogMap:
    """The service's catalog map: warehouses resolved through the registry, REST or SQL backed
    (SQL only where the platform's SQL catalog is configured: global-sql)."""
    return CatalogMap(
        registry.resolve_warehouse,
        CatalogFactory(
            sql_warehouse=settings.sql_warehouse(),
            catalog_trust=settings.catalog_trust(),
            storage_io=settings.storage_io_properties(),
        ).build,
        max_entries=settings.catalog_cache_size,
        idle_seconds=settings.catalog_idle_seconds,
    )

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
- an entry lives no longer than its binding's catalog token (less a margin):
  then the warehouse is resolved again, which brings a fresh token.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
from pyiceberg.catalog import Catalog

from service_runtime.errors import ServiceError
from texera.lake.internal.v1 import registry_service_pb2
from texera.lake.v1 import warehouse_pb2

log = logging.getLogger("catalog_map")

Binding = registry_service_pb2.CatalogBinding


#: A catalog token is replaced this long before it expires (at most; a quarter of what is left
#: when shorter), so that no request leaves with a token about to expire.
TOKEN_MARGIN_SECONDS = 30.0
#: A binding whose token is usable for less than this is not worth building a catalog for.
MIN_TOKEN_SECONDS = 1.0


def token_seconds_left(binding: Binding) -> float:
    """Seconds the binding's catalog token stays usable (margin deducted); inf without one."""
    if not binding.catalog_token:
        return math.inf
    left = binding.catalog_token_expire_time.ToNanoseconds() / 1e9 - time.time()
    return left - min(TOKEN_MARGIN_SECONDS, max(left, 0.0) / 4)


@dataclass
class _Entry:
    catalog: Catalog
    version: int
    last_used: float
    #: On the map's clock: when the catalog's token is due for replacement.
    usable_until: float


def _close(catalog: Catalog) -> None:
    with contextlib.suppress(Exception):  # closing is best effort; the entry is gone either way
        catalog.close()


class CatalogMap:
    def __init__(
        self,
        resolve: Callable[[str], Awaitable[Binding]],
        build: Callable[[Binding], Catalog],
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
        if (
            entry is None
            or (binding is not None and binding.credential_version != entry.version)
            or self._clock() >= entry.usable_until
        ):
            return None
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
            if binding is None or token_seconds_left(binding) < MIN_TOKEN_SECONDS:
                binding = await self._resolve(warehouse_id)
                if (catalog := self._fresh(warehouse_id, binding)) is not None:
                    return catalog
            catalog = await asyncio.wait_for(
                asyncio.to_thread(self._build, binding), self._build_timeout
            )
            now = self._clock()
            entry = _Entry(
                catalog, binding.credential_version, now, now + token_seconds_left(binding)
            )
            self._replace(warehouse_id, entry)
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
        answered as UNAVAILABLE for the caller to retry. An archived warehouse is deactivated in
        the catalog: FAILED_PRECONDITION until it is restored."""
        if binding.state == warehouse_pb2.WAREHOUSE_STATE_ARCHIVED:
            self.invalidate(warehouse_id)
            raise ServiceError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"warehouse {warehouse_id} is archived; restore it to reach its tables",
                reason="WAREHOUSE_ARCHIVED",
            )
        try:
            return await self.get(warehouse_id, binding)
        except Exception as exc:
            raise catalog_unavailable(warehouse_id, exc) from exc

    def _replace(self, warehouse_id: str, entry: _Entry) -> None:
        old = self._entries.pop(warehouse_id, None)
        if old is not None:
            _close(old.catalog)
        self._entries[warehouse_id] = entry
        while len(self._entries) > self._max_entries:
            evicted_id, evicted = self._entries.popitem(last=False)
            self._forget_lock(evicted_id)
            _close(evicted.catalog)

    def invalidate(self, warehouse_id: str) -> None:
        """Drops (and closes) the warehouse's catalog; the next get builds a new one."""
        entry = self._entries.pop(warehouse_id, None)
        if entry is not None:
            _close(entry.catalog)
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
    """UNAVAILABLE for a warehouse whose catalog failed to answer; the cause is logged."""
    log.warning(
        "catalog unavailable",
        extra={"warehouse_id": warehouse_id, "error": f"{type(exc).__name__}: {str(exc)[:300]}"},
    )
    return ServiceError(
        grpc.StatusCode.UNAVAILABLE,
        f"the catalog of warehouse {warehouse_id} is unavailable; retry later",
        reason="CATALOG_UNAVAILABLE",
    )

"""A warehouse's catalog token that is renewed in place, for catalogs that outlive it.

A catalog token lives minutes (Lakekeeper's realm: an hour; a test's: a minute); an execution
that writes for longer keeps using the catalog it started with. So a built catalog does not
hold the token the registry gave with its binding: it asks this holder before every request
(pyiceberg's AuthManager), and the holder resolves the warehouse again once the token is due
(TOKEN_MARGIN_SECONDS before it expires, or a quarter of what was left when shorter), or at
once after the catalog refused it (401, 419). A binding that someone resolved anyway (a new
submission) replaces the token too when it lasts longer.

Renewing blocks the asking thread on the service's event loop: catalog requests are made on
threads. On the loop's own thread the holder cannot wait, and hands out the token it has.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pyiceberg.catalog.rest.auth import AuthManager
from typing_extensions import override

from texera.lake.internal.v1 import registry_service_pb2

log = logging.getLogger("catalog_map")

Binding = registry_service_pb2.CatalogBinding

#: A catalog token is replaced this long before it expires (at most; a quarter of what is left
#: when shorter), so that no request leaves with a token about to expire.
TOKEN_MARGIN_SECONDS = 30.0
#: How long a thread waits for the registry to renew a token.
RENEW_TIMEOUT_SECONDS = 30.0


def expires_at(binding: Binding) -> float:
    """When the binding's catalog token expires (epoch seconds); inf without one."""
    if not binding.catalog_token:
        return math.inf
    return float(binding.catalog_token_expire_time.ToNanoseconds() / 1e9)


def seconds_until_due(binding: Binding) -> float:
    """Seconds until the binding's token, received now, is due for replacement (the margin
    deducted); inf without one."""
    left = expires_at(binding) - time.time()
    return left - min(TOKEN_MARGIN_SECONDS, max(left, 0.0) / 4)


@dataclass(frozen=True)
class _Held:
    """A binding and when its token is due, replaced together."""

    binding: Binding
    due_at: float

    @classmethod
    def of(cls, binding: Binding) -> _Held:
        return cls(binding, time.time() + seconds_until_due(binding))


class CatalogToken:
    """The current catalog token of one warehouse, renewed through resolve (a coroutine run on
    loop) when due; without resolve, the binding's token as it is."""

    def __init__(
        self,
        binding: Binding,
        resolve: Callable[[], Awaitable[Binding]] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._resolve = resolve
        self._loop = loop
        self._lock = threading.Lock()
        self._held = _Held.of(binding)
        #: The token the catalog refused, until a renewal replaces it.
        self._refused = ""

    @property
    def binding(self) -> Binding:
        return self._held.binding

    def offer(self, binding: Binding) -> None:
        """Takes binding's token if it lasts longer than the current one."""
        # No lock: the event loop's thread calls this, and must never wait for a thread that
        # waits for the loop. Either of two racing bindings is a valid token.
        if binding.catalog_token and expires_at(binding) > expires_at(self._held.binding):
            self._held = _Held.of(binding)

    def refused(self, authorization: str) -> None:
        """The catalog refused the request that carried authorization: if that was the
        current token, the next request renews it first."""
        token = self._held.binding.catalog_token
        if authorization == _bearer(token):
            self._refused = token

    def current(self) -> str:
        """The token to send now, renewed first when due or refused (except on the event
        loop's thread, which cannot wait)."""
        if self._due() and self._may_wait():
            with self._lock:  # one renewal at a time; the others take what it brought
                if self._due():
                    self._renew()
        return self._held.binding.catalog_token

    def _due(self) -> bool:
        held = self._held
        token = held.binding.catalog_token
        return bool(token) and (time.time() >= held.due_at or self._refused == token)

    def _may_wait(self) -> bool:
        if self._resolve is None:
            return False
        try:
            return asyncio.get_running_loop() is not self._loop
        except RuntimeError:  # no loop runs on this thread
            return True

    def _renew(self) -> None:
        assert self._resolve is not None  # see _may_wait
        assert self._loop is not None
        try:
            renewed = asyncio.run_coroutine_threadsafe(_awaited(self._resolve), self._loop).result(
                RENEW_TIMEOUT_SECONDS
            )
        except Exception as exc:  # the catalog will refuse the old token; its caller retries
            log.warning(
                "catalog token not renewed",
                extra={
                    "warehouse_id": self._held.binding.warehouse_id,
                    "error": f"{type(exc).__name__}: {str(exc)[:300]}",
                },
            )
            return
        if renewed.catalog_token:  # taken whatever it claims: the one held may be refused
            self._held = _Held.of(renewed)
        self._refused = ""


class CatalogTokenAuth(AuthManager):
    """pyiceberg's authorization for a REST catalog: the holder's current token."""

    def __init__(self, token: CatalogToken) -> None:
        self.token = token

    @override
    def auth_header(self) -> str | None:
        value = self.token.current()
        return _bearer(value) if value else None


async def _awaited(resolve: Callable[[], Awaitable[Binding]]) -> Binding:
    return await resolve()


def _bearer(token: str) -> str:
    return f"Bearer {token}"

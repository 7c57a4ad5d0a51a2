"""Keeping this computing unit registered: register at start, then heartbeat.

Heartbeats run on a thread of their own with their own event loop and channel,
so that they stay on time whatever the unit's main loop is doing.

Any other failure (the registry, or its database, unreachable) is only logged:
heartbeats go on at their interval, however long the outage, and nothing here
gives up, cancels or registers again; once the registry is back it records the
next heartbeat, and holds its lease sweep long enough for it (see
warehouse_service.background.leases). A heartbeat the registry refuses with NOT_FOUND means
the lease did lapse (the unit could not reach the registry for a lease, say) and
the registry has failed this unit's unfinished executions: they are cancelled
here too, and the unit registers again. Each heartbeat lists the unit's unfinished executions,
and the registry answers which of them it ended itself (their submitter's share of the unit was
taken back, say): those are cancelled, as CancelExecution cancels, within a heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable

import grpc

from cu_service.manager import ExecutionManager
from cu_service.registry import RegistryClient
from service_runtime.errors import ServiceError
from service_runtime.retry import RetryPolicy, retry_async
from service_runtime.tls.held_certificate import HeldCertificate

log = logging.getLogger("cu_service.lease")

#: Registering waits for the registry as long as it takes (at start, it may not be up yet).
REGISTER_RETRY = RetryPolicy(
    window_seconds=float("inf"), first_wait_seconds=0.5, longest_wait_seconds=2.0
)
#: Unfinished executions a heartbeat lists at most (the registry's limit).
MAX_UNFINISHED = 1000
#: What a registry that cannot answer yet (or whose database cannot) answers.
_PASSING = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


def _passing(error: BaseException) -> bool:
    return isinstance(error, ServiceError) and error.code in _PASSING


async def register(
    registry: RegistryClient,
    endpoint: str,
    capacity: int,
    policy: RetryPolicy = REGISTER_RETRY,
    *,
    workers_confined: bool,
) -> float:
    """Registers, saying whether this unit's Python workers are confined, retrying while the
    registry is unavailable; returns the heartbeat interval."""
    response = await retry_async(
        lambda: registry.register(endpoint, capacity, workers_confined=workers_confined),
        policy=policy,
        transient=_passing,
        what="registering with the registry",
    )
    log.info("registered", extra={"computing_unit_id": registry.unit_id, "endpoint": endpoint})
    return max(response.heartbeat_interval.ToTimedelta().total_seconds(), 0.2)


class HeartbeatThread:
    """Heartbeats on a thread of their own, with their own event loop and channel to the
    registry: nothing the unit's main loop waits on can delay them."""

    def __init__(
        self,
        new_registry: Callable[[], RegistryClient],
        manager: ExecutionManager,
        endpoint: str,
        capacity: int,
        interval: float,
        *,
        workers_confined: bool,
        certificate: HeldCertificate | None = None,
    ) -> None:
        self._new_registry = new_registry
        self._certificate = certificate
        self._renewal_refused = False
        self._manager = manager
        self._manager_loop = asyncio.get_running_loop()
        self._endpoint = endpoint
        self._capacity = capacity
        self._workers_confined = workers_confined
        self._interval = interval
        self._loop = asyncio.new_event_loop()
        self._stopping = asyncio.Event()
        self._thread = threading.Thread(target=self._main, name="heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, wait_seconds: float = 10.0) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(wait_seconds)

    def _main(self) -> None:
        try:
            self._loop.run_until_complete(self._beat())
        finally:
            self._loop.close()

    async def _beat(self) -> None:
        registry = self._new_registry()
        interval = self._interval
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), interval)
                    return
                try:
                    interval = await self._once(registry) or interval
                except Exception:  # the heartbeats are the unit's life: they never stop
                    log.exception("heartbeat failed unexpectedly; beating on")
        finally:
            await registry.close()

    async def _once(self, registry: RegistryClient) -> float | None:
        """One heartbeat; the new interval if the unit had to register again."""
        running, queued = self._manager.counts()
        signing_request = self._signing_request()
        try:
            response = await registry.heartbeat(
                running,
                queued,
                unfinished=self._manager.unfinished()[:MAX_UNFINISHED],
                certificate_signing_request=signing_request,
            )
        except ServiceError as exc:
            if exc.code == grpc.StatusCode.UNAUTHENTICATED:
                # Revoked (this launch ended: the unit was restarted elsewhere, stopped or
                # deleted) or expired: nothing this process does can be trusted again.
                log.error("the registry refuses this unit's credential: the unit stops")
                os.kill(os.getpid(), signal.SIGTERM)
                return None
            if exc.code != grpc.StatusCode.NOT_FOUND:
                log.warning("heartbeat failed", extra={"code": exc.code.name})
                return None
            log.error("the lease lapsed: cancelling this unit's executions and registering again")
            asyncio.run_coroutine_threadsafe(
                self._manager.cancel_all("the computing unit lost its lease with the registry"),
                self._manager_loop,
            )
            return await register(
                registry, self._endpoint, self._capacity, workers_confined=self._workers_confined
            )
        if response.ended_execution_ids:
            asyncio.run_coroutine_threadsafe(
                self._manager.cancel_ended(list(response.ended_execution_ids)),
                self._manager_loop,
            )
        if signing_request:
            self._take_certificate(response.certificate_chain)
        return None

    def _signing_request(self) -> bytes:
        """A signing request for the unit's key once its certificate is due for renewal."""
        if self._certificate is None or not self._certificate.renewal_due():
            return b""
        return self._certificate.signing_request()

    def _take_certificate(self, chain: bytes) -> None:
        """Serves the renewed certificate; an answer without one is reported once per
        certificate (this registry issues none: the unit's certificate was set by hand)."""
        assert self._certificate is not None
        if not chain:
            if not self._renewal_refused:
                log.warning("the registry renewed no TLS certificate; asking again each beat")
            self._renewal_refused = True
            return
        try:
            self._certificate.renew(chain)
        except ValueError:
            log.exception("the registry's renewed TLS certificate cannot be served")
            return
        self._renewal_refused = False

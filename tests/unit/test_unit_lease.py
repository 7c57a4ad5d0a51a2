"""A computing unit's side of its lease: heartbeats go on through an outage of the registry
(or of its database) without cancelling anything or registering again; only a lease the
registry says lapsed does that; registering waits for a registry that cannot answer yet."""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Sequence
from typing import Any, cast

import grpc
import pytest

from cu_service.lease import HeartbeatThread, register
from cu_service.manager import ExecutionManager
from cu_service.registry import RegistryClient
from service_runtime.errors import ServiceError
from service_runtime.retry import RetryPolicy
from service_runtime.tls.authority import MeshAuthority
from service_runtime.tls.held_certificate import HeldCertificate
from service_runtime.tls.identity import UNIT_DOMAIN
from texera.lake.internal.v1 import registry_service_pb2
from warehouse_service.units.unit_certificates import UnitCertificates

QUICK = RetryPolicy(
    window_seconds=float("inf"), first_wait_seconds=0.001, longest_wait_seconds=0.01
)


def refusal(code: grpc.StatusCode) -> ServiceError:
    return ServiceError(code, code.name.lower())


class Registry:
    """Answers heartbeats and registrations with the failures given, in turn, then success."""

    def __init__(self, *heartbeats: ServiceError | None, registrations: int = 0) -> None:
        self.heartbeats = list(heartbeats)
        self.beats = 0
        self.failed_registrations = [refusal(grpc.StatusCode.UNAVAILABLE)] * registrations
        self.registered = 0
        #: workers_confined of each registration made.
        self.confined: list[bool] = []
        self.unit_id = "cu-1"
        #: Issues units' certificates when set; the signing requests heartbeats carried.
        self.issuer: UnitCertificates | None = None
        self.signing_requests: list[bytes] = []
        #: The executions the ledger holds as ended.
        self.ended: set[str] = set()

    async def heartbeat(
        self,
        running: int,
        queued: int,
        *,
        unfinished: Sequence[str] = (),
        certificate_signing_request: bytes = b"",
    ) -> registry_service_pb2.HeartbeatComputingUnitResponse:
        self.beats += 1
        if self.heartbeats and (failure := self.heartbeats.pop(0)) is not None:
            raise failure
        response = registry_service_pb2.HeartbeatComputingUnitResponse(
            ended_execution_ids=[e for e in unfinished if e in self.ended]
        )
        if certificate_signing_request:
            self.signing_requests.append(certificate_signing_request)
            if self.issuer is not None:
                chain = self.issuer.renewed(self.unit_id, certificate_signing_request)
                response.certificate_chain = chain
        return response

    async def register(
        self, endpoint: str, capacity: int, *, workers_confined: bool
    ) -> registry_service_pb2.RegisterComputingUnitResponse:
        if self.failed_registrations:
            raise self.failed_registrations.pop(0)
        self.registered += 1
        self.confined.append(workers_confined)
        response = registry_service_pb2.RegisterComputingUnitResponse()
        response.heartbeat_interval.FromMilliseconds(200)
        return response

    async def close(self) -> None:
        pass


class Manager:
    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.running = ["e-1", "e-2"]
        #: The executions cancel_ended was given.
        self.ended: list[str] = []

    def counts(self) -> tuple[int, int]:
        return 2, 0

    def unfinished(self) -> list[str]:
        return list(self.running)

    async def cancel_all(self, reason: str) -> None:
        self.cancelled.append(reason)

    async def cancel_ended(self, execution_ids: Sequence[str]) -> None:
        self.ended += execution_ids
        self.running = [e for e in self.running if e not in execution_ids]


async def beat_until(
    registry: Registry,
    manager: Manager,
    beats: int,
    certificate: HeldCertificate | None = None,
) -> None:
    thread = HeartbeatThread(
        lambda: cast(RegistryClient, registry),
        cast(ExecutionManager, manager),
        "127.0.0.1:1",
        4,
        interval=0.001,
        workers_confined=True,
        certificate=certificate,
    )
    thread.start()
    deadline = time.monotonic() + 10
    try:
        while registry.beats < beats:
            assert time.monotonic() < deadline, f"only {registry.beats} heartbeats"
            await asyncio.sleep(0.01)
    finally:
        thread.stop()
    await asyncio.sleep(0.05)  # what the heartbeat thread handed the unit's loop, done


async def test_the_executions_the_registry_ended_are_cancelled_after_a_heartbeat() -> None:
    registry, manager = Registry(), Manager()
    registry.ended = {"e-2", "e-elsewhere"}
    await beat_until(registry, manager, 3)
    assert manager.ended == ["e-2"]
    assert manager.cancelled == []


async def test_heartbeats_go_on_through_an_outage_and_cancel_nothing() -> None:
    outage = [refusal(grpc.StatusCode.UNAVAILABLE)] * 30 + [
        refusal(grpc.StatusCode.DEADLINE_EXCEEDED),
        refusal(grpc.StatusCode.INTERNAL),
    ]
    registry, manager = Registry(*outage), Manager()
    await beat_until(registry, manager, len(outage) + 5)
    assert manager.cancelled == []
    assert registry.registered == 0


async def test_a_lapsed_lease_cancels_the_executions_and_registers_again() -> None:
    registry = Registry(refusal(grpc.StatusCode.NOT_FOUND), registrations=1)
    manager = Manager()
    await beat_until(registry, manager, 5)
    assert manager.cancelled == ["the computing unit lost its lease with the registry"]
    assert registry.confined == [True]  # registered again, saying what it said at start


async def test_heartbeats_outlive_a_registration_the_registry_refuses() -> None:
    registry = Registry(refusal(grpc.StatusCode.NOT_FOUND))
    registry.failed_registrations = [refusal(grpc.StatusCode.PERMISSION_DENIED)]
    manager = Manager()
    await beat_until(registry, manager, 5)
    assert registry.registered == 0  # refused, not retried in a loop of its own
    assert registry.beats >= 5  # but the heartbeats went on


async def test_registering_waits_for_a_registry_that_cannot_answer_yet() -> None:
    registry = Registry(registrations=5)
    interval = await register(
        cast(RegistryClient, registry), "127.0.0.1:1", 4, QUICK, workers_confined=False
    )
    assert interval == 0.2
    assert registry.confined == [False]


async def test_registering_refused_for_good_is_raised() -> None:
    registry: Any = Registry()
    registry.failed_registrations = [refusal(grpc.StatusCode.PERMISSION_DENIED)]
    with pytest.raises(ServiceError) as raised:
        await register(
            cast(RegistryClient, registry), "127.0.0.1:1", 4, QUICK, workers_confined=True
        )
    assert raised.value.code == grpc.StatusCode.PERMISSION_DENIED


def _unit_certificate(lifetime: datetime.timedelta) -> tuple[UnitCertificates, HeldCertificate]:
    """A registry's issuer, and the certificate a unit it launched holds."""
    root = MeshAuthority.create()
    issuer = UnitCertificates(
        root.issue_authority("units", lifetime=lifetime * 10, dns_domain=UNIT_DOMAIN), lifetime
    )
    handed = issuer.at_launch("cu-1")
    held = HeldCertificate(
        handed["TEXERA_LAKE_CU_TLS_CERTIFICATE"].encode(),
        handed["TEXERA_LAKE_CU_TLS_KEY"].encode(),
        root.certificate_pem,
    )
    return issuer, held


async def test_a_certificate_past_half_its_life_is_renewed_by_a_heartbeat() -> None:
    issuer, held = _unit_certificate(datetime.timedelta(seconds=0.4))
    first = held.certificate.serial_number
    registry = Registry()
    registry.issuer = issuer
    await asyncio.sleep(0.35)  # past half its life (which starts a quarter earlier)
    await beat_until(registry, Manager(), 3, held)
    assert registry.signing_requests  # asked for, with the key it keeps
    assert held.certificate.serial_number != first
    assert held.fetch() is not None  # served from the next handshake on


async def test_a_certificate_with_half_its_life_left_is_not_asked_for() -> None:
    issuer, held = _unit_certificate(datetime.timedelta(hours=1))
    registry = Registry()
    registry.issuer = issuer
    await beat_until(registry, Manager(), 5, held)
    assert registry.signing_requests == []

"""The lease sweep's rule: after the registry could not reach its database, no lease is swept
until a full lease after it is back, so the units that heartbeat on through an outage keep
their executions; units that are really gone are swept once that lease has passed.

The sweep (warehouse_service.background.leases) and the pool's outage accounting (warehouse_service.store.db)
are the real ones; the database under them is a model of the sweep's two statements
(warehouse_service.store.leases), on a clock the test moves (its now()).
tests/integration/test_lease_sweep.py runs the statements on PostgreSQL.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from service_runtime.errors import ServiceError
from warehouse_service.background.leases import LeaseSweep
from warehouse_service.store import leases
from warehouse_service.store.db import Database

LEASE = 10.0


@dataclass
class Ledger:
    """The registry's database: its clock, the sweep's hold, each unit's lease, the units the
    sweep marked lost. While down, every call fails as with a server that is not there."""

    now: float = 0.0
    hold_until: float = -math.inf
    leases: dict[str, float] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    down: bool = False


class Connection:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        yield

    async def fetchval(self, sql: str, lease: float) -> datetime:
        assert sql == leases._HOLD
        self.ledger.hold_until = max(self.ledger.hold_until, self.ledger.now + lease)
        return datetime.fromtimestamp(self.ledger.hold_until, UTC)

    async def fetch(self, sql: str) -> list[dict[str, str]]:
        assert sql == leases._SWEEP
        ledger = self.ledger
        lapsed = [
            unit
            for unit, expires in ledger.leases.items()
            if unit not in ledger.lost and max(expires, ledger.hold_until) < ledger.now
        ]
        ledger.lost += lapsed
        return [{"execution_id": f"e-{unit}", "computing_unit_id": unit} for unit in lapsed]

    async def execute(self, sql: str, unit: str) -> None:
        """HeartbeatComputingUnit's renewal."""
        self.ledger.leases[unit] = self.ledger.now + LEASE

    def terminate(self) -> None:
        pass


class Pool:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    async def acquire(self, **options: float) -> Connection:
        if self.ledger.down:
            raise ConnectionRefusedError("the database is not there")
        return Connection(self.ledger)

    async def release(self, connection: Connection, **options: float) -> None:
        pass


def replica(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> tuple[Database, LeaseSweep]:
    """A replica of the registry: its pool and its sweep."""
    db = Database("postgresql://model", pool_size=1)
    monkeypatch.setattr(db, "_pool", Pool(ledger))
    return db, LeaseSweep(db, lease_seconds=LEASE)


async def heartbeat(db: Database, unit: str) -> bool:
    """A unit's heartbeat through the replica; whether it was recorded."""
    try:
        async with db.connection() as connection:
            await connection.execute("renew", unit)
    except ServiceError:
        return False
    return True


async def sweep(sweeper: LeaseSweep) -> list[str]:
    try:
        return await sweeper.sweep()
    except ServiceError:
        return []


async def test_no_lease_is_swept_until_a_full_lease_after_the_database_is_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ledger = Ledger()
    db, sweeper = replica(ledger, monkeypatch)
    live, gone_before, gone_during = "cu-live", "cu-gone-before", "cu-gone-during"
    units = {live: math.inf, gone_before: 5.0, gone_during: 19.0}  # until when each beats
    swept_at: dict[str, float] = {}

    async def second(outage: bool) -> None:
        """One second: the sweep looks first (as after an outage, when it may beat the units'
        heartbeats), then every unit still alive heartbeats."""
        ledger.now += 1.0
        ledger.down = outage
        for execution in await sweep(sweeper):
            swept_at.setdefault(execution.removeprefix("e-"), ledger.now)
        for unit, until in units.items():
            if ledger.now <= until:
                await heartbeat(db, unit)

    for unit in units:
        assert await heartbeat(db, unit)
    for _ in range(20):
        await second(outage=False)
    # The first sweep held a lease (the replica had just started); then leases lapse on time.
    assert swept_at == {gone_before: 16.0}

    outages = db.outages
    for _ in range(40):  # the database down for 40 s: four leases
        await second(outage=True)
    assert db.outages > outages  # the heartbeats and sweeps meanwhile found it down
    assert max(ledger.leases.values()) < ledger.now  # every lease lapsed meanwhile

    back = ledger.now
    for _ in range(int(LEASE) + 5):
        await second(outage=False)
    assert live not in swept_at  # its first heartbeat came a second after the sweep's look
    # The unit that died during the outage is swept, a full lease after the database was back.
    assert swept_at[gone_during] == back + 1.0 + LEASE + 1.0
    assert ledger.hold_until == back + 1.0 + LEASE


async def test_a_hold_one_replica_records_holds_every_replica(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ledger = Ledger()
    db, sweeper = replica(ledger, monkeypatch)
    _, other = replica(ledger, monkeypatch)
    await sweep(sweeper)
    await sweep(other)  # both have swept: neither holds any more for starting
    ledger.now = LEASE + 1.0
    assert await heartbeat(db, "cu-live")

    ledger.down = True
    ledger.now += 30.0
    assert not await heartbeat(db, "cu-live")  # this replica saw the database down
    ledger.down = False
    assert await sweep(sweeper) == []  # it records a hold first
    ledger.now += 1.0
    # The other replica missed the outage (it made no call meanwhile), yet sweeps nothing.
    assert await sweep(other) == []
    assert await heartbeat(db, "cu-live")
    ledger.now += LEASE
    assert await sweep(other) == []
    assert ledger.lost == []


async def test_a_sweep_that_found_the_database_down_has_the_next_one_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ledger = Ledger(leases={"cu-gone": 30.0})
    _, sweeper = replica(ledger, monkeypatch)
    assert await sweeper.sweep() == []
    ledger.now = 20.0
    assert await sweeper.sweep() == []
    assert ledger.hold_until == LEASE  # only the first sweep held
    ledger.now, ledger.down = 25.0, True
    assert await sweep(sweeper) == []
    ledger.now, ledger.down = 26.0, False
    assert await sweeper.sweep() == []
    assert ledger.hold_until == 26.0 + LEASE
    ledger.now = 31.0  # the lease lapsed, the hold has not
    assert await sweeper.sweep() == []
    ledger.now = 26.0 + LEASE + 0.5
    assert await sweeper.sweep() == ["e-cu-gone"]

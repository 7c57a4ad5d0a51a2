"""Computing-unit leases: a unit that stops heartbeating loses its unfinished executions.

Every replica of the registry sweeps; a sweep is one idempotent statement, so replicas
sweeping at once mark each unit and execution once.

The sweep's hold. A lease lapses when its unit's heartbeats stop reaching the ledger, and
that has two causes: the unit is gone, or the registry could not record them (its database
was unreachable, or no replica of the registry ran). In the second case the unit heartbeats
on (it retries until the registry answers), and failing its executions would fail work that
runs fine. So a replica that could not reach its database since its previous sweep (any of
its calls found it down, heartbeats among them), or that has not swept yet (it cannot know
what happened before it started), first records a hold in the database:
``lease_sweep_hold.hold_until``, a full lease from now, in the transaction of that sweep. Every
replica's sweep counts a lease lapsed only once both its expiry and the hold have passed. Within
that lease every live unit heartbeats again (several times), so only units that are really
gone are swept.

Why in the database and not in each process: the replicas share the database, and one that
did not notice the outage (it made no call meanwhile, or started after it) would otherwise
sweep, at its first look after the return, the leases that lapsed while nobody could record
heartbeats. Why not derived from the lease rows (every lease lapsed at once, the newest
heartbeat old): with one unit, or none other alive, a lost unit looks like an outage. Times are
the database's (``now()``), never a replica's clock. The cost: after an outage, a restart or a
deployment, a unit that is really gone is swept one lease later.

What the hold does not cover: a replica cut off from the database while the others reach it
fails the heartbeats sent to it meanwhile, and the others sweep those leases once they lapse,
as when a unit cannot reach the registry at all; the hold it records once back protects the
leases that have not lapsed by then.
"""

from __future__ import annotations

import logging

from warehouse_service.store import leases
from warehouse_service.store.db import Database

# Re-exported for the statements that still take it from here; it lives in the store.

log = logging.getLogger("warehouse_service.background.leases")


class LeaseSweep:
    """This replica's sweep (see the module's docstring for its hold)."""

    def __init__(self, db: Database, *, lease_seconds: float) -> None:
        self._db = db
        self._lease = lease_seconds
        #: db.outages as of this replica's last sweep (None: it has not swept yet).
        self._outages_seen: int | None = None

    async def sweep(self) -> list[str]:
        """Marks units whose lease lapsed LOST and fails their unfinished executions, after
        recording a hold if this replica has not swept yet or could not reach its database
        since it last did; the executions it failed."""
        outages = self._db.outages
        first = self._outages_seen is None
        hold = outages != self._outages_seen
        async with self._db.transaction() as connection:
            held_until = await leases.hold(connection, self._lease) if hold else None
            rows = await leases.sweep(connection)
        # Only now, once recorded: a sweep that failed leaves the hold to the next one.
        self._outages_seen = outages
        if held_until is not None:
            (log.info if first else log.warning)(
                "lease sweep held for a lease: this replica "
                + ("has just started" if first else "could not reach its database"),
                extra={"hold_until": held_until.isoformat()},
            )
        for row in rows:
            log.warning(
                "execution failed: its computing unit was lost",
                extra={
                    "execution_id": row["execution_id"],
                    "computing_unit_id": row["computing_unit_id"],
                },
            )
        return [row["execution_id"] for row in rows]

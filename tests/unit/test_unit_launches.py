"""Which launch of a unit is current (warehouse_service.store.unit_launches): a credential of the
current launch is taken, remembered for a moment; any other is refused, and a launch that has
just begun is never refused for what an earlier read said.

The units' rows are a dictionary here, read through the same connection() the registry's
Database gives; the registry's real use is tested end to end in
tests/integration/test_unit_credentials.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from warehouse_service.store.unit_launches import UnitLaunches


class Rows:
    """units.credential_generation by unit id, counting the reads."""

    def __init__(self) -> None:
        self.generation: dict[str, str | None] = {}
        self.reads = 0

    async def fetchval(self, query: str, unit_id: str) -> str | None:
        assert "credential_generation" in query
        self.reads += 1
        return self.generation.get(unit_id)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Rows]:
        yield self


async def test_the_current_launch_is_taken_and_remembered_others_are_refused() -> None:
    rows = Rows()
    launches = UnitLaunches(rows, remember_seconds=60)  # type: ignore[arg-type]
    rows.generation["cu-1"] = "first"
    assert await launches.is_current("cu-1", "first")
    assert await launches.is_current("cu-1", "first")
    assert rows.reads == 1  # the match was remembered
    assert not await launches.is_current("cu-1", "forged")
    assert not await launches.is_current("cu-1", "")
    assert not await launches.is_current("cu-never-launched", "first")


async def test_a_new_launch_is_taken_at_once_and_the_old_one_refused_once_forgotten() -> None:
    rows = Rows()
    launches = UnitLaunches(rows, remember_seconds=60)  # type: ignore[arg-type]
    rows.generation["cu-1"] = None  # stopped
    assert not await launches.is_current("cu-1", "first")
    rows.generation["cu-1"] = "second"  # launched again, by another replica: nothing forgotten
    assert await launches.is_current("cu-1", "second")
    rows.generation["cu-1"] = None
    launches.forget("cu-1")  # this replica stopped it
    assert not await launches.is_current("cu-1", "second")

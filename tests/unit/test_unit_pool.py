"""The warm pool's bookkeeping, against a launcher that only records: which pooled unit a
launch takes, how the pool refills, and what it does with one that ended."""

from __future__ import annotations

import pytest

from unit_launcher.base import Launcher, UnitPhase, UnitSpec, UnitStatus
from unit_launcher.size_class import SizeClass
from warehouse_service.units.unit_pool import UnitPool

SMALL, LARGE = SizeClass(1, 1024), SizeClass(2, 4096)


class RecordingLauncher(Launcher):
    """Pooled units that are RUNNING until ended, ready once warmed."""

    def __init__(self) -> None:
        self.pooled: dict[str, UnitSpec] = {}
        self.warm: set[str] = set()
        self.ended: set[str] = set()
        self.stopped: list[str] = []

    async def launch(self, spec: UnitSpec) -> UnitStatus:
        raise AssertionError("the pool launches pooled units only")

    async def launch_pooled(self, spec: UnitSpec) -> None:
        self.pooled[spec.unit_id] = spec

    async def pooled_ready(self, pool_id: str) -> bool:
        return pool_id in self.warm

    async def status(self, unit_id: str) -> UnitStatus:
        if unit_id in self.ended:
            return UnitStatus(UnitPhase.FAILED, message="exited")
        return UnitStatus(UnitPhase.RUNNING if unit_id in self.pooled else UnitPhase.STOPPED)

    async def stop(self, unit_id: str) -> None:
        self.stopped.append(unit_id)
        self.pooled.pop(unit_id, None)

    def warm_all(self) -> None:
        self.warm.update(self.pooled)


async def filled(pool: UnitPool, launcher: RecordingLauncher) -> None:
    """Refills until a round starts nothing, every unit warming up at once."""
    while await pool.refill():
        launcher.warm_all()
    await pool.refill()  # notes the last one ready


async def test_the_pool_starts_one_unit_at_a_time_until_every_class_is_full() -> None:
    launcher = RecordingLauncher()
    pool = UnitPool(launcher, {"TEXERA_LAKE_CU_X": "1"}, [SMALL, LARGE], size=2)
    assert await pool.refill() == 1
    assert await pool.refill() == 0  # the first still warms up
    launcher.warm_all()
    await filled(pool, launcher)
    assert pool.counts() == {SMALL: (2, 2), LARGE: (2, 2)}
    sizes = sorted((spec.cores, spec.memory_mib) for spec in launcher.pooled.values())
    assert sizes == [(1, 1024), (1, 1024), (2, 4096), (2, 4096)]
    for spec in launcher.pooled.values():
        assert spec.owner_user_id == ""
        assert not spec.secrets
        assert spec.settings == {"TEXERA_LAKE_CU_X": "1"}


async def test_a_launch_takes_a_ready_unit_first_and_never_one_taken_before() -> None:
    launcher = RecordingLauncher()
    pool = UnitPool(launcher, {}, [SMALL], size=2)
    await pool.refill()
    [first] = launcher.pooled
    launcher.warm_all()
    await pool.refill()  # the first is noted ready; a second starts
    second = next(pool_id for pool_id in launcher.pooled if pool_id != first)

    assert pool.take(2, 4096) is None  # no class of this size
    assert pool.take(1, 1024) == first  # ready
    assert pool.take(1, 1024) == second  # still warming, but pooled
    assert pool.take(1, 1024) is None


async def test_a_pooled_unit_that_ended_is_stopped_and_replaced() -> None:
    launcher = RecordingLauncher()
    pool = UnitPool(launcher, {}, [SMALL], size=1)
    await filled(pool, launcher)
    [crashed] = launcher.pooled
    launcher.ended.add(crashed)
    assert await pool.refill() == 1
    assert crashed in launcher.stopped
    [replacement] = launcher.pooled
    assert replacement != crashed
    assert pool.counts() == {SMALL: (1, 0)}


async def test_closing_stops_every_pooled_unit() -> None:
    launcher = RecordingLauncher()
    pool = UnitPool(launcher, {}, [SMALL, LARGE], size=1)
    await filled(pool, launcher)
    started = set(launcher.pooled)
    await pool.close()
    assert set(launcher.stopped) == started
    assert pool.counts() == {SMALL: (0, 0), LARGE: (0, 0)}


@pytest.mark.parametrize(
    ("text", "classes"),
    [
        ("", []),
        ("1x1024", [SMALL]),
        (" 1x1024 , 2x4096,1x1024", [SMALL, LARGE]),
    ],
)
def test_size_classes_are_read_as_cores_x_memory(text: str, classes: list[SizeClass]) -> None:
    assert SizeClass.parse_list(text) == classes


@pytest.mark.parametrize("text", ["1024", "0x1024", "1x100", "2x", "ax1024", "1x1024x2"])
def test_a_malformed_size_class_is_named(text: str) -> None:
    with pytest.raises(ValueError, match=repr(text.split(",", maxsplit=1)[0])):
        SizeClass.parse_list(text)


async def test_a_unit_taken_while_a_refill_looks_at_it_is_left_to_its_taker() -> None:
    """A take between a refill's question to the launcher and its answer: the refill neither
    replaces nor readies the unit, which is no longer the pool's."""
    launcher = RecordingLauncher()
    pool = UnitPool(launcher, {}, [SMALL], size=1)
    await filled(pool, launcher)
    [pooled] = launcher.pooled
    asked = launcher.status

    async def taken_while_asked(unit_id: str) -> UnitStatus:
        assert pool.take(1, 1024) == pooled
        launcher.pooled.pop(unit_id)  # handed over: the launcher knows it by another id now
        return await asked(unit_id)

    launcher.status = taken_while_asked  # type: ignore[method-assign]
    await pool.refill()
    assert pooled not in launcher.stopped
    assert pool.counts() == {SMALL: (1, 0)}  # a new one, warming


async def test_a_pooled_unit_that_never_warms_up_is_replaced() -> None:
    launcher = RecordingLauncher()
    pool = UnitPool(launcher, {}, [SMALL], size=1, warm_timeout_seconds=0.0)
    await pool.refill()
    [stuck] = launcher.pooled
    await pool.refill()
    assert stuck in launcher.stopped
    [replacement] = launcher.pooled
    assert replacement != stuck


class SurvivingLauncher(RecordingLauncher):
    """Pooled units that outlive the registry (Pods): a new pool finds them."""

    async def pooled_units(self) -> list[tuple[str, SizeClass]]:
        return [
            (pool_id, SizeClass(spec.cores, spec.memory_mib))
            for pool_id, spec in self.pooled.items()
        ]


async def test_a_new_pool_keeps_the_units_it_finds_of_its_classes_and_stops_the_rest() -> None:
    launcher = SurvivingLauncher()
    before = UnitPool(launcher, {}, [SMALL, LARGE], size=2)
    await filled(before, launcher)
    assert len(launcher.pooled) == 4

    after = UnitPool(launcher, {}, [SMALL], size=1)  # the registry restarted, smaller
    assert await after.refill() == 0  # one SMALL kept, nothing to start

    assert after.counts() == {SMALL: (1, 1)}
    assert len(launcher.stopped) == 3
    kept = after.take(1, 1024)
    assert kept in launcher.pooled
    assert launcher.pooled[kept].memory_mib == 1024

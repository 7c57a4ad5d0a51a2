"""The interface every launcher of computing units implements.

The registry decides that a unit should run (created, or needed again after it
stopped while idle) and hands a launcher a ``UnitSpec``; the launcher starts the
unit where it runs (a local process tree, a Kubernetes Pod), reports its phase and
address, and stops it. A launcher never sees more than one unit's secrets at a
time and delivers them only as files the unit alone can read: each entry of
``UnitSpec.secrets`` is written to a file, and the unit is told the file's path
in the setting of the same name with ``_FILE`` appended.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from unit_launcher.size_class import SizeClass

#: The launchers there are, by the name TEXERA_LAKE_WAREHOUSE_UNIT_LAUNCHER gives.
LAUNCHERS = ("process", "kubernetes")


class UnitPhase(enum.Enum):
    """Where a launched unit is in its life."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    FAILED = "FAILED"


@dataclass(frozen=True)
class UnitSpec:
    """Everything a launcher needs to run one computing unit."""

    #: The unit's id: lowercase letters, digits and '-', at most 40 characters, so that it
    #: can name OS users and Kubernetes objects as it is.
    unit_id: str
    owner_user_id: str
    cores: int
    memory_mib: int
    #: ``TEXERA_LAKE_*`` settings of the unit process; never a secret.
    settings: Mapping[str, str] = field(default_factory=dict)
    #: Secrets by setting name (for example ``TEXERA_LAKE_CU_CREDENTIAL``): each is written
    #: to a file only the unit can read, and the setting's ``_FILE`` variant names the file.
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class UnitStatus:
    """What a launcher knows of a unit."""

    phase: UnitPhase
    #: host:port at which the unit serves gRPC; empty until known.
    address: str = ""
    #: Why the unit failed or stopped, for people; never a secret.
    message: str = ""


class PoolUnsupported(Exception):
    """This launcher keeps no pool of started units."""


class Launcher(abc.ABC):
    """Starts, observes and stops computing units of one kind of platform.

    A launcher may also keep started units in a pool (see unit_launcher.hand_over): it
    starts one with launch_pooled, under an id of the pool's, and later hands it over to a
    user's unit with hand_over, after which it is known by that unit's id alone."""

    @abc.abstractmethod
    async def launch(self, spec: UnitSpec) -> UnitStatus:
        """Starts the unit (a unit already running under the same id is replaced)."""

    @abc.abstractmethod
    async def status(self, unit_id: str) -> UnitStatus:
        """The unit's phase now; STOPPED for a unit this launcher does not know."""

    @abc.abstractmethod
    async def stop(self, unit_id: str) -> None:
        """Stops the unit and removes what was made for it; stopping twice is a no-op."""

    async def launch_pooled(self, spec: UnitSpec) -> None:
        """Starts a unit that warms up and waits for its identity; spec names the pool's id
        for it, its size and its settings, and holds no secret and no owner."""
        raise PoolUnsupported(f"the {type(self).__name__} keeps no pool of started units")

    async def pooled_ready(self, pool_id: str) -> bool:
        """The pooled unit is warm and waits for its identity."""
        raise PoolUnsupported(f"the {type(self).__name__} keeps no pool of started units")

    async def hand_over(self, pool_id: str, spec: UnitSpec) -> UnitStatus:
        """Makes the pooled unit the unit spec describes (its id, owner and secrets); raises
        HandOverFailed if the pooled unit does not take it (it is then stopped)."""
        raise PoolUnsupported(f"the {type(self).__name__} keeps no pool of started units")

    async def pooled_units(self) -> list[tuple[str, SizeClass]]:
        """Pooled units this launcher finds started and not handed over (by a registry
        before this one, whose pool they were), with their size classes. None for a
        launcher whose pooled units end with the registry."""
        return []

    async def close(self) -> None:  # noqa: B027 - launchers without resources need no close
        """Releases what the launcher holds (it does not stop units)."""

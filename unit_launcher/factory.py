"""The launcher a deployment uses, chosen by name (TEXERA_LAKE_WAREHOUSE_UNIT_LAUNCHER)."""

from __future__ import annotations

import importlib
from pathlib import Path

from unit_launcher.base import LAUNCHERS, Launcher
from unit_launcher.cpu_groups import CpuGroups
from unit_launcher.kubernetes_settings import KubernetesLauncherSettings
from unit_launcher.process import ProcessLauncher
from unit_launcher.unit_groups import UnitGroups


def launcher_named(
    name: str,
    *,
    root: Path,
    host: str,
    advertised_host: str = "",
    cpu_groups: CpuGroups | None = None,
    unit_groups: UnitGroups | None = None,
) -> Launcher:
    """``process``: local process trees with their folders under root (each weighted in its
    cgroup of cpu_groups and bounded in its groups of unit_groups, if given); ``kubernetes``:
    a Pod per unit, configured by its own settings (imported only when chosen)."""
    if name == "process":
        return ProcessLauncher(
            root,
            host=host,
            advertised_host=advertised_host,
            cpu_groups=cpu_groups,
            unit_groups=unit_groups,
        )
    if name == "kubernetes":
        kubernetes = importlib.import_module("unit_launcher.kubernetes")
        settings = KubernetesLauncherSettings.from_env()
        launcher: Launcher = kubernetes.KubernetesLauncher.from_settings(settings)
        return launcher
    raise ValueError(f"unknown unit launcher {name!r}: expected one of {', '.join(LAUNCHERS)}")

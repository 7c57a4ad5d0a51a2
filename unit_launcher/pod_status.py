"""A unit's phase, read from its Pod as the Kubernetes API returns it (no API calls)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unit_launcher.base import UnitPhase, UnitStatus

#: Reasons a container waits that will not go away without a change to the Pod.
FAILED_WAITING_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
    }
)


def pod_status(pod: Mapping[str, Any], address: str) -> UnitStatus:
    """The phase of the unit running in ``pod``; ``address`` is where it serves once running.

    Messages come from the kubelet (reasons, exit codes), never from what the unit wrote.
    """
    status = pod.get("status") or {}
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return UnitStatus(UnitPhase.STOPPED, message="the unit's Pod is being deleted")
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in FAILED_WAITING_REASONS:
            return UnitStatus(UnitPhase.FAILED, message=_waiting_message(waiting, container))
    phase = status.get("phase", "Pending")
    if phase == "Running":
        ready = _condition(status, "Ready")
        return UnitStatus(UnitPhase.RUNNING if ready else UnitPhase.PENDING, address=address)
    if phase == "Succeeded":
        return UnitStatus(UnitPhase.STOPPED, message="the unit exited")
    if phase == "Failed":
        return UnitStatus(UnitPhase.FAILED, message=_failure_message(status))
    return UnitStatus(UnitPhase.PENDING, address=address)


def _condition(status: Mapping[str, Any], kind: str) -> bool:
    return any(
        condition.get("type") == kind and condition.get("status") == "True"
        for condition in status.get("conditions") or []
    )


def _waiting_message(waiting: Mapping[str, Any], container: Mapping[str, Any]) -> str:
    message = str(waiting["reason"])
    last = (container.get("lastState") or {}).get("terminated")
    if last:
        message += f" (last exit: {_terminated(last)})"
    return message


def _failure_message(status: Mapping[str, Any]) -> str:
    for container in status.get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            return f"the unit stopped: {_terminated(terminated)}"
    reason = status.get("reason")
    return f"the unit's Pod failed: {reason}" if reason else "the unit's Pod failed"


def _terminated(terminated: Mapping[str, Any]) -> str:
    reason = terminated.get("reason") or "Error"
    return f"{reason}, exit code {terminated.get('exitCode', '?')}"

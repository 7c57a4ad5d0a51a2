"""Computing units as Kubernetes Pods, through the official ``kubernetes`` client.

The objects come from ``unit_launcher.pod_manifests``; this module only sends them. The
client is synchronous, so every call runs in a worker thread. Needs the ``kubernetes`` extra.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from service_runtime.config import ConfigError
from unit_launcher.base import Launcher, UnitPhase, UnitSpec, UnitStatus
from unit_launcher.kubernetes_settings import KubernetesLauncherSettings
from unit_launcher.pod_manifests import (
    Manifest,
    UnitManifests,
    build_unit,
    object_name,
    owned_by,
    unit_address,
)
from unit_launcher.pod_status import pod_status

#: Kinds of a unit's objects, in the order ``stop`` deletes them (the Pod first: it stops
#: the unit at once; the others would go with it anyway, through their owner reference).
KINDS = ("Pod", "Secret", "Service", "NetworkPolicy")


class KubernetesError(Exception):
    """The API server refused or failed a call; the message names the call, never a body."""


class _Conflict(KubernetesError):
    """An object of the unit exists already."""


class KubernetesLauncher(Launcher):
    """Runs each unit as a Pod in ``settings.namespace``."""

    def __init__(
        self,
        settings: KubernetesLauncherSettings,
        api_client: client.ApiClient,
        *,
        poll_seconds: float = 1.0,
        replace_timeout_seconds: float = 120.0,
    ) -> None:
        settings.validate()
        self._settings = settings
        self._api_client = api_client
        self._poll_seconds = poll_seconds
        self._replace_timeout_seconds = replace_timeout_seconds
        core = client.CoreV1Api(api_client)
        networking = client.NetworkingV1Api(api_client)
        self._create: dict[str, Callable[..., Any]] = {
            "Pod": core.create_namespaced_pod,
            "Secret": core.create_namespaced_secret,
            "Service": core.create_namespaced_service,
            "NetworkPolicy": networking.create_namespaced_network_policy,
        }
        self._delete: dict[str, Callable[..., Any]] = {
            "Pod": core.delete_namespaced_pod,
            "Secret": core.delete_namespaced_secret,
            "Service": core.delete_namespaced_service,
            "NetworkPolicy": networking.delete_namespaced_network_policy,
        }
        self._read_pod: Callable[..., Any] = core.read_namespaced_pod

    @classmethod
    def from_settings(cls, settings: KubernetesLauncherSettings) -> KubernetesLauncher:
        """A launcher with the Pod's service account, or the kubeconfig the settings name."""
        configuration = client.Configuration()
        try:
            if settings.kubeconfig:
                config.load_kube_config(
                    config_file=settings.kubeconfig,
                    client_configuration=configuration,
                    persist_config=False,
                )
            else:
                config.load_incluster_config(client_configuration=configuration)
        except (config.ConfigException, OSError) as exc:
            where = settings.kubeconfig or "empty, and no service account is mounted"
            raise ConfigError(
                f"{settings.variable('kubeconfig')} ({where}): no Kubernetes API to use: {exc}"
            ) from None
        return cls(settings, client.ApiClient(configuration))

    async def launch(self, spec: UnitSpec) -> UnitStatus:
        manifests = build_unit(spec, self._settings)
        try:
            await self._create_all(spec.unit_id, manifests)
        except _Conflict:
            # A unit of the same id runs (or is going away): replace it.
            await self.stop(spec.unit_id)
            await self._wait_until_gone(spec.unit_id)
            await self._create_all(spec.unit_id, manifests)
        return UnitStatus(UnitPhase.PENDING, address=unit_address(spec.unit_id, self._settings))

    async def status(self, unit_id: str) -> UnitStatus:
        pod = await self._read(unit_id)
        if pod is None:
            return UnitStatus(UnitPhase.STOPPED)
        return pod_status(pod, unit_address(unit_id, self._settings))

    async def stop(self, unit_id: str) -> None:
        namespace = self._settings.namespace
        for kind in KINDS:
            await self._call(f"delete {kind}", self._delete[kind], object_name(unit_id), namespace)

    async def close(self) -> None:
        await asyncio.to_thread(self._api_client.close)

    async def _create_all(self, unit_id: str, manifests: UnitManifests) -> None:
        """Creates the Pod, then what it owns; nothing is left behind if a step fails.

        The Pod's container starts only once its Secret exists (the kubelet waits for the
        volume), and until its NetworkPolicy exists the namespace's default deny holds it.
        """
        pod = await self._create_object(manifests.pod)
        try:
            for dependent in manifests.dependents:
                await self._create_object(owned_by(dependent, pod))
        except BaseException:
            await asyncio.shield(self.stop(unit_id))
            raise

    async def _create_object(self, manifest: Manifest) -> dict[str, Any]:
        kind = manifest["kind"]
        namespace = self._settings.namespace
        created = await self._call(f"create {kind}", self._create[kind], namespace, manifest)
        if created is None:  # only a create of a missing namespace answers 404
            raise KubernetesError(f"namespace {namespace} does not exist")
        return created

    async def _read(self, unit_id: str) -> dict[str, Any] | None:
        return await self._call(
            "read Pod", self._read_pod, object_name(unit_id), self._settings.namespace
        )

    async def _wait_until_gone(self, unit_id: str) -> None:
        deadline = time.monotonic() + self._replace_timeout_seconds
        while await self._read(unit_id) is not None:
            if time.monotonic() > deadline:
                raise KubernetesError(
                    f"the Pod of unit {unit_id} was still there "
                    f"{self._replace_timeout_seconds:g} s after its deletion"
                )
            await asyncio.sleep(self._poll_seconds)

    async def _call(
        self, action: str, method: Callable[..., Any], *arguments: Any
    ) -> dict[str, Any] | None:
        """One API call in a worker thread: the answer's JSON, or None for 404."""

        def call() -> dict[str, Any] | None:
            try:
                response = method(*arguments, _preload_content=False)
            except ApiException as exc:
                if exc.status == 404:
                    return None
                error = _Conflict if exc.status == 409 else KubernetesError
                # Never the answer's body: it may quote what was sent.
                raise error(
                    f"Kubernetes answered {exc.status} {exc.reason} to {action} "
                    f"in namespace {self._settings.namespace}"
                ) from None
            answer: dict[str, Any] = json.loads(response.data)
            return answer

        return await asyncio.to_thread(call)

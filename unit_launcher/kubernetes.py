"""Computing units as Kubernetes Pods, through the official ``kubernetes`` client.

The objects come from ``unit_launcher.pod_manifests``; this module only sends them. The
client is synchronous, so every call runs in a worker thread. Needs the ``kubernetes`` extra.

A unit's Pod is found by its unit label, not its name: a Pod of the warm pool keeps the name
it was started under and takes the unit's labels when it is handed over. The hand-over
creates the unit's Service and NetworkPolicy (owned by the Pod), relabels the Pod (refused if
anyone changed it since it was read: one Pod goes to one unit), then delivers the unit's
identity and secrets through exec to ``texera-lake-cu-hand-over`` in the Pod.
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
from unit_launcher.hand_over import HandOverFailed
from unit_launcher.kubernetes_settings import KubernetesLauncherSettings
from unit_launcher.pod_exec import ExecFailed, run_in_pod
from unit_launcher.pod_manifests import (
    UNIT_CONTAINER,
    Manifest,
    UnitManifests,
    build_unit,
    check_spec,
    hand_over_patch,
    identity,
    network_policy_manifest,
    object_name,
    owned_by,
    pool_label,
    pooled_pod_manifest,
    service_manifest,
    unit_address,
    unit_label,
)
from unit_launcher.pod_status import pod_status
from unit_launcher.size_class import SizeClass

#: Kinds of a unit's objects, in the order ``stop`` deletes them (the Pod first: it stops
#: the unit at once; the others would go with it anyway, through their owner reference).
KINDS = ("Pod", "Secret", "Service", "NetworkPolicy")
#: The command in a pooled unit's image that takes its hand-over (unit_launcher.pod_hand_over).
HAND_OVER_COMMAND = "texera-lake-cu-hand-over"
#: How long asking a pooled Pod whether it is ready may take.
READY_EXEC_SECONDS = 15.0


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
        hand_over_seconds: float = 60.0,
    ) -> None:
        settings.validate()
        self._settings = settings
        self._api_client = api_client
        self._poll_seconds = poll_seconds
        self._replace_timeout_seconds = replace_timeout_seconds
        self._hand_over_seconds = hand_over_seconds
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
        self._list_pods: Callable[..., Any] = core.list_namespaced_pod
        self._patch_pod: Callable[..., Any] = core.patch_namespaced_pod

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
        await self._create_replacing(spec.unit_id, build_unit(spec, self._settings))
        return UnitStatus(UnitPhase.PENDING, address=unit_address(spec.unit_id, self._settings))

    async def status(self, unit_id: str) -> UnitStatus:
        pods = await self._pods(unit_id)
        if not pods:
            return UnitStatus(UnitPhase.STOPPED)
        # A replaced unit's Pod may still be going away beside its successor.
        pod = next((pod for pod in pods if not _deleting(pod)), pods[0])
        return pod_status(pod, unit_address(unit_id, self._settings))

    async def stop(self, unit_id: str) -> None:
        namespace = self._settings.namespace
        pods = {pod["metadata"]["name"] for pod in await self._pods(unit_id)}
        for name in sorted(pods):
            await self._call("delete Pod", self._delete["Pod"], name, namespace)
        for kind in KINDS[1:]:
            await self._call(f"delete {kind}", self._delete[kind], object_name(unit_id), namespace)

    async def launch_pooled(self, spec: UnitSpec) -> None:
        pod = pooled_pod_manifest(spec, self._settings)
        await self._create_replacing(spec.unit_id, UnitManifests(pod=pod, dependents=()))

    async def pooled_ready(self, pool_id: str) -> bool:
        if await self._pooled_pod(pool_id) is None:
            return False
        try:
            return await self._exec(pool_id, ["ready"], None, READY_EXEC_SECONDS) == 0
        except ExecFailed:
            return False

    async def hand_over(self, pool_id: str, spec: UnitSpec) -> UnitStatus:
        check_spec(spec)
        pod = await self._pooled_pod(pool_id)
        if pod is None:
            raise HandOverFailed(f"no running pooled unit {pool_id}")
        await self.stop(spec.unit_id)
        try:
            for dependent in (service_manifest, network_policy_manifest):
                await self._create_object(owned_by(dependent(spec, self._settings), pod))
            await self._call(
                "patch Pod",
                self._patch_pod,
                object_name(pool_id),
                self._settings.namespace,
                hand_over_patch(pod, spec, self._settings),
                _content_type="application/merge-patch+json",
            )
            message = json.dumps(
                {"variables": identity(spec, self._settings), "secrets": spec.secrets}
            )
            status = await self._exec(
                pool_id,
                ["take", "--wait", str(self._hand_over_seconds)],
                message,
                self._hand_over_seconds + READY_EXEC_SECONDS,
            )
            if status != 0:
                raise HandOverFailed(f"the pooled unit refused its hand-over (exit {status})")
        except (HandOverFailed, KubernetesError, ExecFailed) as exc:
            # Whichever of the two the Pod is known by now; a Pod another registry took in
            # the meantime is neither.
            await asyncio.shield(self._stop_both(pool_id, spec.unit_id))
            raise HandOverFailed(str(exc)) from exc
        return UnitStatus(UnitPhase.PENDING, address=unit_address(spec.unit_id, self._settings))

    async def pooled_units(self) -> list[tuple[str, SizeClass]]:
        label = pool_label(self._settings)
        pods = await self._select(label)
        unit = unit_label(self._settings)
        found = []
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            try:
                (size_class,) = SizeClass.parse_list(labels.get(label, ""))
            except ValueError:
                continue
            if not _deleting(pod) and labels.get(unit):
                found.append((labels[unit], size_class))
        return found

    async def _stop_both(self, pool_id: str, unit_id: str) -> None:
        await self.stop(unit_id)
        await self.stop(pool_id)

    async def _pooled_pod(self, pool_id: str) -> dict[str, Any] | None:
        """The pooled Pod, if it runs and is not handed over yet."""
        pod = await self._call(
            "read Pod", self._read_pod, object_name(pool_id), self._settings.namespace
        )
        if (
            pod is None
            or pool_label(self._settings) not in (pod["metadata"].get("labels") or {})
            or pod_status(pod, "").phase is not UnitPhase.RUNNING
        ):
            return None
        return pod

    async def _exec(
        self, pool_id: str, arguments: list[str], line: str | None, seconds: float
    ) -> int:
        return await asyncio.to_thread(
            run_in_pod,
            self._api_client.configuration,
            self._settings.namespace,
            object_name(pool_id),
            UNIT_CONTAINER,
            [HAND_OVER_COMMAND, *arguments],
            line=line,
            timeout_seconds=seconds,
        )

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

    async def _pods(self, unit_id: str) -> list[dict[str, Any]]:
        """The Pods labelled as the unit's (more than one while one replaces another)."""
        return await self._select(f"{unit_label(self._settings)}={unit_id}")

    async def _select(self, selector: str) -> list[dict[str, Any]]:
        answer = await self._call(
            "list Pods", self._list_pods, self._settings.namespace, label_selector=selector
        )
        if answer is None:
            raise KubernetesError(f"namespace {self._settings.namespace} does not exist")
        items: list[dict[str, Any]] = answer.get("items") or []
        return items

    async def _create_replacing(self, unit_id: str, manifests: UnitManifests) -> None:
        """Creates the unit's objects, first stopping a unit of the same id (the same name, or
        a pooled Pod handed over to that id)."""
        if await self._pods(unit_id):
            await self.stop(unit_id)
            await self._wait_until_gone(unit_id)
        try:
            await self._create_all(unit_id, manifests)
        except _Conflict:  # one came meanwhile, or its objects are still going away
            await self.stop(unit_id)
            await self._wait_until_gone(unit_id)
            await self._create_all(unit_id, manifests)

    async def _wait_until_gone(self, unit_id: str) -> None:
        deadline = time.monotonic() + self._replace_timeout_seconds
        while await self._pods(unit_id):
            if time.monotonic() > deadline:
                raise KubernetesError(
                    f"the Pod of unit {unit_id} was still there "
                    f"{self._replace_timeout_seconds:g} s after its deletion"
                )
            await asyncio.sleep(self._poll_seconds)

    async def _call(
        self, action: str, method: Callable[..., Any], *arguments: Any, **options: Any
    ) -> dict[str, Any] | None:
        """One API call in a worker thread: the answer's JSON, or None for 404."""

        def call() -> dict[str, Any] | None:
            try:
                response = method(*arguments, _preload_content=False, **options)
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


def _deleting(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))

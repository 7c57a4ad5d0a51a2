"""The Kubernetes launcher's calls to the API server, recorded.

No cluster can run here, so the API server is faked (tests/unit/kubernetes_fake.py): an HTTP
server on loopback that answers create, get and delete of Pods, Secrets, Services and
NetworkPolicies as Kubernetes does. The launcher talks to it through the real
``kubernetes.client`` pointed at it with ``Configuration(host=...)``; the tests assert the
exact sequence and bodies of the calls.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import pytest
from kubernetes import client

from service_runtime.config import ConfigError
from tests.unit.kubernetes_fake import FakeKubernetesApi, Request
from unit_launcher.base import UnitPhase, UnitSpec, UnitStatus
from unit_launcher.kubernetes import KubernetesError, KubernetesLauncher
from unit_launcher.kubernetes_settings import KubernetesLauncherSettings
from unit_launcher.pod_manifests import build_unit, owned_by

NAMESPACE = "units-under-test"
SETTINGS = KubernetesLauncherSettings(namespace=NAMESPACE)
CORE = f"/api/v1/namespaces/{NAMESPACE}"
NETWORKING = f"/apis/networking.k8s.io/v1/namespaces/{NAMESPACE}"
CREDENTIAL = "unit-credential-that-must-stay-in-its-secret"
SPEC = UnitSpec(
    unit_id="cu-7",
    owner_user_id="42",
    cores=2,
    memory_mib=4096,
    settings={"TEXERA_LAKE_REGISTRY_TARGET": "registry.texera-lake.svc:50051"},
    secrets={"TEXERA_LAKE_CU_CREDENTIAL": CREDENTIAL},
)
ADDRESS = f"unit-cu-7.{NAMESPACE}.svc:50052"


def list_pods(selector: str) -> Request:
    return Request("GET", f"{CORE}/pods?{urlencode({'labelSelector': selector})}")


#: A unit's Pods are found by its label (a pooled Pod keeps its name when handed over).
LIST_PODS = list_pods(f"{SETTINGS.label_prefix}/unit=cu-7")
#: What stopping cu-7 deletes once its Pod was found.
DELETES = [
    Request("DELETE", f"{CORE}/pods/unit-cu-7"),
    Request("DELETE", f"{CORE}/secrets/unit-cu-7"),
    Request("DELETE", f"{CORE}/services/unit-cu-7"),
    Request("DELETE", f"{NETWORKING}/networkpolicies/unit-cu-7"),
]


@dataclass
class Cluster:
    api: FakeKubernetesApi
    launcher: KubernetesLauncher


@pytest.fixture
def cluster(api: FakeKubernetesApi, url: str) -> Iterator[Cluster]:
    api_client = client.ApiClient(client.Configuration(host=url))
    yield Cluster(api, KubernetesLauncher(SETTINGS, api_client, poll_seconds=0.01))
    api_client.close()


def _creates(pod_uid: str) -> list[Request]:
    """The calls of one launch of SPEC: the Pod, then what it owns."""
    manifests = build_unit(SPEC, SETTINGS)
    pod = {"metadata": {"name": "unit-cu-7", "uid": pod_uid}}
    secret, service, policy = (owned_by(manifest, pod) for manifest in manifests.dependents)
    return [
        Request("POST", f"{CORE}/pods", manifests.pod),
        Request("POST", f"{CORE}/secrets", secret),
        Request("POST", f"{CORE}/services", service),
        Request("POST", f"{NETWORKING}/networkpolicies", policy),
    ]


def _pod_uid(api: FakeKubernetesApi) -> str:
    uid: str = api.objects[(NAMESPACE, "pods", "unit-cu-7")]["metadata"]["uid"]
    return uid


async def test_launch_creates_the_pod_then_what_it_owns(cluster: Cluster) -> None:
    status = await cluster.launcher.launch(SPEC)

    assert status == UnitStatus(UnitPhase.PENDING, address=ADDRESS)
    assert cluster.api.take_requests() == [LIST_PODS, *_creates(_pod_uid(cluster.api))]
    secret = cluster.api.objects[(NAMESPACE, "secrets", "unit-cu-7")]
    assert base64.b64decode(secret["data"]["TEXERA_LAKE_CU_CREDENTIAL"]).decode() == CREDENTIAL
    pod = cluster.api.objects[(NAMESPACE, "pods", "unit-cu-7")]
    assert CREDENTIAL not in json.dumps(pod)


async def test_status_follows_the_pod_through_its_phases(cluster: Cluster) -> None:
    await cluster.launcher.launch(SPEC)
    cluster.api.take_requests()
    container = {"name": "unit", "ready": False, "restartCount": 0}

    def kubelet_reports(status: dict[str, object]) -> None:
        cluster.api.set_pod_status(NAMESPACE, "unit-cu-7", status)

    assert await cluster.launcher.status("cu-7") == UnitStatus(UnitPhase.PENDING, address=ADDRESS)

    kubelet_reports(
        {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [{**container, "state": {"running": {}}}],
        }
    )
    assert await cluster.launcher.status("cu-7") == UnitStatus(UnitPhase.PENDING, address=ADDRESS)

    kubelet_reports(
        {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{**container, "ready": True, "state": {"running": {}}}],
        }
    )
    assert await cluster.launcher.status("cu-7") == UnitStatus(UnitPhase.RUNNING, address=ADDRESS)

    kubelet_reports(
        {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {
                    **container,
                    "restartCount": 4,
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                    "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
                }
            ],
        }
    )
    assert await cluster.launcher.status("cu-7") == UnitStatus(
        UnitPhase.FAILED, message="CrashLoopBackOff (last exit: OOMKilled, exit code 137)"
    )

    kubelet_reports(
        {
            "phase": "Succeeded",
            "containerStatuses": [
                {**container, "state": {"terminated": {"reason": "Completed", "exitCode": 0}}}
            ],
        }
    )
    assert (await cluster.launcher.status("cu-7")).phase is UnitPhase.STOPPED

    assert cluster.api.take_requests() == [LIST_PODS] * 5


async def test_stop_deletes_everything_and_stopping_twice_is_a_no_op(cluster: Cluster) -> None:
    await cluster.launcher.launch(SPEC)
    cluster.api.take_requests()

    await cluster.launcher.stop("cu-7")
    assert cluster.api.take_requests() == [LIST_PODS, *DELETES]
    # The Pod terminates gracefully: it is still there, being deleted, then gone.
    assert await cluster.launcher.status("cu-7") == UnitStatus(
        UnitPhase.STOPPED, message="the unit's Pod is being deleted"
    )
    assert await cluster.launcher.status("cu-7") == UnitStatus(UnitPhase.STOPPED)
    assert cluster.api.names(NAMESPACE) == set()

    cluster.api.take_requests()
    await cluster.launcher.stop("cu-7")  # no Pod, and every delete answers 404: nothing to do
    assert cluster.api.take_requests() == [LIST_PODS, *DELETES[1:]]


async def test_status_of_an_unknown_unit_is_stopped(cluster: Cluster) -> None:
    assert await cluster.launcher.status("never-launched") == UnitStatus(UnitPhase.STOPPED)


async def test_launch_replaces_a_unit_running_under_the_same_id(cluster: Cluster) -> None:
    await cluster.launcher.launch(SPEC)
    first_uid = _pod_uid(cluster.api)
    cluster.api.take_requests()

    status = await cluster.launcher.launch(SPEC)

    assert status == UnitStatus(UnitPhase.PENDING, address=ADDRESS)
    second_uid = _pod_uid(cluster.api)
    assert second_uid != first_uid
    # The unit's Pod is there: delete everything, wait for the terminating Pod to be gone,
    # create anew.
    assert cluster.api.take_requests() == [
        *[LIST_PODS, LIST_PODS, *DELETES],
        *[LIST_PODS, LIST_PODS],
        *_creates(second_uid),
    ]
    owner = cluster.api.objects[(NAMESPACE, "secrets", "unit-cu-7")]["metadata"]
    assert owner["ownerReferences"][0]["uid"] == second_uid


async def test_a_failed_create_leaves_nothing_behind(cluster: Cluster) -> None:
    cluster.api.grace_reads = 0
    cluster.api.fail_next_create("services", 500)

    with pytest.raises(KubernetesError) as failure:
        await cluster.launcher.launch(SPEC)

    assert str(failure.value) == (
        f"Kubernetes answered 500 Internal Server Error to create Service in namespace {NAMESPACE}"
    )
    requests = cluster.api.take_requests()
    assert requests == [LIST_PODS, *_creates(_uid_of(requests[2]))[:3], LIST_PODS, *DELETES]
    assert cluster.api.names(NAMESPACE) == set()


async def test_a_refused_call_names_the_call_and_never_what_was_sent(cluster: Cluster) -> None:
    cluster.api.fail_next_create("pods", 403)

    with pytest.raises(KubernetesError) as failure:
        await cluster.launcher.launch(SPEC)

    assert str(failure.value) == (
        f"Kubernetes answered 403 Forbidden to create Pod in namespace {NAMESPACE}"
    )
    assert failure.value.__suppress_context__  # the client's exception, with the body, is not shown
    assert CREDENTIAL not in str(failure.value)


def _uid_of(request: Request) -> str:
    uid: str = request.body["metadata"]["ownerReferences"][0]["uid"]
    return uid


async def test_a_unit_that_will_not_go_away_is_not_replaced_for_ever(
    api: FakeKubernetesApi, url: str
) -> None:
    api.grace_reads = 1000  # the old Pod stays, terminating
    api_client = client.ApiClient(client.Configuration(host=url))
    launcher = KubernetesLauncher(
        SETTINGS, api_client, poll_seconds=0.01, replace_timeout_seconds=0.2
    )
    await launcher.launch(SPEC)

    with pytest.raises(KubernetesError, match=r"still there 0\.2 s after its deletion"):
        await launcher.launch(SPEC)
    await launcher.close()


async def test_from_settings_outside_a_cluster_uses_the_kubeconfig_named(
    api: FakeKubernetesApi, url: str, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": url}}],
                "users": [{"name": "registry", "user": {"token": "a-bearer-token"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "registry"}}],
                "current-context": "fake",
            }
        )
    )
    settings = dataclasses.replace(SETTINGS, kubeconfig=str(kubeconfig))

    launcher = KubernetesLauncher.from_settings(settings)
    assert await launcher.status("cu-7") == UnitStatus(UnitPhase.STOPPED)
    await launcher.close()

    assert api.take_requests() == [LIST_PODS]
    assert api.authorizations == ["Bearer a-bearer-token"]


@pytest.mark.parametrize("kubeconfig", ["", "/nonexistent/kubeconfig"])
def test_from_settings_without_an_api_to_use_names_the_setting(kubeconfig: str) -> None:
    settings = dataclasses.replace(SETTINGS, kubeconfig=kubeconfig)
    with pytest.raises(ConfigError, match="TEXERA_LAKE_WAREHOUSE_K8S_KUBECONFIG"):
        KubernetesLauncher.from_settings(settings)

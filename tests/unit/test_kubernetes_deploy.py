"""deploy/kubernetes/ is valid for the API and keeps the mesh confined.

No cluster runs here, so the manifests are checked as data: every document against the
Kubernetes OpenAPI schemas, then the rules that matter for security.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, documentation
from tests.unit.kubernetes_checks import confinement_problems, containers, pod_spec, validate
from unit_launcher.kubernetes_settings import KubernetesLauncherSettings, label_selector
from unit_launcher.pod_manifests import SECRET_SETTING_NAME, URL_WITH_PASSWORD

DEPLOY = ROOT / "deploy" / "kubernetes"
MESH, UNITS = "texera-lake", "texera-lake-units"
#: The one service account whose token is mounted: the registry launches units.
LAUNCHER_ACCOUNT = "texera-lake-warehouse-service"
LAUNCHER_VERBS = ["create", "get", "list", "watch", "delete"]


def _documents() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(DEPLOY.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            for document in yaml.safe_load_all(path.read_text()):
                yield path.name, document


DOCUMENTS = list(_documents())


def _kind(kind: str) -> list[dict[str, Any]]:
    return [document for _, document in DOCUMENTS if document["kind"] == kind]


def _named(kind: str, namespace: str, name: str) -> dict[str, Any]:
    [found] = [
        document
        for document in _kind(kind)
        if document["metadata"]["name"] == name
        and document["metadata"].get("namespace") == namespace
    ]
    return found


def _workloads() -> list[dict[str, Any]]:
    return [document for _, document in DOCUMENTS if pod_spec(document) is not None]


@pytest.mark.parametrize(
    "document",
    [document for _, document in DOCUMENTS],
    ids=[
        f"{file}:{document['kind']}/{document['metadata']['name']}" for file, document in DOCUMENTS
    ],
)
def test_every_document_fits_the_kubernetes_schemas(document: dict[str, Any]) -> None:
    validate(document)


def test_the_kustomization_applies_every_file() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    files = {path.name for path in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(files)


def test_namespaces_enforce_the_restricted_pod_security_standard() -> None:
    namespaces = {document["metadata"]["name"]: document for document in _kind("Namespace")}
    assert set(namespaces) == {MESH, UNITS}
    for name, namespace in namespaces.items():
        labels = namespace["metadata"]["labels"]
        for mode in ("enforce", "audit", "warn"):
            assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted", (name, mode)
    for _, document in DOCUMENTS:
        if document["kind"] != "Namespace":
            assert document["metadata"].get("namespace") in namespaces, document["metadata"]


def test_every_container_runs_confined() -> None:
    workloads = _workloads()
    assert {w["metadata"]["name"] for w in workloads} == {
        "gateway",
        "warehouse-service",
        "result-service",
    }
    for workload in workloads:
        spec = pod_spec(workload)
        assert spec is not None
        assert confinement_problems(workload["metadata"]["name"], spec) == []
        assert spec["securityContext"]["runAsUser"] == 10001
        assert spec["enableServiceLinks"] is False


def test_only_the_registry_mounts_a_service_account_token() -> None:
    for account in _kind("ServiceAccount"):
        mounted = account["metadata"]["name"] == LAUNCHER_ACCOUNT
        assert account["automountServiceAccountToken"] is mounted, account["metadata"]
    for workload in _workloads():
        spec = pod_spec(workload)
        assert spec is not None
        mounted = spec["serviceAccountName"] == LAUNCHER_ACCOUNT
        assert spec["automountServiceAccountToken"] is mounted, workload["metadata"]["name"]
        _named("ServiceAccount", MESH, spec["serviceAccountName"])


def test_the_launcher_may_do_exactly_what_it_does_in_the_units_namespace() -> None:
    [role] = _kind("Role")
    assert role["metadata"]["namespace"] == UNITS
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods", "secrets", "services"], "verbs": LAUNCHER_VERBS},
        {
            "apiGroups": ["networking.k8s.io"],
            "resources": ["networkpolicies"],
            "verbs": LAUNCHER_VERBS,
        },
    ]
    [binding] = _kind("RoleBinding")
    assert binding["metadata"]["namespace"] == UNITS
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": LAUNCHER_ACCOUNT, "namespace": MESH}
    ]
    assert _kind("ClusterRole") == _kind("ClusterRoleBinding") == []


def test_secrets_are_read_only_files_of_mode_0400_never_the_environment() -> None:
    assert _kind("Secret") == [], "secrets are made with kubectl, never committed"
    secret_volumes = 0
    for workload in _workloads():
        spec = pod_spec(workload)
        assert spec is not None
        secret_names = {v["name"] for v in spec["volumes"] if "secret" in v}
        for volume in spec["volumes"]:
            if "secret" in volume:
                secret_volumes += 1
                assert volume["secret"]["defaultMode"] == 0o400
        for container in containers(spec):
            for mount in container.get("volumeMounts", []):
                if mount["name"] in secret_names:
                    assert mount["readOnly"] is True
                    files = [
                        variable["value"]
                        for variable in container["env"]
                        if variable["name"].endswith("_FILE")
                    ]
                    assert files, "a mounted secret is named by a _FILE setting"
                    assert all(path.startswith(mount["mountPath"] + "/") for path in files)
    assert secret_volumes == 3  # the gateway's, the registry's and the result service's


def test_the_settings_config_map_holds_no_secret() -> None:
    [config_map] = _kind("ConfigMap")
    for key, value in config_map["data"].items():
        assert not SECRET_SETTING_NAME.search(key), key
        assert not URL_WITH_PASSWORD.search(value), key


def test_settings_in_the_manifests_are_documented() -> None:
    readme = documentation()
    [config_map] = _kind("ConfigMap")
    names = set(config_map["data"])
    for workload in _workloads():
        spec = pod_spec(workload)
        assert spec is not None
        for container in containers(spec):
            names |= {variable["name"] for variable in container.get("env", [])}
    for name in names:
        documented = f"`{name}`" in readme or f"`{name.removesuffix('_FILE')}`" in readme
        assert documented, f"{name} is not a documented setting"


def test_every_service_is_probed_over_grpc_health_on_its_port() -> None:
    for workload in _workloads():
        spec = pod_spec(workload)
        assert spec is not None
        for container in containers(spec):
            [grpc_port] = [p["containerPort"] for p in container["ports"] if p["name"] == "grpc"]
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                assert container[probe]["grpc"] == {"port": grpc_port}, (container["name"], probe)
            service = _named("Service", MESH, workload["metadata"]["name"])
            assert service["spec"]["selector"] == workload["spec"]["selector"]["matchLabels"]
            assert service["spec"]["ports"][0]["port"] == grpc_port


def test_each_namespace_denies_all_traffic_by_default() -> None:
    for namespace in (MESH, UNITS):
        deny = _named("NetworkPolicy", namespace, "default-deny")
        assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    for workload in _workloads():
        policy = _named("NetworkPolicy", MESH, workload["metadata"]["name"])
        assert policy["spec"]["podSelector"] == workload["spec"]["selector"]
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]


def test_only_the_gateway_is_open_to_anyone() -> None:
    for policy in _kind("NetworkPolicy"):
        for rule in policy["spec"].get("ingress", []):
            if "from" not in rule:
                assert policy["metadata"]["name"] == "gateway"
                assert rule["ports"] == [{"protocol": "TCP", "port": 50050}]


def test_the_launchers_settings_name_what_the_manifests_make() -> None:
    [config_map] = _kind("ConfigMap")
    settings = KubernetesLauncherSettings.from_env(config_map["data"])
    settings.validate()
    assert settings.namespace == UNITS
    assert settings.mesh_namespace == MESH
    _named("ServiceAccount", UNITS, settings.service_account)
    for selector, workload in (
        (settings.registry_selector, "warehouse-service"),
        (settings.gateway_selector, "gateway"),
    ):
        labels = _named("Deployment", MESH, workload)["spec"]["template"]["metadata"]["labels"]
        assert label_selector(selector).items() <= labels.items(), workload
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    [image] = kustomization["images"]
    assert settings.image == f"{image['newName']}:{image['newTag']}"

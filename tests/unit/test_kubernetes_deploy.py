"""deploy/kubernetes/ is valid for the API and keeps the mesh confined.

No cluster runs here, so the manifests are checked as data: every document against the
Kubernetes OpenAPI schemas, then the rules that matter for security.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, documentation
from tests.unit.deployment_settings import (
    SETTINGS_OF_COMMAND,
    missing_settings,
    required_secret_files,
    with_dummy_files,
)
from tests.unit.kubernetes_checks import confinement_problems, containers, pod_spec, validate
from unit_launcher.kubernetes_settings import (
    KubernetesLauncherSettings,
    cidr_list,
    label_selector,
    port_list,
)
from unit_launcher.pod_manifests import SECRET_SETTING_NAME, URL_WITH_PASSWORD
from warehouse_service.settings import WarehouseServiceSettings

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


def _environment(workload: dict[str, Any]) -> dict[str, str]:
    """What the workload's one container finds in its environment: the ConfigMaps it takes
    whole, then its own variables."""
    spec = pod_spec(workload)
    assert spec is not None
    [container] = spec["containers"]
    environment: dict[str, str] = {}
    for source in container.get("envFrom", []):
        name = source["configMapRef"]["name"]
        environment |= _named("ConfigMap", MESH, name)["data"]
    environment |= {variable["name"]: variable["value"] for variable in container.get("env", [])}
    return environment


def _command(workload: dict[str, Any]) -> str:
    spec = pod_spec(workload)
    assert spec is not None
    [container] = spec["containers"]
    command: str = container["command"][0]
    return command


@pytest.mark.parametrize("workload", _workloads(), ids=lambda w: w["metadata"]["name"])
def test_each_deployment_is_given_every_setting_it_requires(
    workload: dict[str, Any], tmp_path: Path
) -> None:
    environment = _environment(workload)
    assert missing_settings(_command(workload), environment, tmp_path) == []
    # Each secret without a default is required: dropping one is caught.
    for variable in required_secret_files(SETTINGS_OF_COMMAND[_command(workload)]):
        less = {k: v for k, v in environment.items() if k != variable}
        assert any(variable in p for p in missing_settings(_command(workload), less, tmp_path))


Peer = dict[str, Any]


def _rule_admits_port(rule: dict[str, Any], port: int) -> bool:
    ports = rule.get("ports")
    return not ports or any(
        p.get("protocol", "TCP") == "TCP" and p.get("port") in (None, port) for p in ports
    )


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _peer_admits(peer: Peer, host: str | Network) -> bool:
    """Whether the peer of an egress rule takes in host: an address or network (ipBlock), or a
    Service's name service.namespace.svc[.cluster.local] (its namespace's selector)."""
    if isinstance(host, str):
        try:
            return _peer_admits(peer, ipaddress.ip_network(host))
        except ValueError:
            parts = host.split(".")
            if len(parts) < 3 or parts[2] != "svc":
                # A name outside the cluster: only a rule open to every address admits it.
                return peer.get("ipBlock", {}).get("cidr") in {"0.0.0.0/0", "::/0"}
            labels = peer.get("namespaceSelector", {}).get("matchLabels", {})
            return bool(labels.get("kubernetes.io/metadata.name") == parts[1])
    block = peer.get("ipBlock")
    if block is None:
        return False

    def within(cidr: str) -> bool:
        network = ipaddress.ip_network(cidr)
        return host.version == network.version and host.subnet_of(network)  # type: ignore[arg-type]

    return within(block["cidr"]) and not any(within(e) for e in block.get("except", []))


def _admitted(policy: dict[str, Any], host: str | Network, port: int) -> bool:
    return any(
        _rule_admits_port(rule, port) and any(_peer_admits(peer, host) for peer in rule["to"])
        for rule in policy["spec"].get("egress", [])
    )


def _host_and_port(url: str) -> tuple[str, int]:
    parsed = urllib.parse.urlsplit(url)
    default = {"http": 80, "https": 443, "postgresql": 5432}[parsed.scheme]
    assert parsed.hostname, url
    return parsed.hostname, parsed.port or default


def _registry_endpoints(tmp_path: Path) -> dict[str, tuple[Any, int]]:
    """Every endpoint the registry's settings name, by what names it."""
    environment = with_dummy_files(
        _environment(_named("Deployment", MESH, "warehouse-service")), tmp_path
    )
    settings = WarehouseServiceSettings.from_env(environment)
    launcher = KubernetesLauncherSettings.from_env(environment)
    endpoints: dict[str, tuple[Any, int]] = {
        name: _host_and_port(getattr(settings, name))
        for name in ("catalog_uri", "catalog_management_uri", "catalog_token_uri")
    }
    for url in filter(None, settings.allowed_storage_endpoints.split(",")):
        endpoints[f"storage {url}"] = _host_and_port(url.strip())
    if settings.mode.is_global and settings.platform_endpoint:
        endpoints["platform_endpoint"] = _host_and_port(settings.platform_endpoint)
    for network in cidr_list(launcher.storage_cidrs):
        for port in port_list(launcher.storage_ports):
            endpoints[f"storage {network}:{port}"] = (network, port)
    # The database URL is a Secret: the example the README gives, with the address to replace.
    [database_url] = re.findall(r"postgresql://\S+", (DEPLOY / "README.md").read_text())
    endpoints["database_url"] = _host_and_port(database_url)
    return endpoints


def test_the_registrys_policy_lets_it_reach_every_endpoint_its_settings_name(
    tmp_path: Path,
) -> None:
    policy = _named("NetworkPolicy", MESH, "warehouse-service")
    endpoints = _registry_endpoints(tmp_path)
    assert {"catalog_token_uri", "database_url"} <= set(endpoints)
    assert any(name.startswith("storage") for name in endpoints)
    unreachable = [
        name for name, (host, port) in endpoints.items() if not _admitted(policy, host, port)
    ]
    assert unreachable == []
    # What no rule admits is caught: another port of the token endpoint, a private address.
    host, port = endpoints["catalog_token_uri"]
    assert not _admitted(policy, host, port + 1)
    assert not _admitted(policy, ipaddress.ip_network("10.1.2.3"), 443)

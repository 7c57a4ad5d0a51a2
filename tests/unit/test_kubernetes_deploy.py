"""deploy/kubernetes/ is valid for the API and keeps the mesh confined.

No cluster runs here, so the manifests are checked as data: every document against the
Kubernetes OpenAPI schemas (cert-manager's objects against tests/unit/cert_manager_checks.py),
then the rules that matter for security, and that the certificates cert-manager writes are the
ones the Deployments mount, named as the services are called.
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

from deploy.compose.make_secrets import READER_CLIENT_ID, REGISTRY_CLIENT_ID
from service_runtime.tls.identity import UNIT_DOMAIN, service_identity
from tests.conftest import ROOT, documentation
from tests.unit import cert_manager_checks
from tests.unit.deployment_settings import (
    SETTINGS_OF_COMMAND,
    missing_settings,
    required_secret_files,
    with_dummy_files,
)
from tests.unit.kubernetes_checks import confinement_problems, containers, pod_spec, validate
from unit_launcher.base import UnitSpec
from unit_launcher.kubernetes_settings import (
    KubernetesLauncherSettings,
    cidr_list,
    label_selector,
    port_list,
)
from unit_launcher.pod_manifests import SECRET_SETTING_NAME, URL_WITH_PASSWORD, build_unit
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
    if document["apiVersion"] == cert_manager_checks.API_VERSION:
        assert cert_manager_checks.problems(document) == []
    else:
        validate(document)


def test_the_cert_manager_schemas_catch_a_field_cert_manager_does_not_know() -> None:
    [certificate] = [c for c in _kind("Certificate") if c["spec"].get("uris")][:1]
    misspelt = {**certificate, "spec": {**certificate["spec"], "dnsName": ["gateway"]}}
    assert any("dnsName" in p for p in cert_manager_checks.problems(misspelt))
    wrong = {**certificate, "spec": {**certificate["spec"], "usages": ["server-auth"]}}
    assert cert_manager_checks.problems(wrong)


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
        # The warm pool's hand-over: a relabel, and an exec of texera-lake-cu-hand-over.
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
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


def _secret_volume(volume: dict[str, Any]) -> dict[str, Any] | None:
    """A volume of Secrets only (one, or several projected into one folder), else None."""
    if "secret" in volume:
        return dict(volume["secret"])
    sources = volume.get("projected", {}).get("sources", [])
    if sources and all(set(source) == {"secret"} for source in sources):
        return dict(volume["projected"])
    return None


def test_secrets_are_read_only_files_of_mode_0400_never_the_environment() -> None:
    assert _kind("Secret") == [], "secrets are made with kubectl or cert-manager, never committed"
    secret_volumes = 0
    for workload in _workloads():
        spec = pod_spec(workload)
        assert spec is not None
        secret_names = {v["name"] for v in spec["volumes"] if _secret_volume(v) is not None}
        for volume in spec["volumes"]:
            secret = _secret_volume(volume)
            if secret is not None:
                secret_volumes += 1
                assert secret["defaultMode"] == 0o400
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


def test_every_service_is_probed_over_tls_on_its_port() -> None:
    """The kubelet's gRPC probes speak no TLS: each probe runs the health probe in the
    container, over TLS against the CA, presenting the service's certificate where client
    certificates are required."""
    for workload in _workloads():
        spec = pod_spec(workload)
        assert spec is not None
        for container in containers(spec):
            [grpc_port] = [p["containerPort"] for p in container["ports"] if p["name"] == "grpc"]
            environment = _environment(workload)
            [scope] = {name.split("_")[2] for name in environment if "_TLS_KEY_FILE" in name}
            tls = f"TEXERA_LAKE_{scope}_TLS_"
            files = [environment[f"{tls}CA_BUNDLE_FILE"]]
            if environment.get(f"{tls}REQUIRE_CLIENT_CERTIFICATE") == "true":
                files += [environment[f"{tls}CERTIFICATE_FILE"], environment[f"{tls}KEY_FILE"]]
            expected = ["python", "-m", "service_runtime.health_probe", f"127.0.0.1:{grpc_port}"]
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                command = container[probe]["exec"]["command"]
                assert command == [*expected, *files], (container["name"], probe)
                assert container[probe]["timeoutSeconds"] >= 5  # Python and gRPC load first
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


# cert-manager: what it writes, and what the Deployments mount of it.

#: The keys cert-manager writes into a Certificate's Secret.
CERTIFICATE_KEYS = {"tls.crt", "tls.key", "ca.crt"}
#: A file of a Secret, as a container sees it: (the Secret, its key).
MountedFile = tuple[str, str]


def _kubectl_secrets() -> dict[str, set[str]]:
    """The Secrets README.md makes with kubectl, and the keys (files) of each."""
    readme = (DEPLOY / "README.md").read_text()
    made: dict[str, set[str]] = {}
    for command in readme.split("create secret generic ")[1:]:
        name, _, rest = command.partition(" ")
        until_next = rest.split("\nkubectl")[0].split("\n\n")[0]
        made[name] = set(re.findall(r"--from-file=(\w+)=", until_next))
    return made


def _mounted(workload: dict[str, Any]) -> dict[str, MountedFile]:
    """Every file the workload's Secret volumes hold, by its path in the container."""
    spec = pod_spec(workload)
    assert spec is not None
    paths = {m["name"]: m["mountPath"] for c in containers(spec) for m in c["volumeMounts"]}
    files: dict[str, MountedFile] = {}
    kubectl = _kubectl_secrets()
    for volume in spec["volumes"]:
        if "secret" in volume:
            sources = [{"name": volume["secret"]["secretName"], **volume["secret"]}]
        else:
            sources = [s["secret"] for s in volume.get("projected", {}).get("sources", [])]
        for source in sources:
            items = source.get("items") or [
                {"key": key, "path": key} for key in kubectl.get(source["name"], set())
            ]
            for item in items:
                files[f"{paths[volume['name']]}/{item['path']}"] = (source["name"], item["key"])
    return files


def _written() -> dict[str, dict[str, Any]]:
    """The Certificates, by the Secret each writes."""
    return {c["spec"]["secretName"]: c for c in _kind("Certificate")}


def _issuer(certificate: dict[str, Any]) -> dict[str, Any]:
    reference = certificate["spec"]["issuerRef"]
    assert reference.get("kind", "Issuer") == "Issuer"
    return _named("Issuer", certificate["metadata"]["namespace"], reference["name"])


def _hours(duration: str) -> float:
    parts = re.findall(r"([0-9.]+)(h|m|s)", duration)
    return sum(float(n) * {"h": 1, "m": 1 / 60, "s": 1 / 3600}[unit] for n, unit in parts)


def test_a_self_signed_issuer_makes_the_ca_and_the_ca_issuer_signs_the_rest() -> None:
    certificates = _kind("Certificate")
    [root] = [c for c in certificates if "selfSigned" in _issuer(c)["spec"]]
    assert root["spec"]["isCA"] is True
    # Renewed with the same key: what it signed before still chains to the renewed root.
    assert root["spec"]["privateKey"]["rotationPolicy"] == "Never"
    [ca_issuer] = [i for i in _kind("Issuer") if "ca" in i["spec"]]
    assert ca_issuer["spec"]["ca"]["secretName"] == root["spec"]["secretName"]
    for certificate in certificates:
        spec = certificate["spec"]
        if certificate is not root:
            assert _issuer(certificate) is ca_issuer, certificate["metadata"]["name"]
            assert spec["privateKey"]["rotationPolicy"] == "Always"  # a new key each time
            assert _hours(spec["duration"]) < _hours(root["spec"]["renewBefore"])
        # EC P-256, as the mesh's own CA issues (the units' issuer must be EC).
        assert (spec["privateKey"]["algorithm"], spec["privateKey"]["size"]) == ("ECDSA", 256)
        assert 0 < _hours(spec["renewBefore"]) < _hours(spec["duration"])


def test_every_secret_a_deployment_mounts_is_made_and_every_certificate_is_mounted() -> None:
    written = _written()
    ca_secrets = {i["spec"]["ca"]["secretName"] for i in _kind("Issuer") if "ca" in i["spec"]}
    kubectl = _kubectl_secrets()
    mounted = {secret for w in _workloads() for secret, _ in _mounted(w).values()}
    assert mounted <= set(written) | set(kubectl), "a mounted Secret nothing makes"
    assert set(written) - ca_secrets <= mounted, "a certificate no Deployment mounts"
    assert set(kubectl) <= mounted
    assert not ca_secrets & mounted, "the CA's key is its Issuer's alone"
    for workload in _workloads():
        for path, (secret, key) in _mounted(workload).items():
            if secret in written:
                assert key in CERTIFICATE_KEYS, path
    # Every file a setting names is one of a mounted Secret's.
    for workload in _workloads():
        files = _mounted(workload)
        for name, value in _environment(workload).items():
            if name.endswith("_FILE"):
                assert value in files, f"{workload['metadata']['name']}: {name}={value}"


@pytest.mark.parametrize("workload", _workloads(), ids=lambda w: w["metadata"]["name"])
def test_each_service_serves_and_calls_with_its_own_certificate(workload: dict[str, Any]) -> None:
    name = workload["metadata"]["name"]
    environment = _environment(workload)
    files = _mounted(workload)
    [scope] = {variable.split("_")[2] for variable in environment if "_TLS_KEY_FILE" in variable}
    tls = f"TEXERA_LAKE_{scope}_TLS_"
    mutual = name != "gateway"  # the edge: users' tokens say who calls
    assert environment.get(f"{tls}REQUIRE_CLIENT_CERTIFICATE") == ("true" if mutual else None)
    expected = {"CERTIFICATE_FILE": "tls.crt", "KEY_FILE": "tls.key", "CA_BUNDLE_FILE": "ca.crt"}
    if mutual:
        expected["CLIENT_CA_FILE"] = "ca.crt"
    [secret] = {files[environment[f"{tls}{setting}"]][0] for setting in expected}
    for setting, key in expected.items():
        assert files[environment[f"{tls}{setting}"]] == (secret, key), setting
    spec = _written()[secret]["spec"]
    assert spec["uris"] == [service_identity(name)]
    assert {"digital signature", "server auth", "client auth"} == set(spec["usages"])
    assert spec.get("isCA", False) is False
    # Every name the mesh calls it by, and the address its probes call.
    targets = [v for k, v in environment.items() if k.endswith("_TARGET")]
    called = {t.rpartition(":")[0] for t in targets if t.split(".")[0] == name}
    assert called <= set(spec["dnsNames"])
    assert ("localhost" in spec["dnsNames"], spec["ipAddresses"]) == (True, ["127.0.0.1"])
    if name == "gateway":
        assert environment["TEXERA_LAKE_GATEWAY_UNITS_TLS"] == "true"


def test_every_target_is_a_name_of_a_service_certificate() -> None:
    names = {n for c in _kind("Certificate") for n in c["spec"].get("dnsNames", [])}
    [config_map] = _kind("ConfigMap")
    targets = [v for k, v in config_map["data"].items() if k.endswith("_TARGET")]
    assert targets
    assert {t.rpartition(":")[0] for t in targets} <= names


def test_the_units_issuer_is_a_name_constrained_ca_only_the_registry_holds() -> None:
    [issuer] = [c for c in _kind("Certificate") if c["spec"].get("nameConstraints")]
    spec = issuer["spec"]
    assert spec["isCA"] is True
    assert spec["nameConstraints"] == {
        "critical": True,
        "permitted": {"dnsDomains": [UNIT_DOMAIN]},
        "excluded": {"ipRanges": ["0.0.0.0/0", "::/0"]},
    }
    assert set(spec["usages"]) == {"cert sign", "crl sign"}
    holders = [
        w
        for w in _workloads()
        if any(secret == spec["secretName"] for secret, _ in _mounted(w).values())
    ]
    assert [w["metadata"]["name"] for w in holders] == ["warehouse-service"]
    environment, files = _environment(holders[0]), _mounted(holders[0])
    for setting, key in (("CERTIFICATE", "tls.crt"), ("KEY", "tls.key")):
        path = environment[f"TEXERA_LAKE_WAREHOUSE_UNIT_ISSUER_{setting}_FILE"]
        assert files[path] == (spec["secretName"], key)


def _from_units_only(policy: dict[str, Any], port: int) -> bool:
    """Whether the policy admits callers on port, all of them units' Pods."""
    peers = [
        peer
        for rule in policy["spec"]["ingress"]
        if _rule_admits_port(rule, port)
        for peer in rule["from"]
    ]
    return bool(peers) and all(
        peer.get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name")
        == UNITS
        and peer.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name")
        == "texera-lake-unit"
        for peer in peers
    )


def test_units_reach_the_registry_on_its_unit_port_and_its_gatekeeper_alone() -> None:
    registry = _named("Deployment", MESH, "warehouse-service")
    environment = _environment(registry)
    port = int(environment["TEXERA_LAKE_WAREHOUSE_UNIT_PORT"])
    gatekeeper = int(environment["TEXERA_LAKE_WAREHOUSE_GATEKEEPER_PORT"])
    assert environment["TEXERA_LAKE_CU_REGISTRY_TARGET"] == f"warehouse-service.{MESH}.svc:{port}"
    # The gatekeeper's address, which units are handed, is the registry's Service, by a name
    # of the registry's certificate (verified against the mesh's CA bundle units hold).
    uri = urllib.parse.urlsplit(environment["TEXERA_LAKE_WAREHOUSE_GATEKEEPER_URI"])
    assert (uri.scheme, uri.hostname, uri.port) == (
        "https",
        f"warehouse-service.{MESH}.svc",
        gatekeeper,
    )
    [certificate] = [
        c
        for c in _kind("Certificate")
        if c["spec"].get("uris") == [service_identity("warehouse-service")]
    ]
    assert uri.hostname in certificate["spec"]["dnsNames"]
    # The launcher's NetworkPolicy of each unit lets it reach these two ports of the registry.
    settings = KubernetesLauncherSettings.from_env(environment)
    assert (settings.registry_port, settings.gatekeeper_port) == (port, gatekeeper)
    [container] = registry["spec"]["template"]["spec"]["containers"]
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert (container_ports["units"], container_ports["gatekeeper"]) == (port, gatekeeper)
    service = _named("Service", MESH, "warehouse-service")
    for name, number in (("units", port), ("gatekeeper", gatekeeper)):
        assert {"name": name, "port": number, "targetPort": name, "protocol": "TCP"} in (
            service["spec"]["ports"]
        )
    policy = _named("NetworkPolicy", MESH, "warehouse-service")
    assert _from_units_only(policy, port)
    assert _from_units_only(policy, gatekeeper)
    assert not any(
        "namespaceSelector" in peer
        for rule in policy["spec"]["ingress"]
        if _rule_admits_port(rule, 50051)
        for peer in rule["from"]
    )


def test_units_policies_reach_the_catalog_through_the_registrys_gatekeeper_alone() -> None:
    """A unit's NetworkPolicy, as the launcher makes it with the manifests' settings, reaches
    in the cluster only DNS and the registry's Pods (its unit port and its gatekeeper): no
    catalog's Pods, and the catalog's Service is no address a unit may reach."""
    registry = _environment(_named("Deployment", MESH, "warehouse-service"))
    settings = KubernetesLauncherSettings.from_env(registry)
    spec = UnitSpec(unit_id="u1", owner_user_id="owner", cores=1, memory_mib=2048)
    policy = build_unit(spec, settings).dependents[2]
    in_cluster = [
        (peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"], peer, rule)
        for rule in policy["spec"]["egress"]
        for peer in rule["to"]
        if "ipBlock" not in peer
    ]
    assert {namespace for namespace, _, _ in in_cluster} == {"kube-system", MESH}
    [(_, to_registry, rule)] = [entry for entry in in_cluster if entry[0] == MESH]
    assert to_registry["podSelector"]["matchLabels"] == label_selector(settings.registry_selector)
    ports = {port["port"] for port in rule["ports"]}
    gatekeeper = int(registry["TEXERA_LAKE_WAREHOUSE_GATEKEEPER_PORT"])
    assert ports == {int(registry["TEXERA_LAKE_WAREHOUSE_UNIT_PORT"]), gatekeeper}
    catalog = _host_and_port(registry["TEXERA_LAKE_CATALOG_URI"])
    assert not _admitted(policy, *catalog)
    assert not [name for name in registry if "K8S_CATALOG" in name]


def test_the_registry_verifies_its_database_against_the_ca_in_its_secret() -> None:
    registry = _named("Deployment", MESH, "warehouse-service")
    environment = _environment(registry)
    assert environment["TEXERA_LAKE_WAREHOUSE_DATABASE_TLS"] == "verify-full"
    secret, key = _mounted(registry)[environment["TEXERA_LAKE_WAREHOUSE_DATABASE_CA_FILE"]]
    assert key in _kubectl_secrets()[secret]


def test_the_registry_alone_is_given_its_reader_client_its_secret_from_its_secret() -> None:
    """The registry's reader client (whose tokens readers get): its id in the registry's own
    environment, its secret a file of the registry's Secret, as the registry's client's is; the
    client ids are those of the realm the compose stack imports."""
    registry = _named("Deployment", MESH, "warehouse-service")
    spec = pod_spec(registry)
    assert spec is not None
    [container] = spec["containers"]
    own = {variable["name"]: variable["value"] for variable in container["env"]}
    environment = _environment(registry)
    assert own["TEXERA_LAKE_CATALOG_READER_CLIENT_ID"] == READER_CLIENT_ID
    assert environment["TEXERA_LAKE_CATALOG_CLIENT_ID"] == REGISTRY_CLIENT_ID
    files = _mounted(registry)
    secret, _ = files[environment["TEXERA_LAKE_CATALOG_CLIENT_SECRET_FILE"]]
    reader_secret = files[own["TEXERA_LAKE_CATALOG_READER_CLIENT_SECRET_FILE"]]
    assert reader_secret == (secret, "TEXERA_LAKE_CATALOG_READER_CLIENT_SECRET")
    assert reader_secret[1] in _kubectl_secrets()[secret]
    [config_map] = _kind("ConfigMap")
    assert not [name for name in config_map["data"] if "_READER_" in name]
    for workload in _workloads():
        if workload is not registry:
            name = workload["metadata"]["name"]
            assert not [k for k in _environment(workload) if "_READER_" in k], name
            assert secret not in {s for s, _ in _mounted(workload).values()}, name


def test_every_metrics_port_takes_one_token_from_its_services_secret() -> None:
    """Each Deployment that declares a metrics port reads its metrics token from its own
    Secret, and the README puts the same file into each."""
    readme = (DEPLOY / "README.md").read_text()
    sources = set()
    for workload in _workloads():
        spec = pod_spec(workload)
        assert spec is not None
        [container] = spec["containers"]
        if not any(port["name"] == "metrics" for port in container["ports"]):
            continue
        [variable] = [v for v in _environment(workload) if v.endswith("_METRICS_TOKEN_FILE")]
        secret, key = _mounted(workload)[_environment(workload)[variable]]
        assert key == variable.removesuffix("_FILE")
        assert key in _kubectl_secrets()[secret]
        sources |= set(re.findall(rf"--from-file={key}=(\S+)", readme))
    assert sources == {"./metrics-token"}

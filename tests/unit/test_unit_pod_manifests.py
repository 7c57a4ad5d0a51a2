"""The objects the Kubernetes launcher makes for a unit: valid for the API, confined."""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from typing import Any

import kubernetes_validate
import pytest

from service_runtime.config import ConfigError
from tests.unit.kubernetes_checks import confinement_problems, validate
from unit_launcher.base import UnitPhase, UnitSpec, UnitStatus
from unit_launcher.kubernetes_settings import KubernetesLauncherSettings
from unit_launcher.pod_manifests import (
    SECRETS_DIR,
    UnitManifests,
    build_unit,
    owned_by,
)
from unit_launcher.pod_status import pod_status
from unit_launcher.unit_memory import JVM_OVERHEAD_MIB, PYTHON_MIB, TASK_MIB

CREDENTIAL = "a-unit-credential-only-its-secret-holds"
SPEC = UnitSpec(
    unit_id="0f3a-unit",
    owner_user_id="Ana María <ana@example.com>/../x",
    cores=3,
    memory_mib=6144,
    settings={
        "TEXERA_LAKE_REGISTRY_TARGET": "warehouse-service.texera-lake.svc:50051",
        "TEXERA_LAKE_CU_ID": "0f3a-unit",
        "TEXERA_LAKE_CU_PORT": "1234",  # the Pod decides this one
    },
    secrets={"TEXERA_LAKE_CU_CREDENTIAL": CREDENTIAL},
)
SETTINGS = KubernetesLauncherSettings()
CREATED_POD = {
    "metadata": {"name": "unit-0f3a-unit", "uid": "6f1e2d0c-7a8b-4c5d-9e0f-1a2b3c4d5e6f"}
}
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def _objects(manifests: UnitManifests) -> list[dict[str, Any]]:
    return [manifests.pod, *(owned_by(m, CREATED_POD) for m in manifests.dependents)]


def _container(manifests: UnitManifests) -> dict[str, Any]:
    [container] = manifests.pod["spec"]["containers"]
    return dict(container)


def _environment(manifests: UnitManifests) -> dict[str, str]:
    return {item["name"]: item["value"] for item in _container(manifests)["env"]}


@pytest.mark.parametrize(
    "settings",
    [
        SETTINGS,
        KubernetesLauncherSettings(
            registry_port=50054,
            gatekeeper_port=9443,
            storage_cidrs="10.20.0.0/16,0.0.0.0/0,::/0",
            storage_ports="443,9000",
        ),
    ],
    ids=["defaults", "other-ports-and-in-cluster-storage"],
)
def test_every_object_fits_the_kubernetes_schemas(settings: KubernetesLauncherSettings) -> None:
    for manifest in _objects(build_unit(SPEC, settings)):
        validate(manifest)


def test_the_schema_check_refuses_what_the_api_would() -> None:
    pod = build_unit(SPEC, SETTINGS).pod
    misspelt = {**pod, "spec": {**pod["spec"], "automountServiceAcountToken": False}}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(misspelt)


def test_the_pod_is_confined() -> None:
    manifests = build_unit(SPEC, SETTINGS)
    spec = manifests.pod["spec"]
    assert confinement_problems("unit", spec) == []
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["securityContext"]["runAsUser"] == spec["securityContext"]["runAsGroup"] == 10001


def test_the_root_file_system_is_read_only_and_spark_writes_to_its_own_volumes() -> None:
    manifests = build_unit(SPEC, SETTINGS)
    volumes = {volume["name"]: volume for volume in manifests.pod["spec"]["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in _container(manifests)["volumeMounts"]}
    environment = _environment(manifests)
    for path in ("/tmp", environment["HOME"], environment["SPARK_LOCAL_DIRS"]):
        assert "emptyDir" in volumes[mounts[path]], path
        assert volumes[mounts[path]]["emptyDir"]["sizeLimit"]


def test_secrets_are_files_of_mode_0400_named_by_their_file_settings() -> None:
    manifests = build_unit(SPEC, SETTINGS)
    pod, (secret, *_) = manifests.pod, manifests.dependents
    assert base64.b64decode(secret["data"]["TEXERA_LAKE_CU_CREDENTIAL"]).decode() == CREDENTIAL
    assert secret["immutable"] is True
    [volume] = [v for v in pod["spec"]["volumes"] if "secret" in v]
    assert volume["secret"] == {"secretName": secret["metadata"]["name"], "defaultMode": 0o400}
    [mount] = [m for m in _container(manifests)["volumeMounts"] if m["name"] == volume["name"]]
    assert mount == {"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True}
    environment = _environment(manifests)
    assert (
        environment["TEXERA_LAKE_CU_CREDENTIAL_FILE"] == f"{SECRETS_DIR}/TEXERA_LAKE_CU_CREDENTIAL"
    )
    assert "TEXERA_LAKE_CU_CREDENTIAL" not in environment
    assert CREDENTIAL not in json.dumps(pod)
    assert base64.b64encode(CREDENTIAL.encode()).decode() not in json.dumps(pod)


def test_the_heap_is_the_units_memory_and_the_pod_has_room_for_the_rest_and_a_task_a_core() -> None:
    manifests = build_unit(SPEC, SETTINGS)
    resources = _container(manifests)["resources"]
    budget = 6144 + max(JVM_OVERHEAD_MIB, 6144 // 10) + PYTHON_MIB + 3 * TASK_MIB
    assert resources["requests"] == resources["limits"] == {"cpu": "3", "memory": f"{budget}Mi"}
    environment = _environment(manifests)
    assert environment["TEXERA_LAKE_CU_SPARK_MASTER"] == "local[3]"
    assert environment["TEXERA_LAKE_CU_SPARK_DRIVER_MEMORY"] == "6144m"
    assert environment["TEXERA_LAKE_CU_MEMORY_BUDGET_BYTES"] == str(budget * 1024 * 1024)


def test_the_pod_decides_its_address_and_port() -> None:
    environment = _environment(build_unit(SPEC, SETTINGS))
    assert environment["TEXERA_LAKE_CU_PORT"] == "50052"
    assert environment["TEXERA_LAKE_HOST"] == "0.0.0.0"
    assert environment["TEXERA_LAKE_CU_ADVERTISED_ADDRESS"] == (
        "unit-0f3a-unit.texera-lake-units.svc:50052"
    )
    assert (
        environment["TEXERA_LAKE_REGISTRY_TARGET"] == SPEC.settings["TEXERA_LAKE_REGISTRY_TARGET"]
    )


def test_labels_name_the_unit_and_a_hash_of_its_owner() -> None:
    manifests = build_unit(SPEC, SETTINGS)
    other_owner = build_unit(dataclasses.replace(SPEC, owner_user_id="someone else"), SETTINGS)
    for manifest in _objects(manifests):
        labels = manifest["metadata"]["labels"]
        assert labels["lake.texera.io/unit"] == "0f3a-unit"
        assert all(LABEL_VALUE.match(value) for value in labels.values()), labels
    owner = manifests.pod["metadata"]["labels"]["lake.texera.io/owner"]
    assert owner != other_owner.pod["metadata"]["labels"]["lake.texera.io/owner"]
    annotations = manifests.pod["metadata"]["annotations"]
    assert annotations["lake.texera.io/owner-user-id"] == SPEC.owner_user_id


def test_the_pod_owns_its_secret_service_and_network_policy() -> None:
    for manifest in _objects(build_unit(SPEC, SETTINGS))[1:]:
        [reference] = manifest["metadata"]["ownerReferences"]
        assert reference == {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "unit-0f3a-unit",
            "uid": CREATED_POD["metadata"]["uid"],
            "controller": True,
        }


def test_the_service_selects_only_the_units_pod() -> None:
    manifests = build_unit(SPEC, SETTINGS)
    service = manifests.dependents[1]
    assert service["spec"]["selector"] == {"lake.texera.io/unit": "0f3a-unit"}
    assert service["spec"]["selector"].items() <= manifests.pod["metadata"]["labels"].items()


def test_the_network_policy_admits_only_the_gateway_and_reaches_only_what_a_unit_needs() -> None:
    policy = build_unit(SPEC, SETTINGS).dependents[2]["spec"]
    assert policy["podSelector"] == {"matchLabels": {"lake.texera.io/unit": "0f3a-unit"}}
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    mesh = {"matchLabels": {"kubernetes.io/metadata.name": "texera-lake"}}
    assert policy["ingress"] == [
        {
            "from": [
                {
                    "namespaceSelector": mesh,
                    "podSelector": {
                        "matchLabels": {"app.kubernetes.io/name": "texera-lake-gateway"}
                    },
                }
            ],
            "ports": [{"protocol": "TCP", "port": 50052}],
        }
    ]
    dns, registry, storage = policy["egress"]
    assert {port["port"] for port in dns["ports"]} == {53}
    # The registry's Pods alone, on its port and its catalog gatekeeper's.
    assert registry["to"] == [
        {
            "namespaceSelector": mesh,
            "podSelector": {
                "matchLabels": {"app.kubernetes.io/name": "texera-lake-warehouse-service"}
            },
        }
    ]
    assert registry["ports"] == [
        {"protocol": "TCP", "port": 50051},
        {"protocol": "TCP", "port": 8183},
    ]
    [block] = storage["to"]
    assert block["ipBlock"]["cidr"] == "0.0.0.0/0"
    for private in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"):
        assert private in block["ipBlock"]["except"]
    assert storage["ports"] == [{"protocol": "TCP", "port": 443}]


def test_storage_named_inside_a_private_range_is_reachable_as_named() -> None:
    settings = KubernetesLauncherSettings(storage_cidrs="10.20.0.0/16,192.168.0.0/16")
    storage = build_unit(SPEC, settings).dependents[2]["spec"]["egress"][-1]
    assert storage["to"] == [
        {"ipBlock": {"cidr": "10.20.0.0/16"}},
        {"ipBlock": {"cidr": "192.168.0.0/16"}},
    ]


def test_no_storage_cidrs_means_no_storage_rule() -> None:
    policy = build_unit(SPEC, KubernetesLauncherSettings(storage_cidrs="")).dependents[2]
    assert [rule["ports"][0]["port"] for rule in policy["spec"]["egress"]] == [53, 50051]


@pytest.mark.parametrize("storage_cidrs", ["0.0.0.0/0", "10.20.0.0/16", ""])
def test_a_unit_reaches_the_catalog_only_through_the_registrys_gatekeeper(
    storage_cidrs: str,
) -> None:
    """No rule names a peer outside the mesh's namespace but DNS and object storage (ipBlocks
    on the storage ports), and only the registry's Pods are reached on the gatekeeper's port."""
    settings = KubernetesLauncherSettings(
        registry_port=50054, gatekeeper_port=8183, storage_cidrs=storage_cidrs
    )
    egress = build_unit(SPEC, settings).dependents[2]["spec"]["egress"]
    storage_ports = {443}
    namespaces = set()
    for rule in egress:
        ports = {port["port"] for port in rule["ports"]}
        for peer in rule["to"]:
            if "ipBlock" in peer:
                assert ports == storage_ports, rule
            else:
                labels = peer["namespaceSelector"]["matchLabels"]
                namespaces.add(labels["kubernetes.io/metadata.name"])
    assert namespaces == {"kube-system", "texera-lake"}
    [gatekeeper] = [rule for rule in egress if {"protocol": "TCP", "port": 8183} in rule["ports"]]
    assert gatekeeper["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "texera-lake"}},
            "podSelector": {
                "matchLabels": {"app.kubernetes.io/name": "texera-lake-warehouse-service"}
            },
        }
    ]
    assert {"protocol": "TCP", "port": 50054} in gatekeeper["ports"]
    assert "lakekeeper" not in json.dumps(egress)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"unit_id": "Upper"}, "unit_id"),
        ({"unit_id": "ends-with-"}, "unit_id"),
        ({"unit_id": "x" * 41}, "unit_id"),
        ({"owner_user_id": ""}, "owner_user_id"),
        ({"cores": 0}, "cores"),
        ({"memory_mib": 256}, "memory_mib"),
        ({"settings": {"PATH": "/evil"}}, "PATH"),
        ({"secrets": {"JAVA_TOOL_OPTIONS": "-javaagent:x"}}, "JAVA_TOOL_OPTIONS"),
        (
            {"settings": {"TEXERA_LAKE_CU_CREDENTIAL_FILE": "/etc/passwd"}},
            "TEXERA_LAKE_CU_CREDENTIAL",
        ),
        ({"settings": {"TEXERA_LAKE_JWT_SECRET": "s" * 40}}, "TEXERA_LAKE_JWT_SECRET"),
        (
            {"settings": {"TEXERA_LAKE_CATALOG_URI": "https://client:hunter2@catalog/x"}},
            "TEXERA_LAKE_CATALOG_URI",
        ),
    ],
)
def test_a_spec_no_pod_can_be_made_from_is_refused_naming_the_field(
    change: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValueError, match=field):
        build_unit(dataclasses.replace(SPEC, **change), SETTINGS)


@pytest.mark.parametrize(
    ("environ", "variable"),
    [
        ({"TEXERA_LAKE_WAREHOUSE_K8S_NAMESPACE": "Units"}, "K8S_NAMESPACE"),
        ({"TEXERA_LAKE_WAREHOUSE_K8S_IMAGE_PULL_POLICY": "Sometimes"}, "K8S_IMAGE_PULL_POLICY"),
        ({"TEXERA_LAKE_WAREHOUSE_K8S_GATEWAY_SELECTOR": "app"}, "K8S_GATEWAY_SELECTOR"),
        ({"TEXERA_LAKE_WAREHOUSE_K8S_REGISTRY_SELECTOR": ""}, "K8S_REGISTRY_SELECTOR"),
        ({"TEXERA_LAKE_WAREHOUSE_K8S_STORAGE_CIDRS": "10.0.0.0/33"}, "K8S_STORAGE_CIDRS"),
        ({"TEXERA_LAKE_WAREHOUSE_K8S_STORAGE_PORTS": ""}, "K8S_STORAGE_PORTS"),
        ({"TEXERA_LAKE_WAREHOUSE_K8S_UNIT_PORT": "70000"}, "K8S_UNIT_PORT"),
        ({"TEXERA_LAKE_WAREHOUSE_K8S_GATEKEEPER_PORT": "0"}, "K8S_GATEKEEPER_PORT"),
        ({"TEXERA_LAKE_WAREHOUSE_K8S_LABEL_PREFIX": "Not A Prefix"}, "K8S_LABEL_PREFIX"),
    ],
)
def test_bad_settings_are_refused_naming_the_variable(
    environ: dict[str, str], variable: str
) -> None:
    settings = KubernetesLauncherSettings.from_env(environ)
    with pytest.raises(ConfigError, match=f"TEXERA_LAKE_WAREHOUSE_{variable}"):
        settings.validate()


def test_the_default_settings_are_valid() -> None:
    SETTINGS.validate()


PENDING = UnitStatus(UnitPhase.PENDING, address="a:1")


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({"phase": "Pending"}, PENDING),
        ({}, PENDING),
        ({"phase": "Unknown"}, PENDING),
        (
            {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]},
            PENDING,
        ),
        (
            {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            UnitStatus(UnitPhase.RUNNING, address="a:1"),
        ),
        (
            {
                "phase": "Pending",
                "containerStatuses": [
                    {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "x"}}}
                ],
            },
            UnitStatus(UnitPhase.FAILED, message="ImagePullBackOff"),
        ),
        (
            {
                "phase": "Pending",
                "containerStatuses": [{"state": {"waiting": {"reason": "ContainerCreating"}}}],
            },
            PENDING,
        ),
        ({"phase": "Succeeded"}, UnitStatus(UnitPhase.STOPPED, message="the unit exited")),
        (
            {"phase": "Failed", "reason": "Evicted", "message": "The node was low on memory."},
            UnitStatus(UnitPhase.FAILED, message="the unit's Pod failed: Evicted"),
        ),
        (
            {
                "phase": "Failed",
                "containerStatuses": [
                    {
                        "state": {
                            "terminated": {
                                "reason": "Error",
                                "exitCode": 1,
                                "message": "whatever the unit wrote",
                            }
                        }
                    }
                ],
            },
            UnitStatus(UnitPhase.FAILED, message="the unit stopped: Error, exit code 1"),
        ),
    ],
)
def test_pod_phases_map_to_unit_phases(status: dict[str, Any], expected: UnitStatus) -> None:
    assert pod_status({"metadata": {"name": "p"}, "status": status}, "a:1") == expected


def test_a_unit_that_serves_mutual_tls_is_probed_by_tcp() -> None:
    """The kubelet's gRPC probe speaks plaintext: a unit launched with a certificate is
    probed by a TCP connection, one without by gRPC's health check."""
    with_certificate = dataclasses.replace(
        SPEC,
        secrets={
            **SPEC.secrets,
            "TEXERA_LAKE_CU_TLS_CERTIFICATE": "chain",
            "TEXERA_LAKE_CU_TLS_KEY": "key",
        },
    )
    for spec, check in ((SPEC, "grpc"), (with_certificate, "tcpSocket")):
        [container] = build_unit(spec, SETTINGS).pod["spec"]["containers"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert set(container[probe]) & {"grpc", "tcpSocket"} == {check}
            assert container[probe][check] == {"port": SETTINGS.unit_port}

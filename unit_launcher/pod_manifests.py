"""The Kubernetes objects of one computing unit, built from its ``UnitSpec`` (no API calls).

A unit is a Pod running the mesh's image as ``texera-lake-cu-service``, with what it needs
beside it: a Secret holding its secrets (mounted read-only as files), a Service naming its
gRPC address, and a NetworkPolicy that lets it reach only the registry (its unit port and its
catalog gatekeeper; never the catalog itself), object storage and DNS, and be called only by
the gateway. The Pod owns the other three (owner references), so whatever deletes the Pod
deletes them too.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from unit_launcher.base import UnitSpec
from unit_launcher.hand_over import HAND_OVER_SETTING
from unit_launcher.kubernetes_settings import (
    KubernetesLauncherSettings,
    cidr_list,
    label_selector,
    port_list,
)
from unit_launcher.size_class import SizeClass
from unit_launcher.unit_memory import MIN_HEAP_MIB, unit_memory_bytes, unit_memory_mib

Manifest = dict[str, Any]

#: The unprivileged user and group of the mesh's image (see the Dockerfile).
UNIT_UID = 10001
#: Secrets are files of this mode; with the Pod's fsGroup the kubelet adds group read, so the
#: unit's user (its group) reads them and nobody else in the Pod exists to.
SECRET_FILE_MODE = 0o400
SECRETS_DIR = "/run/secrets/texera-lake"
#: Where a pooled unit waits for its identity: in its secrets folder, an in-memory volume.
HAND_OVER_PIPE = f"{SECRETS_DIR}/hand-over"
UNIT_CONTAINER = "unit"
HOME_DIR = "/home/lake"
SPARK_LOCAL_DIR = "/var/lib/spark-local"
#: Addresses a unit never reaches through its storage rule unless one is named exactly.
PLATFORM_RANGES = tuple(
    ipaddress.ip_network(cidr)
    for cidr in (
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "169.254.0.0/16",
        "127.0.0.0/8",
        "fc00::/7",
        "fe80::/10",
        "::1/128",
    )
)
UNIT_ID = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")
SETTING_NAME = re.compile(r"^TEXERA_LAKE_[A-Z0-9_]+$")
#: Names of settings that carry secrets, and URLs with a password (scheme://user:password@):
#: a Pod's environment holds neither.
SECRET_SETTING_NAME = re.compile(r"(SECRET|(?<!PUBLIC_)KEY|PASSWORD|TOKEN|CREDENTIAL)$")
URL_WITH_PASSWORD = re.compile(r"://[^/@:\s]+:[^/@\s]+@")


@dataclass(frozen=True)
class UnitManifests:
    """The objects of one unit, in the order they are created."""

    pod: Manifest
    #: Secret, Service and NetworkPolicy, without owner references yet (the Pod's uid is
    #: known once it is created): see ``owned_by``.
    dependents: tuple[Manifest, ...]


def object_name(unit_id: str) -> str:
    """The name of every object of a unit (a DNS label that starts with a letter)."""
    return f"unit-{unit_id}"


def owner_label_value(owner_user_id: str) -> str:
    """A label value that names the owner whatever characters its id has."""
    return hashlib.sha256(owner_user_id.encode()).hexdigest()[:40]


def unit_address(unit_id: str, settings: KubernetesLauncherSettings) -> str:
    """host:port of a unit's gRPC server, through its Service."""
    return f"{object_name(unit_id)}.{settings.namespace}.svc:{settings.unit_port}"


def unit_label(settings: KubernetesLauncherSettings) -> str:
    """The label that names the unit a Pod runs (and its Service and NetworkPolicy select)."""
    return f"{settings.label_prefix}/unit"


def unit_labels(spec: UnitSpec, settings: KubernetesLauncherSettings) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "texera-lake-unit",
        "app.kubernetes.io/managed-by": "texera-lake-warehouse-service",
        unit_label(settings): spec.unit_id,
        f"{settings.label_prefix}/owner": owner_label_value(spec.owner_user_id),
    }


def unit_selector(unit_id: str, settings: KubernetesLauncherSettings) -> dict[str, str]:
    return {unit_label(settings): unit_id}


def check_spec(spec: UnitSpec) -> None:
    """Raises ValueError naming the field of a spec no Pod can be made from."""
    if not spec.owner_user_id:
        raise ValueError("owner_user_id must not be empty")
    _check_shape(spec)


def _check_shape(spec: UnitSpec) -> None:
    if not UNIT_ID.match(spec.unit_id):
        raise ValueError(
            "unit_id must be 1 to 40 lowercase letters, digits or '-', "
            "starting and ending with a letter or digit"
        )
    if spec.cores < 1:
        raise ValueError("cores must be at least 1")
    if spec.memory_mib < MIN_HEAP_MIB:
        raise ValueError(f"memory_mib (the Spark driver's heap) must be at least {MIN_HEAP_MIB}")
    for name in (*spec.settings, *spec.secrets):
        if not SETTING_NAME.match(name):
            raise ValueError(f"settings and secrets must be TEXERA_LAKE_* names, not {name!r}")
    for name in spec.secrets:
        if name in spec.settings or f"{name}_FILE" in spec.settings:
            raise ValueError(f"{name} is a secret and must not be among the settings")
    for name, value in spec.settings.items():
        if SECRET_SETTING_NAME.search(name) or URL_WITH_PASSWORD.search(value):
            raise ValueError(f"{name} looks like a secret: it belongs among the secrets")


def build_unit(spec: UnitSpec, settings: KubernetesLauncherSettings) -> UnitManifests:
    """The unit's Pod and its dependents; ValueError names a field of a bad spec."""
    check_spec(spec)
    return UnitManifests(
        pod=pod_manifest(spec, settings),
        dependents=(
            secret_manifest(spec, settings),
            service_manifest(spec, settings),
            network_policy_manifest(spec, settings),
        ),
    )


def owned_by(manifest: Manifest, pod: Mapping[str, Any]) -> Manifest:
    """The manifest with the created Pod as its owner, so deleting the Pod deletes it."""
    metadata = pod["metadata"]
    reference = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": metadata["name"],
        "uid": metadata["uid"],
        "controller": True,
    }
    return {**manifest, "metadata": {**manifest["metadata"], "ownerReferences": [reference]}}


def _metadata(spec: UnitSpec, settings: KubernetesLauncherSettings) -> Manifest:
    return {
        "name": object_name(spec.unit_id),
        "namespace": settings.namespace,
        "labels": unit_labels(spec, settings),
    }


def unit_environment(spec: UnitSpec, settings: KubernetesLauncherSettings) -> dict[str, str]:
    """The unit process's environment: the spec's settings, where its secret files are, and
    what the Pod decides (id, address, port, Spark's cores and memory, writable directories)."""
    return {
        **spec.settings,
        **{f"{name}_FILE": f"{SECRETS_DIR}/{name}" for name in sorted(spec.secrets)},
        **identity(spec, settings),
        "TEXERA_LAKE_HOST": "0.0.0.0",  # noqa: S104 - the Pod's own network namespace
        "TEXERA_LAKE_CU_PORT": str(settings.unit_port),
        "TEXERA_LAKE_CU_SPARK_MASTER": f"local[{spec.cores}]",
        "TEXERA_LAKE_CU_SPARK_DRIVER_MEMORY": f"{spec.memory_mib}m",
        "TEXERA_LAKE_CU_MEMORY_BUDGET_BYTES": str(unit_memory_bytes(spec.cores, spec.memory_mib)),
        "HOME": HOME_DIR,
        "SPARK_LOCAL_DIRS": SPARK_LOCAL_DIR,
    }


def identity(spec: UnitSpec, settings: KubernetesLauncherSettings) -> dict[str, str]:
    """The settings that make a unit's process spec's unit (a pooled one's at hand-over)."""
    return {
        "TEXERA_LAKE_CU_ID": spec.unit_id,
        "TEXERA_LAKE_CU_ADVERTISED_ADDRESS": unit_address(spec.unit_id, settings),
    }


#: The secret that carries a unit's TLS certificate when the registry issues it one.
UNIT_CERTIFICATE_SECRET = "TEXERA_LAKE_CU_TLS_CERTIFICATE"  # noqa: S105 - a name


def _probe(
    spec: UnitSpec, settings: KubernetesLauncherSettings, period: int, failures: int
) -> Manifest:
    """gRPC's health check; a TCP connection for a unit that serves mutual TLS, which the
    kubelet's gRPC probe cannot speak (the unit's certificate and key live in its memory
    alone, so no probe command could present them either)."""
    check = "tcpSocket" if UNIT_CERTIFICATE_SECRET in spec.secrets else "grpc"
    return {
        check: {"port": settings.unit_port},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def pod_manifest(spec: UnitSpec, settings: KubernetesLauncherSettings) -> Manifest:
    metadata = {
        **_metadata(spec, settings),
        "annotations": {f"{settings.label_prefix}/owner-user-id": spec.owner_user_id},
    }
    secrets = {"secret": {"secretName": object_name(spec.unit_id), "defaultMode": SECRET_FILE_MODE}}
    # A unit that exits cleanly has stopped; one that crashes is restarted, and one that keeps
    # crashing is reported FAILED (CrashLoopBackOff).
    pod = _pod(
        spec,
        settings,
        metadata=metadata,
        environment=unit_environment(spec, settings),
        secrets_volume=secrets,
        restart_policy="OnFailure",
    )
    container = pod["spec"]["containers"][0]
    # Spark takes a while to start: up to five minutes before liveness counts.
    container["startupProbe"] = _probe(spec, settings, period=5, failures=60)
    container["readinessProbe"] = _probe(spec, settings, period=5, failures=3)
    container["livenessProbe"] = _probe(spec, settings, period=10, failures=6)
    return pod


def pooled_pod_manifest(spec: UnitSpec, settings: KubernetesLauncherSettings) -> Manifest:
    """A Pod of the warm pool (see unit_launcher.hand_over): no owner, no secret, no Service
    and no NetworkPolicy of its own (the namespace's default deny holds it). Its secrets
    folder is an in-memory volume the hand-over writes to. It carries no probes: it serves
    nothing until it is handed over, and its readiness is asked by exec. It is never
    restarted: a unit does not go back to waiting for an identity."""
    _check_shape(spec)
    if spec.owner_user_id or spec.secrets:
        raise ValueError("a pooled unit has no owner and no secrets until it is handed over")
    labels = unit_labels(spec, settings)
    del labels[f"{settings.label_prefix}/owner"]
    metadata = {
        "name": object_name(spec.unit_id),
        "namespace": settings.namespace,
        "labels": {**labels, pool_label(settings): pool_label_value(spec)},
    }
    environment = {**unit_environment(spec, settings), HAND_OVER_SETTING: HAND_OVER_PIPE}
    secrets = {"emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}
    return _pod(
        spec,
        settings,
        metadata=metadata,
        environment=environment,
        secrets_volume=secrets,
        restart_policy="Never",
    )


def pool_label(settings: KubernetesLauncherSettings) -> str:
    """The label of pooled Pods not yet handed over; its value is their size class."""
    return f"{settings.label_prefix}/pool"


def pool_label_value(spec: UnitSpec) -> str:
    return str(SizeClass(spec.cores, spec.memory_mib))


def hand_over_patch(
    pooled_pod: Mapping[str, Any], spec: UnitSpec, settings: KubernetesLauncherSettings
) -> Manifest:
    """The merge patch that makes a pooled Pod spec's unit: its labels (so that the unit's
    Service and NetworkPolicy select it) and owner, out of the pool. It carries the Pod's
    resourceVersion: if anyone changed the Pod since it was read (another registry took it),
    the API server refuses it."""
    return {
        "metadata": {
            "resourceVersion": pooled_pod["metadata"]["resourceVersion"],
            "labels": {**unit_labels(spec, settings), pool_label(settings): None},
            "annotations": {f"{settings.label_prefix}/owner-user-id": spec.owner_user_id},
        }
    }


def _pod(
    spec: UnitSpec,
    settings: KubernetesLauncherSettings,
    *,
    metadata: Manifest,
    environment: Mapping[str, str],
    secrets_volume: Manifest,
    restart_policy: str,
) -> Manifest:
    # The memory the process launcher's cgroup of a unit allows too (unit_launcher.unit_memory).
    resources = {
        "cpu": str(spec.cores),
        "memory": f"{unit_memory_mib(spec.cores, spec.memory_mib)}Mi",
    }
    writable_secrets = "emptyDir" in secrets_volume
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "serviceAccountName": settings.service_account,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 30,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": UNIT_UID,
                "runAsGroup": UNIT_UID,
                "fsGroup": UNIT_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": UNIT_CONTAINER,
                    "image": settings.image,
                    "imagePullPolicy": settings.image_pull_policy,
                    "command": ["texera-lake-cu-service"],
                    "env": [{"name": name, "value": environment[name]} for name in environment],
                    "ports": [
                        {"name": "grpc", "containerPort": settings.unit_port, "protocol": "TCP"}
                    ],
                    "resources": {"requests": resources, "limits": resources},
                    "securityContext": {
                        "runAsNonRoot": True,
                        "allowPrivilegeEscalation": False,
                        "privileged": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": [
                        {
                            "name": "secrets",
                            "mountPath": SECRETS_DIR,
                            "readOnly": not writable_secrets,
                        },
                        {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 - a private emptyDir
                        {"name": "home", "mountPath": HOME_DIR},
                        {"name": "spark-local", "mountPath": SPARK_LOCAL_DIR},
                    ],
                }
            ],
            "volumes": [
                {"name": "secrets", **secrets_volume},
                {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
                {"name": "home", "emptyDir": {"sizeLimit": "1Gi"}},
                {"name": "spark-local", "emptyDir": {"sizeLimit": f"{settings.scratch_mib}Mi"}},
            ],
        },
    }


def secret_manifest(spec: UnitSpec, settings: KubernetesLauncherSettings) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(spec, settings),
        "type": "Opaque",
        "immutable": True,
        "data": {
            name: base64.b64encode(value.encode()).decode()
            for name, value in sorted(spec.secrets.items())
        },
    }


def service_manifest(spec: UnitSpec, settings: KubernetesLauncherSettings) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, settings),
        "spec": {
            "type": "ClusterIP",
            "selector": unit_selector(spec.unit_id, settings),
            "ports": [
                {
                    "name": "grpc",
                    "port": settings.unit_port,
                    "targetPort": "grpc",
                    "protocol": "TCP",
                }
            ],
        },
    }


def _peer(namespace: str, selector: str) -> Manifest:
    return {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "podSelector": {"matchLabels": label_selector(selector)},
    }


def _tcp(*ports: int) -> list[Manifest]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def _ip_block(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> Manifest:
    """Egress to a network, less the platform's ranges inside it (unless it is one of them)."""
    excluded = [
        str(inner)
        for inner in PLATFORM_RANGES
        if inner != network
        and inner.network_address in network
        and inner.broadcast_address in network
    ]
    block: Manifest = {"cidr": str(network)}
    if excluded:
        block["except"] = excluded
    return {"ipBlock": block}


def network_policy_manifest(spec: UnitSpec, settings: KubernetesLauncherSettings) -> Manifest:
    dns = {
        "to": [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                },
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
            }
        ],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    # The registry's unit port and its catalog gatekeeper, the one catalog a unit reaches.
    registry = {
        "to": [_peer(settings.mesh_namespace, settings.registry_selector)],
        "ports": _tcp(settings.registry_port, settings.gatekeeper_port),
    }
    egress = [dns, registry]
    storage = [_ip_block(network) for network in cidr_list(settings.storage_cidrs)]
    if storage:
        egress.append({"to": storage, "ports": _tcp(*port_list(settings.storage_ports))})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(spec, settings),
        "spec": {
            "podSelector": {"matchLabels": unit_selector(spec.unit_id, settings)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {
                    "from": [_peer(settings.mesh_namespace, settings.gateway_selector)],
                    "ports": _tcp(settings.unit_port),
                }
            ],
            "egress": egress,
        },
    }

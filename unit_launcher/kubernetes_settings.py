"""Settings of the Kubernetes launcher of computing units (see service_runtime.config).

They are the registry's settings (scope ``WAREHOUSE``): the registry runs the launcher. Kept
apart from ``unit_launcher.kubernetes`` so that reading them needs no Kubernetes client.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, fields

from service_runtime.config import ConfigError, Settings, setting

#: A label key (optionally prefixed) = a label value, as Kubernetes allows them.
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_PULL_POLICIES = ("Always", "IfNotPresent", "Never")


def label_selector(text: str) -> dict[str, str]:
    """``key=value,key=value`` as a matchLabels mapping; ValueError names what is wrong."""
    labels: dict[str, str] = {}
    for pair in filter(None, (part.strip() for part in text.split(","))):
        key, equals, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not equals or not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value):
            raise ValueError(f"{pair!r} is not a label key=value")
        labels[key] = value
    if not labels:
        raise ValueError("at least one key=value is needed")
    return labels


def cidr_list(text: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Comma-separated CIDRs; ValueError names the one that is not a network."""
    networks = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        try:
            networks.append(ipaddress.ip_network(item))
        except ValueError:
            raise ValueError(f"{item!r} is not a CIDR such as 203.0.113.0/24") from None
    return networks


def port_list(text: str) -> list[int]:
    """Comma-separated TCP ports, at least one; ValueError names the one out of range."""
    ports = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        if not item.isdigit() or not 1 <= int(item) <= 65535:
            raise ValueError(f"{item!r} is not a port (1 to 65535)")
        ports.append(int(item))
    if not ports:
        raise ValueError("at least one port is needed")
    return ports


@dataclass(frozen=True, repr=False)
class KubernetesLauncherSettings(Settings):
    scope = "WAREHOUSE"
    kubeconfig: str = setting(
        "K8S_KUBECONFIG",
        "",
        "Kubeconfig file of a registry outside the cluster; empty means the registry's Pod's "
        "service account.",
        scoped=True,
    )
    namespace: str = setting(
        "K8S_NAMESPACE",
        "texera-lake-units",
        "Kubernetes namespace in which computing units run, one Pod each.",
        scoped=True,
    )
    image: str = setting(
        "K8S_IMAGE",
        "texera-lake-mesh:0.1.0",
        "Container image of computing units (the mesh's image, built from the Dockerfile).",
        scoped=True,
    )
    image_pull_policy: str = setting(
        "K8S_IMAGE_PULL_POLICY",
        "IfNotPresent",
        "imagePullPolicy of computing units' Pods: Always, IfNotPresent or Never.",
        scoped=True,
    )
    service_account: str = setting(
        "K8S_SERVICE_ACCOUNT",
        "texera-lake-unit",
        "Service account of computing units' Pods (its token is never mounted).",
        scoped=True,
    )
    label_prefix: str = setting(
        "K8S_LABEL_PREFIX",
        "lake.texera.io",
        "Prefix of the labels naming a unit and its owner on what the launcher creates.",
        scoped=True,
    )
    unit_port: int = setting(
        "K8S_UNIT_PORT", 50052, "gRPC port of a computing unit in its Pod.", scoped=True
    )
    scratch_mib: int = setting(
        "K8S_SCRATCH_MIB",
        10240,
        "Size limit of a unit's Spark local directory (shuffle and spill), in MiB.",
        scoped=True,
    )
    mesh_namespace: str = setting(
        "K8S_MESH_NAMESPACE",
        "texera-lake",
        "Namespace of the registry and the gateway, whom units talk with.",
        scoped=True,
    )
    registry_selector: str = setting(
        "K8S_REGISTRY_SELECTOR",
        "app.kubernetes.io/name=texera-lake-warehouse-service",
        "Labels (key=value,...) of the registry's Pods, which units may reach.",
        scoped=True,
    )
    registry_port: int = setting(
        "K8S_REGISTRY_PORT", 50051, "gRPC port of the registry's Pods.", scoped=True
    )
    gatekeeper_port: int = setting(
        "K8S_GATEKEEPER_PORT",
        8183,
        "Port of the registry's catalog gatekeeper, the only catalog units reach.",
        scoped=True,
    )
    gateway_selector: str = setting(
        "K8S_GATEWAY_SELECTOR",
        "app.kubernetes.io/name=texera-lake-gateway",
        "Labels (key=value,...) of the gateway's Pods, the only callers units accept.",
        scoped=True,
    )
    storage_cidrs: str = setting(
        "K8S_STORAGE_CIDRS",
        "0.0.0.0/0",
        "CIDRs (comma-separated) of object storage that units may reach; "
        "private, loopback and link-local ranges are excluded unless named exactly.",
        scoped=True,
    )
    storage_ports: str = setting(
        "K8S_STORAGE_PORTS",
        "443",
        "Ports (comma-separated) at which units may reach object storage.",
        scoped=True,
    )

    def validate(self) -> None:
        """Raises ConfigError, naming the variable, for settings the launcher cannot use."""
        problems: list[str] = []

        def check(attribute: str, ok: bool, expected: str) -> None:
            if not ok:
                problems.append(f"{self.variable(attribute)} must be {expected}")

        def parses(attribute: str, parse: Callable[[str], object]) -> None:
            try:
                parse(getattr(self, attribute))
            except ValueError as exc:
                problems.append(f"{self.variable(attribute)}: {exc}")

        for attribute in ("namespace", "mesh_namespace"):
            check(attribute, bool(_DNS_LABEL.match(getattr(self, attribute))), "a namespace name")
        check("image", bool(self.image.strip()), "an image reference")
        check(
            "image_pull_policy", self.image_pull_policy in _PULL_POLICIES, "/".join(_PULL_POLICIES)
        )
        check(
            "service_account",
            bool(_DNS_SUBDOMAIN.match(self.service_account)),
            "a service account name",
        )
        check(
            "label_prefix",
            len(self.label_prefix) <= 253 and bool(_DNS_SUBDOMAIN.match(self.label_prefix)),
            "a DNS subdomain such as lake.texera.io",
        )
        for attribute in ("unit_port", "registry_port", "gatekeeper_port"):
            check(attribute, 1 <= getattr(self, attribute) <= 65535, "a port (1 to 65535)")
        check("scratch_mib", self.scratch_mib >= 64, "at least 64")
        for attribute in ("registry_selector", "gateway_selector"):
            parses(attribute, label_selector)
        parses("storage_cidrs", cidr_list)
        parses("storage_ports", port_list)
        if problems:
            raise ConfigError("invalid settings: " + "; ".join(problems))

    @classmethod
    def variable(cls, attribute: str) -> str:
        """The environment variable of a setting, by attribute name."""
        return cls.variable_name(next(f for f in fields(cls) if f.name == attribute))

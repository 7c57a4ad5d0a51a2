"""Checks of Kubernetes objects shared by the launcher's and the deployment's tests: the
API's schemas of one pinned Kubernetes version, and the rules that keep Pods confined."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import kubernetes_validate

from unit_launcher.pod_manifests import SECRET_SETTING_NAME, URL_WITH_PASSWORD

#: The Kubernetes version whose OpenAPI schemas every object must satisfy (that of the
#: pinned client, kubernetes 36).
KUBERNETES_VERSION = "1.36.0"


def validate(manifest: Mapping[str, Any]) -> None:
    """Raises kubernetes_validate.ValidationError unless the object fits the schema (strict:
    no field the API does not know)."""
    kubernetes_validate.validate(dict(manifest), KUBERNETES_VERSION, strict=True)


def pod_spec(manifest: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The Pod spec of a Pod or a workload (its template), else None."""
    if manifest["kind"] == "Pod":
        spec: Mapping[str, Any] = manifest["spec"]
        return spec
    template = manifest.get("spec", {}).get("template")
    return template["spec"] if template else None


def containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


def confinement_problems(name: str, spec: Mapping[str, Any]) -> list[str]:
    """What lets a Pod's containers do more than they should: root, a writable root file
    system, privilege escalation, capabilities, no seccomp profile, no resource limits, or a
    secret in the environment."""
    problems = []
    pod_context = spec.get("securityContext", {})
    if pod_context.get("seccompProfile", {}).get("type") != "RuntimeDefault":
        problems.append(f"{name}: no RuntimeDefault seccomp profile")
    for container in containers(spec):
        where = f"{name}/{container['name']}"
        context = {**pod_context, **container.get("securityContext", {})}
        if context.get("runAsNonRoot") is not True or context.get("runAsUser", 1) == 0:
            problems.append(f"{where}: may run as root")
        if context.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{where}: root file system is writable")
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: privilege escalation allowed")
        if context.get("privileged"):
            problems.append(f"{where}: privileged")
        if context.get("capabilities", {}).get("drop") != ["ALL"]:
            problems.append(f"{where}: keeps capabilities")
        resources = container.get("resources", {})
        for bound in ("requests", "limits"):
            if not {"cpu", "memory"} <= set(resources.get(bound, {})):
                problems.append(f"{where}: no cpu and memory {bound}")
        problems.extend(f"{where}: {problem}" for problem in environment_problems(container))
    return problems


def environment_problems(container: Mapping[str, Any]) -> list[str]:
    """Secrets reaching a container through its environment."""
    problems = []
    for variable in container.get("env", []):
        if SECRET_SETTING_NAME.search(variable["name"]):
            problems.append(f"variable {variable['name']} would carry a secret")
        if URL_WITH_PASSWORD.search(variable.get("value", "")):
            problems.append(f"variable {variable['name']} has a password in a URL")
        if "secretKeyRef" in variable.get("valueFrom", {}):
            problems.append(f"variable {variable['name']} comes from a Secret")
    for source in container.get("envFrom", []):
        if "secretRef" in source:
            problems.append("the environment comes from a Secret")
    return problems

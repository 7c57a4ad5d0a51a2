"""Which settings a deployment of a mesh service must give, derived from the service's own
settings classes, and what a deployment's environment lacks of them.

A setting is required when the service cannot start without it: its settings' validate()
refuses the environment the deployment gives (every ``_FILE`` there replaced by a readable
dummy file, since the real secrets are not committed), or it is a secret with no default
(empty), which nothing but the deployment can give. The secrets of the platform warehouse
(catalog_map.platform) are exempt from the second rule: they are needed only in the global
catalog modes, where validate() itself requires them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from catalog_map.platform import PlatformWarehouseSettings
from gateway.settings import GatewaySettings
from result_service.settings import ResultServiceSettings
from service_runtime.config import ConfigError, Settings
from unit_launcher.kubernetes_settings import KubernetesLauncherSettings
from warehouse_service.settings import WarehouseServiceSettings

#: The settings each service's command reads (its console script, as pyproject.toml names it).
SETTINGS_OF_COMMAND: dict[str, type[Settings]] = {
    "texera-lake-gateway": GatewaySettings,
    "texera-lake-warehouse-service": WarehouseServiceSettings,
    "texera-lake-result-service": ResultServiceSettings,
}
#: What a dummy secret file holds: long enough for every secret's minimum length.
DUMMY_SECRET = "dummy-" + "x" * 58
_CONDITIONAL_SECRETS = {f.name for f in dataclasses.fields(PlatformWarehouseSettings)}


def required_secret_files(cls: type[Settings]) -> list[str]:
    """The ``_FILE`` variables of the secrets of cls that have no default."""
    return [
        f"{cls.variable_name(f)}_FILE"
        for f in dataclasses.fields(cls)
        if f.metadata["secret"]
        and not f.metadata["as_file"]
        and not f.default
        and f.name not in _CONDITIONAL_SECRETS
    ]


def with_dummy_files(environment: Mapping[str, str], folder: Path) -> dict[str, str]:
    """environment with each ``_FILE`` variable naming a dummy file only its owner reads."""
    folder.mkdir(parents=True, exist_ok=True)
    given = dict(environment)
    for variable in environment:
        if variable.endswith("_FILE"):
            path = folder / variable
            path.write_text(DUMMY_SECRET)
            path.chmod(0o600)
            given[variable] = str(path)
    return given


def missing_settings(command: str, environment: Mapping[str, str], folder: Path) -> list[str]:
    """What the service run by command lacks in environment: the validate() complaints of
    its settings (and of the Kubernetes launcher's, when it launches units so), and each
    secret without a default that no ``_FILE`` variable gives."""
    cls = SETTINGS_OF_COMMAND[command]
    problems = [
        f"{variable} is not given"
        for variable in required_secret_files(cls)
        if variable not in environment
    ]
    given = with_dummy_files(environment, folder)
    classes: list[type[Settings]] = [cls]
    if given.get("TEXERA_LAKE_WAREHOUSE_UNIT_LAUNCHER") == "kubernetes":
        classes.append(KubernetesLauncherSettings)
    for settings_class in classes:
        try:
            # Every settings class has validate() (ServerSettings' or the launcher's own).
            settings_class.from_env(given).validate()  # type: ignore[attr-defined]
        except ConfigError as exc:
            problems.append(str(exc))
    return problems

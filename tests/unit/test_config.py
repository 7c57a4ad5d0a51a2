"""Settings from environment variables."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from result_service.settings import ResultServiceSettings
from scripts.settings_table import ALL_SETTINGS
from service_runtime.config import ConfigError, Settings, markdown_table, setting
from tests.conftest import ROOT
from warehouse_service.settings import WarehouseServiceSettings

#: Serving plaintext, as a service must be told to: these tests check other settings.
PLAINTEXT = {
    "TEXERA_LAKE_RESULT_PLAINTEXT": "true",
    "TEXERA_LAKE_WAREHOUSE_PLAINTEXT": "true",
}


@dataclass(frozen=True, repr=False)
class ExampleSettings(Settings):
    scope = "EXAMPLE"
    retries: int = setting("RETRIES", 3, "How often to retry.")
    ratio: float = setting("RATIO", 0.5, "A ratio.")
    verbose: bool = setting("VERBOSE", False, "Talk more.", scoped=True)
    password: str = setting("PASSWORD", "", "A secret.", secret=True)


def test_defaults_apply_when_nothing_is_set() -> None:
    settings = ExampleSettings.from_env({})
    assert (settings.retries, settings.ratio, settings.verbose) == (3, 0.5, False)


def test_values_are_parsed_by_type_and_scoped_names_carry_the_scope() -> None:
    settings = ExampleSettings.from_env(
        {
            "TEXERA_LAKE_RETRIES": "7",
            "TEXERA_LAKE_RATIO": "0.25",
            "TEXERA_LAKE_EXAMPLE_VERBOSE": "yes",
            "TEXERA_LAKE_VERBOSE": "no",  # unscoped name of a scoped setting: ignored
        }
    )
    assert (settings.retries, settings.ratio, settings.verbose) == (7, 0.25, True)


def test_malformed_values_are_refused_naming_each_variable() -> None:
    with pytest.raises(ConfigError) as error:
        ExampleSettings.from_env(
            {"TEXERA_LAKE_RETRIES": "many", "TEXERA_LAKE_EXAMPLE_VERBOSE": "maybe"}
        )
    assert "TEXERA_LAKE_RETRIES" in str(error.value)
    assert "TEXERA_LAKE_EXAMPLE_VERBOSE" in str(error.value)


def _secret_file(tmp_path: Path, content: str, mode: int = 0o600) -> str:
    path = tmp_path / "secret"
    path.write_text(content + "\n")
    path.chmod(mode)
    return str(path)


def test_secrets_come_from_their_file_and_repr_hides_them(tmp_path: Path) -> None:
    path = _secret_file(tmp_path, "hunter2-canary")
    settings = ExampleSettings.from_env({"TEXERA_LAKE_PASSWORD_FILE": path})
    assert settings.password == "hunter2-canary"
    assert "hunter2-canary" not in repr(settings)


def test_a_secret_in_the_environment_is_refused_naming_the_file_variable() -> None:
    with pytest.raises(ConfigError, match="TEXERA_LAKE_PASSWORD_FILE") as error:
        ExampleSettings.from_env({"TEXERA_LAKE_PASSWORD": "hunter2-canary"})
    assert "hunter2-canary" not in str(error.value)


def test_a_secret_file_others_may_read_is_refused(tmp_path: Path) -> None:
    path = _secret_file(tmp_path, "hunter2-canary", mode=0o644)
    with pytest.raises(ConfigError, match="chmod 600") as error:
        ExampleSettings.from_env({"TEXERA_LAKE_PASSWORD_FILE": path})
    assert "hunter2-canary" not in str(error.value)


def test_a_missing_secret_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read TEXERA_LAKE_PASSWORD_FILE"):
        ExampleSettings.from_env({"TEXERA_LAKE_PASSWORD_FILE": str(tmp_path / "none")})


def test_secret_length_validation_names_the_file_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="TEXERA_LAKE_RESULT_PAGE_TOKEN_KEY_FILE must be set"):
        ResultServiceSettings.from_env(PLAINTEXT).validate()
    short = _secret_file(tmp_path, "short")
    with pytest.raises(ConfigError, match="PAGE_TOKEN_KEY_FILE must hold at least 32"):
        ResultServiceSettings.from_env(
            {**PLAINTEXT, "TEXERA_LAKE_RESULT_PAGE_TOKEN_KEY_FILE": short}
        ).validate()


def test_the_configuration_page_documents_every_setting() -> None:
    configuration = (ROOT / "docs" / "configuration.md").read_text()
    documented = set(re.findall(r"`(TEXERA_LAKE_[A-Z0-9_]+)`", configuration))
    table = markdown_table(*ALL_SETTINGS)
    declared = set(re.findall(r"`(TEXERA_LAKE_[A-Z0-9_]+)`", table))
    assert declared - documented == set(), (
        "run `python scripts/settings_table.py` and update docs/configuration.md"
    )
    assert table in configuration


def test_the_warehouse_token_scope_may_fill_in_only_the_warehouse_and_access() -> None:
    variable = "TEXERA_LAKE_CATALOG_WAREHOUSE_TOKEN_SCOPE"
    with pytest.raises(ConfigError, match=variable):
        WarehouseServiceSettings.from_env({**PLAINTEXT, variable: "warehouse:{id}"}).validate()
    # A fixed scope passes that check: validation goes on to the next missing setting.
    with pytest.raises(ConfigError) as error:
        WarehouseServiceSettings.from_env({**PLAINTEXT, variable: "lakekeeper"}).validate()
    assert "TEXERA_LAKE_WAREHOUSE_DATABASE_URL_FILE" in str(error.value)

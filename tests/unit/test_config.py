"""Settings from environment variables."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from scripts.settings_table import ALL_SETTINGS
from service_runtime.config import ConfigError, ServerSettings, Settings, markdown_table, setting
from tests.conftest import ROOT


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


def test_repr_hides_secret_values() -> None:
    settings = ExampleSettings.from_env({"TEXERA_LAKE_PASSWORD": "hunter2-canary"})
    assert settings.password == "hunter2-canary"
    assert "hunter2-canary" not in repr(settings)


def test_server_settings_validation_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="TEXERA_LAKE_JWT_SECRET must be set"):
        ServerSettings.from_env({}).validate()
    with pytest.raises(ConfigError, match="TEXERA_LAKE_JWT_SECRET must be at least 32"):
        ServerSettings.from_env({"TEXERA_LAKE_JWT_SECRET": "short"}).validate()
    with pytest.raises(ConfigError, match="TEXERA_LAKE_LOG_LEVEL"):
        ServerSettings.from_env(
            {"TEXERA_LAKE_JWT_SECRET": "x" * 32, "TEXERA_LAKE_LOG_LEVEL": "LOUD"}
        ).validate()


def test_readme_documents_every_setting() -> None:
    readme = (ROOT / "README.md").read_text()
    documented = set(re.findall(r"`(TEXERA_LAKE_[A-Z0-9_]+)`", readme))
    table = markdown_table(*ALL_SETTINGS)
    declared = set(re.findall(r"`(TEXERA_LAKE_[A-Z0-9_]+)`", table))
    assert declared - documented == set(), (
        "run `python scripts/settings_table.py` and update the README"
    )
    assert table in readme

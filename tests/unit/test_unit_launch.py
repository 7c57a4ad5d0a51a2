"""What a computing unit is launched with: its settings, its secrets as files, nothing else."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from unit_launcher.base import UnitSpec
from unit_launcher.factory import launcher_named
from unit_launcher.process import ProcessLauncher
from warehouse_service.units.unit_supervisor import unit_settings

SECRET = "s" * 40


def test_units_get_the_registrys_non_secret_unit_settings_only() -> None:
    environ = {
        "TEXERA_LAKE_CU_CAPACITY": "3",
        "TEXERA_LAKE_REGISTRY_TARGET": "registry:50051",
        "TEXERA_LAKE_JWT_SECRET": SECRET,
        "TEXERA_LAKE_CU_CREDENTIAL": "a credential",
        "TEXERA_LAKE_WAREHOUSE_DATABASE_URL": "postgresql://u:p@h/db",
        "PATH": "/usr/bin",
    }
    assert unit_settings(environ) == {
        "TEXERA_LAKE_CU_CAPACITY": "3",
        "TEXERA_LAKE_REGISTRY_TARGET": "registry:50051",
    }


def test_a_unit_gets_its_secrets_as_files_and_a_clean_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEXERA_LAKE_WAREHOUSE_DATABASE_URL", "postgresql://u:p@h/db")
    monkeypatch.setenv("TEXERA_LAKE_JWT_SECRET", SECRET)
    launcher = ProcessLauncher(tmp_path / "units")
    spec = UnitSpec(
        unit_id="cu-test",
        owner_user_id="ann",
        cores=2,
        memory_mib=1536,
        settings={"TEXERA_LAKE_CU_CAPACITY": "3"},
        secrets={"TEXERA_LAKE_CU_CREDENTIAL": "unit credential"},
    )
    home = launcher._prepare_home(spec.unit_id, None)
    launcher._write_secrets(home, spec.secrets, None)
    environment = {**launcher._environment(spec, home), **launcher._identity(spec, home, 12345)}
    assert "unit credential" not in str(environment)
    assert SECRET not in str(environment)
    assert "TEXERA_LAKE_WAREHOUSE_DATABASE_URL" not in environment
    credential = Path(environment["TEXERA_LAKE_CU_CREDENTIAL_FILE"])
    assert credential.read_text() == "unit credential"
    assert stat.S_IMODE(credential.stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert environment["TMPDIR"].startswith(str(home))
    assert environment["SPARK_LOCAL_DIRS"].startswith(str(home))
    assert environment["TEXERA_LAKE_CU_SPARK_MASTER"] == "local[2]"
    assert environment["TEXERA_LAKE_CU_SPARK_DRIVER_MEMORY"] == "1536m"
    assert environment["TEXERA_LAKE_CU_CAPACITY"] == "3"
    allowed = {"PATH", "JAVA_HOME", "LANG", "LC_ALL", "TZ", "HOME", "TMPDIR", "SPARK_LOCAL_DIRS"}
    allowed |= {"PYTHONPATH", "PYTHONUNBUFFERED", "TEXERA_LAKE_HOST"}
    assert {n for n in environment if not n.startswith("TEXERA_LAKE_CU_")} <= allowed


def test_the_kubernetes_launcher_is_built_from_its_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    monkeypatch.setenv("TEXERA_LAKE_WAREHOUSE_K8S_KUBECONFIG", str(kubeconfig))
    launcher = launcher_named("kubernetes", root=tmp_path, host="127.0.0.1")
    assert type(launcher).__name__ == "KubernetesLauncher"

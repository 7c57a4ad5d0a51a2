"""What a computing unit is launched with: its settings, its secrets as files, nothing else."""

from __future__ import annotations

import errno
import stat
from pathlib import Path

import pytest

from unit_launcher.base import UnitSpec
from unit_launcher.factory import launcher_named
from unit_launcher.process import ProcessLauncher
from unit_launcher.unit_groups import UnitGroupsV1
from unit_launcher.unit_memory import unit_memory_bytes
from warehouse_service.units.unit_supervisor import unit_settings

SECRET = "s" * 40
SPEC = UnitSpec(
    unit_id="cu-test",
    owner_user_id="ann",
    cores=2,
    memory_mib=1536,
    settings={"TEXERA_LAKE_CU_CAPACITY": "3", "TEXERA_LAKE_CU_PROCESSES_BOUNDED": "true"},
    secrets={"TEXERA_LAKE_CU_CREDENTIAL": "unit credential"},
)


class RecordedGroups(UnitGroupsV1):
    """Groups that record what they are made with, or refuse to be made."""

    def __init__(self, refusal: OSError | None = None) -> None:
        super().__init__((), 100)
        self.refusal = refusal
        self.made: list[tuple[str, int]] = []

    def make(self, name: str, memory_bytes: int) -> None:
        if self.refusal:
            raise self.refusal
        self.made.append((name, memory_bytes))


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
    home = launcher._prepare_home(SPEC.unit_id, None)
    launcher._write_secrets(home, SPEC.secrets, None)
    environment = {
        **launcher._environment(SPEC, home, bounded=True),
        **launcher._identity(SPEC, home, 12345),
    }
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
    assert environment["TEXERA_LAKE_CU_MEMORY_BUDGET_BYTES"] == str(unit_memory_bytes(2, 1536))
    assert environment["TEXERA_LAKE_CU_PROCESSES_BOUNDED"] == "true"
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


def test_a_units_groups_are_made_for_its_budget_before_it_starts(tmp_path: Path) -> None:
    groups = RecordedGroups()
    launcher = ProcessLauncher(tmp_path / "units", unit_groups=groups)
    assert launcher._bound(SPEC) is groups
    assert groups.made == [("cu-test", unit_memory_bytes(2, 1536))]


def test_a_unit_whose_groups_cannot_be_made_is_told_it_is_not_bounded_and_the_log_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    groups = RecordedGroups(PermissionError(errno.EACCES, "Permission denied"))
    launcher = ProcessLauncher(tmp_path / "units", unit_groups=groups)
    assert launcher._bound(SPEC) is None
    [record] = caplog.records
    assert record.levelname == "WARNING"
    assert "runs its owner's executions only" in record.getMessage()
    assert record.__dict__["why"] == "Permission denied"
    home = launcher._prepare_home(SPEC.unit_id, None)
    # The registry's own setting cannot say otherwise.
    assert launcher._environment(SPEC, home, bounded=False)["TEXERA_LAKE_CU_PROCESSES_BOUNDED"] == (
        "false"
    )

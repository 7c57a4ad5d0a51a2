"""What keeps an idle computing unit small: its driver JVM's options, which make it give memory
back (and keep its files in the unit's own folder), Arrow's allocator in its Python processes,
which gives freed memory back, and the modules its processes load, SQLAlchemy not among them."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from cu_service import arrow_memory
from cu_service.spark import HEAP_FREE_RATIOS, LATE_OPTIMIZATION, driver_java_options, own_files
from cu_service.worker_daemon import PRELOADED, forget_archive_importers
from service_runtime.config import ConfigError
from unit_launcher.unit_settings import ComputingUnitSettings


def test_by_default_the_driver_jvm_collects_and_trims_after_thirty_idle_seconds() -> None:
    options = driver_java_options(ComputingUnitSettings()).split()
    assert options == [
        *own_files(),
        *LATE_OPTIMIZATION,
        "-XX:G1PeriodicGCInterval=30000",
        "-XX:TrimNativeHeapInterval=30000",
        *HEAP_FREE_RATIOS,
    ]


def test_the_units_own_options_come_last_so_that_they_win() -> None:
    settings = ComputingUnitSettings(
        spark_driver_release_seconds=2.5, spark_driver_java_options="-XX:MaxHeapFreeRatio=70"
    )
    options = driver_java_options(settings).split()
    assert "-XX:G1PeriodicGCInterval=2500" in options
    assert "-XX:TrimNativeHeapInterval=2500" in options
    assert options[-1] == "-XX:MaxHeapFreeRatio=70"


def test_the_units_own_options_may_give_the_compiler_its_defaults_back() -> None:
    """The JVM takes the last value of an option: the unit's come after LATE_OPTIMIZATION."""
    defaults = "-XX:Tier4InvocationThreshold=5000 -XX:Tier4CompileThreshold=15000"
    options = driver_java_options(ComputingUnitSettings(spark_driver_java_options=defaults))
    assert options.endswith(defaults)
    assert options.startswith(" ".join([*own_files(), *LATE_OPTIMIZATION]))


def test_zero_leaves_the_jvms_memory_as_it_is() -> None:
    options = driver_java_options(ComputingUnitSettings(spark_driver_release_seconds=0))
    assert options == " ".join([*own_files(), *LATE_OPTIMIZATION])
    settings = ComputingUnitSettings(
        spark_driver_release_seconds=0, spark_driver_java_options="-Xss1m"
    )
    assert driver_java_options(settings) == " ".join([*own_files(), *LATE_OPTIMIZATION, "-Xss1m"])


def test_the_jvm_keeps_its_files_in_the_units_temporary_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    folder = tmp_path / "the unit's tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    options = shlex.split(driver_java_options(ComputingUnitSettings()))
    assert options[:2] == [f"-Djava.io.tmpdir={folder}", "-XX:-UsePerfData"]


@pytest.mark.parametrize("seconds", [-1.0, 86401.0])
def test_the_release_time_is_checked(seconds: float) -> None:
    settings = ComputingUnitSettings(credential="c", spark_driver_release_seconds=seconds)
    with pytest.raises(ConfigError, match="TEXERA_LAKE_CU_SPARK_DRIVER_RELEASE_SECONDS"):
        settings.validate()


@pytest.mark.parametrize("seconds", [-1.0, 86401.0])
def test_the_python_idle_time_is_checked(seconds: float) -> None:
    settings = ComputingUnitSettings(credential="c", python_idle_seconds=seconds)
    with pytest.raises(ConfigError, match="TEXERA_LAKE_CU_PYTHON_IDLE_SECONDS"):
        settings.validate()


def arrow_allocator(environment: dict[str, str]) -> str:
    """The allocator behind Arrow's default pool in a new process that imports the unit's
    package, then pyarrow, in environment."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import cu_service, pyarrow\nprint(pyarrow.default_memory_pool().backend_name)",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=environment,
    ).stdout.strip()


def test_a_units_processes_allocate_arrow_memory_with_jemalloc() -> None:
    environment = {k: v for k, v in os.environ.items() if k != arrow_memory.VARIABLE}
    assert arrow_allocator(environment) == arrow_memory.ALLOCATOR == "jemalloc"


def test_an_operators_choice_of_arrow_allocator_wins() -> None:
    assert arrow_allocator({**os.environ, arrow_memory.VARIABLE: "system"}) == "system"


def test_a_units_driver_and_its_python_workers_do_not_load_sqlalchemy() -> None:
    modules = ["cu_service.__main__", *PRELOADED]
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.startswith('sqlalchemy')))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert loaded.strip() == "[]"


def test_the_worker_daemon_forgets_importers_of_paths_in_sparks_archives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = {
        "/opt/spark/python/lib/pyspark.zip": object(),
        "/opt/spark/jars/spark-core_2.13-4.0.0.jar/pyspark": object(),
        "/venv/lib/python3.11/site-packages": object(),
        "/venv/lib/python3.11/site-packages/pyspark": object(),
    }
    monkeypatch.setattr(sys, "path_importer_cache", dict(cache))
    forget_archive_importers()
    assert sorted(sys.path_importer_cache) == [
        "/venv/lib/python3.11/site-packages",
        "/venv/lib/python3.11/site-packages/pyspark",
    ]

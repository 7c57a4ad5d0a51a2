"""Spark's settings that keep its doors closed to users' code, the unit's task slots, and the
room each task's scratch file systems get."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cu_service import spark_security
from cu_service.spark import master_with_slots, scratch_bytes
from cu_service.worker_daemon import INHERITED_SECRETS
from unit_launcher.unit_memory import MIB, TASK_MIB
from unit_launcher.unit_settings import ComputingUnitSettings
from warehouse_service.units.unit_port import spark_cluster_secret


def test_every_listener_authenticates_and_encrypts_and_local_mode_binds_loopback() -> None:
    found = spark_security.listener_settings(local=True, workers=None)
    assert found["spark.authenticate"] == "true"
    assert found["spark.network.crypto.enabled"] == "true"
    assert found["spark.network.crypto.saslFallback"] == "false"
    assert found["spark.python.unix.domain.socket.enabled"] == "true"
    assert found["spark.driver.bindAddress"] == found["spark.driver.host"] == "127.0.0.1"
    assert spark_security.SECRET_KEY not in found, "in local mode the JVM makes its own secret"
    folder = found["spark.python.unix.domain.socket.dir"]
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    # A socket's path there stays within what a UNIX socket allows (pyspark adds 43 bytes).
    assert len(folder) + 43 <= 107


def test_on_a_cluster_the_listeners_authenticate_and_bind_where_the_deployment_says() -> None:
    found = spark_security.listener_settings(local=False, workers=None)
    assert found["spark.authenticate"] == "true"
    assert "spark.driver.bindAddress" not in found
    assert "spark.python.unix.domain.socket.dir" not in found  # each executor makes its own


def test_a_unit_on_a_cluster_needs_the_clusters_secret() -> None:
    with pytest.raises(Exception, match="SPARK_AUTH_SECRET"):
        ComputingUnitSettings(spark_master="spark://cluster:7077", credential="c").validate()


@pytest.mark.parametrize(
    ("master", "capacity", "expected"),
    [
        ("local[1]", 2, "local[2]"),  # a slot for each execution it runs at once
        ("local[4]", 2, "local[4]"),
        ("local[2]", 3, "local[3]"),
        ("spark://cluster:7077", 2, "spark://cluster:7077"),
    ],
)
def test_a_local_unit_has_a_slot_for_every_execution_it_runs_at_once(
    master: str, capacity: int, expected: str
) -> None:
    assert master_with_slots(ComputingUnitSettings(spark_master=master, capacity=capacity)) == (
        expected
    )


def test_a_bounded_units_tasks_share_its_tasks_part_of_the_bound() -> None:
    bounded = ComputingUnitSettings(spark_master="local[1]", capacity=2, memory_budget_bytes=1)
    assert scratch_bytes(bounded) == TASK_MIB * MIB // 2
    wide = ComputingUnitSettings(spark_master="local[4]", capacity=2, memory_budget_bytes=1)
    assert scratch_bytes(wide) == TASK_MIB * MIB
    unbounded = ComputingUnitSettings(spark_master="local[1]")
    assert scratch_bytes(unbounded) == unbounded.worker_memory_bytes


DAEMON = r"""
import os, sys
from cu_service import worker_daemon
worker_daemon.without_inherited_secrets()
print(sorted(k for k in os.environ if k in worker_daemon.INHERITED_SECRETS), flush=True)
print(open("/proc/self/environ", "rb").read().count(b"SECRET"), flush=True)
"""


def test_the_daemon_starts_again_without_the_secrets_an_executor_handed_it() -> None:
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.getcwd(),
        "PYTHON_UNIX_DOMAIN_ENABLED": "True",
        **dict.fromkeys(INHERITED_SECRETS, "a-secret"),
    }
    done = subprocess.run(
        [sys.executable, "-c", DAEMON], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["[]", "0"]


def test_the_daemon_refuses_a_loopback_port() -> None:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.getcwd()}
    done = subprocess.run(
        [sys.executable, "-c", DAEMON], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode != 0
    assert "UNIX socket" in done.stderr


def test_the_registry_hands_units_the_clusters_secret_from_its_file(tmp_path: Path) -> None:
    secret_file = tmp_path / "spark-secret"
    secret_file.touch(mode=0o600)
    secret_file.write_text("the-clusters-secret\n")
    handed = spark_cluster_secret({"TEXERA_LAKE_CU_SPARK_AUTH_SECRET_FILE": str(secret_file)})
    assert handed == {"TEXERA_LAKE_CU_SPARK_AUTH_SECRET": "the-clusters-secret"}
    assert spark_cluster_secret({}) == {}

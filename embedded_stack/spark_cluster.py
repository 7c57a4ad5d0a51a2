"""A Spark standalone cluster on this machine: a master and workers, each a JVM started by the
PySpark package's own `spark-class`, for running computing units against a cluster
(TEXERA_LAKE_CU_SPARK_MASTER) in tests and benchmarks.

The workers' executors run this environment's Python (its `python3` first on their PATH) with
the project importable, as a real cluster's workers need the unit's packages and code.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark

from service_runtime.ports import free_port
from service_runtime.processes import ManagedProcess, wait_until

HOST = "127.0.0.1"
PROJECT_ROOT = Path(__file__).resolve().parents[1]
SPARK_HOME = Path(pyspark.__file__).parent


@dataclass
class Cluster:
    master_url: str
    ui_url: str
    #: The file (mode 0600) holding the secret the cluster's JVMs share: what a registry's
    #: TEXERA_LAKE_CU_SPARK_AUTH_SECRET_FILE names for the units it runs on this cluster.
    secret_file: Path

    def state(self) -> dict[str, Any]:
        """The master's view of the cluster, from its web UI's JSON."""
        url = f"{self.ui_url}/json/"  # the master's own UI, on loopback
        with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310
            state: dict[str, Any] = json.load(answer)
        return state

    def alive_workers(self) -> list[dict[str, Any]]:
        try:
            workers: list[dict[str, Any]] = self.state()["workers"]
        except OSError:
            return []
        return [w for w in workers if w["state"] == "ALIVE"]

    def application_of(self, unit_id: str) -> dict[str, Any]:
        """The running application of a computing unit (its name holds the unit's id)."""
        applications: list[dict[str, Any]] = self.state()["activeapps"]
        [application] = [a for a in applications if unit_id in a["name"]]
        return application


def _spark_process(
    name: str, main_class: str, args: list[str], logs: Path, properties: Path
) -> ManagedProcess:
    """A master or worker JVM, run by the PySpark package's spark-class, with the cluster's
    settings from the properties file (its secret among them: never on a command line)."""
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(PROJECT_ROOT),
        "SPARK_LOCAL_IP": HOST,
    }
    argv = [
        str(SPARK_HOME / "bin" / "spark-class"),
        main_class,
        *args,
        *("--properties-file", str(properties)),
    ]
    return ManagedProcess(name, argv, logs / f"{name}.log", env=env)


def _secured(logs: Path) -> tuple[Path, Path]:
    """The cluster's secret (a file of its own, for units) and its daemons' properties: Spark's
    authentication and encryption on every connection, with that secret. Both mode 0600."""
    secret = secrets.token_urlsafe(32)
    secret_file, properties = logs / "spark-auth-secret", logs / "spark-cluster.properties"
    for path, text in (
        (secret_file, secret),
        (
            properties,
            "spark.authenticate true\n"
            "spark.network.crypto.enabled true\n"
            "spark.network.crypto.saslFallback false\n"
            f"spark.authenticate.secret {secret}\n",
        ),
    ):
        path.touch(mode=0o600)
        path.write_text(text)
    return secret_file, properties


@contextlib.contextmanager
def standalone_cluster(
    logs: Path, workers: int = 2, cores: int = 1, memory: str = "1g"
) -> Iterator[Cluster]:
    """A master and workers of the given cores and memory each, their logs and work folders
    under logs; stopped on exit."""
    port, ui_port = free_port(HOST), free_port(HOST)
    secret_file, properties = _secured(logs)
    found = Cluster(f"spark://{HOST}:{port}", f"http://{HOST}:{ui_port}", secret_file)
    processes = [
        _spark_process(
            "spark-master",
            "org.apache.spark.deploy.master.Master",
            ["--host", HOST, "--port", str(port), "--webui-port", str(ui_port)],
            logs,
            properties,
        )
    ]
    try:
        for index in range(workers):
            work = logs / f"work-{index}"
            work.mkdir()
            processes.append(
                _spark_process(
                    f"spark-worker-{index}",
                    "org.apache.spark.deploy.worker.Worker",
                    [
                        *("--host", HOST, "--cores", str(cores), "--memory", memory),
                        *("--webui-port", str(free_port(HOST)), "--work-dir", str(work)),
                        found.master_url,
                    ],
                    logs,
                    properties,
                )
            )
        wait_until(
            lambda: len(found.alive_workers()) == workers, processes[0], 120, "spark cluster"
        )
        yield found
    finally:
        for process in reversed(processes):
            process.stop()

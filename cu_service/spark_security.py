"""Spark's own doors, closed to users' code: its RPC and block-transfer listeners, and the
socket on which pyspark's daemon forks Python workers.

A unit's JVM listens for Spark RPC (which deserializes Java objects) and block transfers
(which serve broadcast blocks: every task binary, with the execution token and storage
credentials inside). Users' code runs on the same machine, so every listener asks for Spark's
authentication (``spark.authenticate``) and encrypts what it carries
(``spark.network.crypto.enabled``), with no fallback to the older SASL handshake. In local mode
the JVM makes the secret itself and keeps it in its memory alone, one per unit, and binds
everything to loopback: nothing outside the JVM needs Spark's ports. On a standalone cluster
Spark accepts only one secret shared by the master, the workers and every application
(``TEXERA_LAKE_CU_SPARK_AUTH_SECRET``): it reaches the driver's JVM through py4j, never on
the JVM's command line, and the executors' Python daemons drop it before any task runs
(cu_service.worker_daemon).

pyspark's daemon listens on a UNIX socket instead of a loopback port: a loopback port takes a
secret that every worker, so every task, inherits in its environment; the socket's folder is
the unit's own and covered in every task's sandbox, so no task can reach it.
"""

from __future__ import annotations

import tempfile

#: Where Spark's JVM is reached from its own machine only, in local mode.
LOOPBACK = "127.0.0.1"
#: The setting that carries a cluster's secret into the driver's SparkConf.
SECRET_KEY = "spark.authenticate.secret"  # noqa: S105 - a configuration key, not a secret


def listener_settings(local: bool) -> dict[str, str]:
    """Spark's settings for its listeners and the Python daemon's socket; local: Spark runs
    in the unit's own JVM."""
    found = {
        "spark.authenticate": "true",
        "spark.network.crypto.enabled": "true",
        "spark.network.crypto.saslFallback": "false",
        "spark.python.unix.domain.socket.enabled": "true",
    }
    if local:
        found |= {
            "spark.driver.bindAddress": LOOPBACK,
            "spark.driver.host": LOOPBACK,
            # The daemon's socket in a folder of the unit's TMPDIR, which every task's sandbox
            # covers. On a cluster each executor makes one in its own temporary folder.
            "spark.python.unix.domain.socket.dir": tempfile.mkdtemp(prefix="pyspark-daemon-"),
        }
    return found

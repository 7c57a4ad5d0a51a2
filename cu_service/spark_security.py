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

import atexit
import os
import shutil
import tempfile

#: Where Spark's JVM is reached from its own machine only, in local mode.
LOOPBACK = "127.0.0.1"
#: The longest path a UNIX socket may have (sun_path's 108 bytes, the last a zero).
_SOCKET_PATH_MAX = 107
#: What a socket's path adds to its base folder: mkdtemp's "/pyXXXXXXXX", then the name
#: pyspark's daemon gives its socket, "/.<a UUID>.sock".
_FOLDER_NAME, _DAEMON_SOCKET_NAME = 11, 43
#: The setting that carries a cluster's secret into the driver's SparkConf.
SECRET_KEY = "spark.authenticate.secret"  # noqa: S105 - a configuration key, not a secret


def listener_settings(local: bool, workers: tuple[int, int] | None) -> dict[str, str]:
    """Spark's settings for its listeners and the Python daemon's socket; local: Spark runs
    in the unit's own JVM; workers: the user and group the Python workers run as, when not
    the unit's own (the daemon makes its socket as that user)."""
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
            # On a cluster each executor makes a socket folder in its own temporary folder.
            "spark.python.unix.domain.socket.dir": daemon_socket_folder(workers),
        }
    return found


def daemon_socket_folder(workers: tuple[int, int] | None) -> str:
    """A folder for the daemon's socket, mode 0700, the workers' own when they run as a user
    of their own, removed when the unit ends: in the unit's TMPDIR, or in /tmp where a
    socket's path there would be too long. Every task's sandbox covers both."""
    base = tempfile.gettempdir()
    if len(base) + _FOLDER_NAME + _DAEMON_SOCKET_NAME > _SOCKET_PATH_MAX:
        base = "/tmp"  # noqa: S108 - a folder of the unit's own, mode 0700
    folder = tempfile.mkdtemp(prefix="py", dir=base)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    if workers is not None:
        os.chown(folder, *workers)
    return folder

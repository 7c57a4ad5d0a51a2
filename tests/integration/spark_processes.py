"""The processes of a Spark started by a unit or a test: its JVM and the JVM's Python worker
daemons, seen through psutil."""

from __future__ import annotations

import psutil

from cu_service import worker_daemon


def command_line(process: psutil.Process) -> list[str]:
    """The process's command line; none for one that ended (an unreaped zombie, or gone
    meanwhile)."""
    try:
        if process.status() == psutil.STATUS_ZOMBIE:
            return []
        return process.cmdline()
    except psutil.Error:
        return []


def spark_jvms(parent: psutil.Process) -> list[psutil.Process]:
    """The Spark JVMs that parent started (PySpark's launcher ends by running the JVM in its
    own place, so the JVM is parent's child)."""
    return [
        child
        for child in parent.children()
        if "org.apache.spark.deploy.SparkSubmit" in command_line(child)
    ]


def python_daemons(jvm: psutil.Process) -> list[psutil.Process]:
    """The JVM's live Python worker daemons (the workers they fork are their children)."""
    return [child for child in jvm.children() if worker_daemon.__name__ in command_line(child)]

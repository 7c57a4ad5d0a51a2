"""The computing unit's one long-lived SparkSession, started once with the process.

Executions get their own sessions from it (SparkSession.newSession: private
temporary views and SQL settings) and share its SparkContext, so Spark
schedules their jobs side by side (FAIR scheduling, a pool per submitter,
see cu_service.slot_fairness) and each can be cancelled by its job group. Python workers are
confined by cu_service.worker_daemon.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark import SparkConf
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

import cu_service
from cu_service import pyspark_private, sandbox, spark_security, worker_daemon
from cu_service.worker_daemon import Confinement
from cu_service.workflow.reach import Reach
from service_runtime.config import ConfigError
from service_runtime.processes import ensure_system_user
from unit_launcher.unit_memory import MIB, TASK_MIB
from unit_launcher.unit_settings import ComputingUnitSettings

log = logging.getLogger("cu_service.spark")


#: The session time zone: Spark hands timestamps to Python (mapInArrow) as UTC.
SESSION_TIME_ZONE = "UTC"
#: What Spark sets in the environment of the Python workers of SQL's functions
#: (spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled, on by default).
SIMPLIFIED_TRACEBACK = "SPARK_SIMPLIFIED_TRACEBACK"
#: The driver JVM's heap, after a collection, grows when under a tenth of it is free and
#: shrinks when over a fifth is (the JVM's defaults: 40 % and 70 %).
HEAP_FREE_RATIOS = ("-XX:MinHeapFreeRatio=10", "-XX:MaxHeapFreeRatio=20")
#: The JIT's optimizing compiler (C2) takes a method over from C1 after ten times the calls
#: the JVM waits for by default (Tier4InvocationThreshold 5,000, Tier4MinInvocationThreshold
#: 600) and four times its mix of calls and loops (Tier4CompileThreshold 15,000). Loops keep
#: their threshold (Tier4BackEdgeThreshold), so a long job's hot code is optimized as early as
#: before, while the code that plans and runs small workflows, called often but never hot,
#: mostly stays with C1: a small execution's JVM CPU fell by a sixth, long jobs ran as fast
#: (docs/benchmarks.md, "What a small execution costs in CPU").
LATE_OPTIMIZATION = (
    "-XX:Tier4InvocationThreshold=50000",
    "-XX:Tier4MinInvocationThreshold=6000",
    "-XX:Tier4CompileThreshold=60000",
)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema of a DataFrame's batches in mapInArrow (timestamps in UTC)."""
    return to_arrow_schema(schema, timezone=SESSION_TIME_ZONE)


def analyzed_plan(frame: DataFrame) -> list[dict[str, Any]]:
    """The nodes of a DataFrame's analyzed logical plan, as Spark writes them in JSON."""
    nodes: list[dict[str, Any]] = json.loads(pyspark_private.analyzed_plan(frame).toJSON())
    return nodes


def worker_confinement(settings: ComputingUnitSettings) -> Confinement:
    """The limits of the Python workers, their own OS user when the unit runs as root and
    that user can read the interpreter and the packages the workers run, and a sandbox for
    each task where the settings ask for it and the kernel allows it."""
    user = None
    if os.geteuid() == 0:
        closed = closed_to_workers()
        if closed is None:
            entry = ensure_system_user(settings.worker_user)
            user = (entry.pw_uid, entry.pw_gid, entry.pw_dir)
        else:
            log.warning(
                "Python workers run as root: other users cannot read %s, which they need", closed
            )
    return Confinement(
        memory_bytes=settings.worker_memory_bytes,
        open_files=settings.worker_open_files,
        processes=settings.worker_processes,
        user=user,
        sandboxed=settings.sandbox_tasks and _sandbox_allowed(),
        scratch_bytes=scratch_bytes(settings),
    )


def scratch_bytes(settings: ComputingUnitSettings) -> int:
    """Room for one task's scratch file systems: where the unit is bounded, within the part of
    its memory bound that is its running tasks' (unit_launcher.unit_memory: so much a core),
    divided among its task slots; else the worker's memory limit."""
    if not settings.memory_budget_bytes:
        return settings.worker_memory_bytes
    cores = local_cores(settings) or 1
    share = TASK_MIB * MIB * cores // (task_slots(settings) or cores)  # tasks beyond the cores
    return min(settings.worker_memory_bytes, share)


def _sandbox_allowed() -> bool:
    refused = sandbox.available()
    if refused is not None:
        log.warning("tasks of users' code run unsandboxed: %s", refused)
    return refused is None


def closed_to_workers() -> str | None:
    """A folder that the workers need (the interpreter's, the packages', the unit's code) and
    that users other than its owner cannot read, judged by permission bits; None when all are
    open, so that the workers can run as a user of their own."""
    for path in [sys.base_prefix, sys.prefix, *cu_service.__path__]:
        folder = Path(path).resolve()
        if not folder.stat().st_mode & stat.S_IROTH:
            return str(folder)
        for entered in [folder, *folder.parents]:
            if not entered.stat().st_mode & stat.S_IXOTH:
                return str(entered)
    return None


def is_local(master: str) -> bool:
    """Spark runs inside the unit's own JVM, not on a cluster."""
    return master == "local" or master.startswith("local[")


_LOCAL_CORES = re.compile(r"local\[(\d+|\*)\]")


def local_cores(settings: ComputingUnitSettings) -> int | None:
    """The cores a local master names (local[N], local[*]); None for any other master."""
    found = _LOCAL_CORES.fullmatch(settings.spark_master)
    if found is None:
        return None
    return (os.cpu_count() or 1) if found[1] == "*" else int(found[1])


def task_slots(settings: ComputingUnitSettings) -> int | None:
    """The unit's task slots in local mode: its cores, and at least as many as the executions
    it runs at once (TEXERA_LAKE_CU_CAPACITY); None on a cluster, whose executors' cores they
    are. Every running execution's submitter can then hold a slot: Spark never takes a running
    task's slot back, so a unit with fewer slots than submitters could only share them by
    killing tasks in turn, each losing its work (cu_service.slot_fairness takes back only what
    is over an even share). Slots beyond the cores share them through the kernel's scheduler;
    Spark's default parallelism stays the cores (start_spark sets spark.default.parallelism),
    so a lone user's executions are split as before."""
    cores = local_cores(settings)
    return None if cores is None else max(cores, settings.capacity)


def master_with_slots(settings: ComputingUnitSettings) -> str:
    """The Spark master the unit runs: local[task_slots] in local mode, else as set."""
    slots = task_slots(settings)
    return settings.spark_master if slots is None else f"local[{slots}]"


def shuffle_partitions(spark: SparkSession) -> int:
    """Partitions after a shuffle: two per task slot Spark has now (the unit's cores in local
    mode, the executors' cores on a cluster)."""
    return 2 * spark.sparkContext.defaultParallelism


def jobs_running(spark: SparkSession) -> bool:
    """Spark has a job under way (an execution's, a warm-up's)."""
    return bool(spark.sparkContext.statusTracker().getActiveJobsIds())


#: A JVM writes its performance data (for tools such as jstat) in /tmp/hsperfdata_<user>,
#: whatever its settings, unless told not to.
NO_PERF_DATA = "-XX:-UsePerfData"


def own_files() -> tuple[str, ...]:
    """The driver JVM's options that keep its files in the unit's own folders: its temporary
    files (the native libraries it unpacks, Spark's scratch folders) in TMPDIR, the unit's,
    which goes with the unit, and no performance data. The machine's /tmp is shared by every
    unit and outlives each: what a unit left there would belong to the next unit given its
    user id."""
    return (f"-Djava.io.tmpdir={shlex.quote(tempfile.gettempdir())}", NO_PERF_DATA)


def driver_java_options(settings: ComputingUnitSettings) -> str:
    """The driver JVM's options: where its files go (own_files), when its optimizing compiler
    takes over (LATE_OPTIMIZATION), those that make an idle JVM give memory back (see
    TEXERA_LAKE_CU_SPARK_DRIVER_RELEASE_SECONDS), then the unit's own, which may override them
    (the JVM takes an option's last value). Given on the command line that starts the JVM
    (Spark splits it as a shell would); a JVM that does not know an option ignores it (Spark's
    launcher passes -XX:+IgnoreUnrecognizedVMOptions)."""
    options = [*own_files(), *LATE_OPTIMIZATION]
    if settings.spark_driver_release_seconds > 0:
        milliseconds = round(settings.spark_driver_release_seconds * 1000)
        options += [
            f"-XX:G1PeriodicGCInterval={milliseconds}",
            f"-XX:TrimNativeHeapInterval={milliseconds}",
            *HEAP_FREE_RATIOS,
        ]
    options.append(settings.spark_driver_java_options)
    return " ".join(option for option in options if option)


def start_spark(
    settings: ComputingUnitSettings, confinement: Confinement | None = None
) -> SparkSession:
    """Starts Spark (a JVM) for this unit, its Python workers confined as confinement says
    (by default as the settings say); ConfigError says plainly when Java is missing."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise ConfigError(
            "PySpark needs Java 17 or newer and there is no java on PATH "
            "(on Debian or Ubuntu: sudo apt-get install openjdk-17-jre-headless)"
        )
    if is_local(settings.spark_master):
        # Spark's Python workers must run this interpreter, with this environment's packages.
        # On a cluster they run the cluster's Python (python3 on the workers' PATH).
        os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Spark's scripts run a JVM of their own first, to build the driver's command line.
    os.environ["SPARK_LAUNCHER_OPTS"] = NO_PERF_DATA
    confinement = confinement or worker_confinement(settings)
    encoded = confinement.encode()
    workers = confinement.user[:2] if confinement.user else None  # (uid, gid), not the unit's
    os.environ[worker_daemon.VARIABLE] = encoded  # local mode: the JVM's own environment
    local = is_local(settings.spark_master)
    options: dict[str, bool | float | int | str | None] = {
        "spark.master": master_with_slots(settings),
        "spark.app.name": f"texera-lake-{settings.computing_unit_id}",
        "spark.driver.memory": settings.spark_driver_memory,
        "spark.scheduler.mode": "FAIR",
        "spark.sql.session.timeZone": SESSION_TIME_ZONE,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # Workers are kept for the next task; in a sandboxed unit each task runs in a process
        # forked for it alone (cu_service.sandbox), so nothing one task leaves reaches the next.
        "spark.python.worker.reuse": "true",
        # Shuffle and spill files are encrypted with a key of the JVM's, and broadcasts reach
        # Python workers through a socket, not a file: a task needs none of Spark's files.
        "spark.io.encryption.enabled": "true",
        "spark.python.use.daemon": "true",
        "spark.python.daemon.module": worker_daemon.__name__,
        f"spark.executorEnv.{worker_daemon.VARIABLE}": encoded,  # a cluster's
        # Spark keeps a daemon per distinct worker environment, and adds this variable to that
        # of SQL's Python functions only: set for all, every Python function of the unit (SQL's,
        # the writer's mapInArrow, the workflow's own) shares one daemon, which holds some
        # 110 MiB of preloaded modules.
        f"spark.executorEnv.{SIMPLIFIED_TRACEBACK}": "1",
        # In local mode tasks run in this JVM: an OutOfMemoryError fails its task (and the
        # execution, with RESOURCE_LIMIT), instead of ending the JVM and every execution.
        "spark.executor.killOnFatalError.depth": "0",
        # A killed Python task's worker ends once Spark's monitor sees the kill, not 2 s later:
        # a slot taken back for another user (cu_service.slot_fairness) frees sooner.
        "spark.python.task.killTimeout": "0s",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Users' SQL reads only the workflow's inputs: no `format`.`path` tables.
        "spark.sql.runSQLOnFiles": "false",
        **spark_security.listener_settings(local, workers),
    }
    if java_options := driver_java_options(settings):
        options["spark.driver.extraJavaOptions"] = java_options
    if local:  # executions set theirs (shuffle_partitions)
        options["spark.sql.shuffle.partitions"] = str(2 * (os.cpu_count() or 2))
        # Sources' and shuffles' partitions follow the cores, not the slots (task_slots).
        options["spark.default.parallelism"] = str(local_cores(settings) or 1)
    try:
        # The JVM starts with these settings on its command line; a cluster's secret reaches
        # it afterwards, with the session's settings, through py4j.
        pyspark_private.launch_jvm(SparkConf().setAll([(k, str(v)) for k, v in options.items()]))
        if not local:
            options[spark_security.SECRET_KEY] = settings.spark_auth_secret
        spark = SparkSession.builder.config(map=options).getOrCreate()
    except Exception as exc:  # the JVM did not come up: say so in one line
        raise ConfigError(f"Spark could not start: {str(exc).splitlines()[0]}") from exc
    spark.sparkContext.setLogLevel("ERROR")
    Reach(spark).seal_functions()
    # PySpark logs every analysis error with its JVM stack trace; executions report them instead.
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # one DEBUG line per JVM call otherwise
    log.info("spark started", extra={"master": settings.spark_master, "version": spark.version})
    return spark

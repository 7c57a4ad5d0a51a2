"""The one adapter to PySpark's private API: the JVM side of a session and of a DataFrame (their
py4j objects, for Catalyst's plans and registries), the DDL type parser, jobs that collect
some partitions of a DataFrame's rows, the stopping of the Python worker daemons, and the task
scheduler's pools, active stages and running task attempts (to share slots out); checked
against PYSPARK_VERSION (a unit test fails when the installed version moves, so these are
looked at again)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from py4j.java_gateway import JavaClass
from pyspark import SparkConf, SparkContext
from pyspark.core.rdd import _load_from_socket  # type: ignore[attr-defined]
from pyspark.serializers import BatchedSerializer, CPickleSerializer
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.types import DataType, _parse_datatype_string

#: The PySpark release these helpers were checked against.
PYSPARK_VERSION = "4.3.0"


def parse_type(text: str) -> DataType:
    """A Spark SQL type from its DDL text ("int", "array<string>", "a int, b string")."""
    return _parse_datatype_string(text)


def analyzed_plan(frame: DataFrame) -> Any:
    """The JVM's analyzed logical plan of a DataFrame (a py4j object)."""
    return frame._jdf.queryExecution().analyzed()


def jvm(session: SparkSession) -> Any:
    """The py4j view of the session's JVM (its packages by name)."""
    gateway = session._jvm
    assert gateway is not None, "the session has a JVM"
    return gateway


def java_class(session: SparkSession, name: str) -> Any:
    """The JVM class of that full name (py4j's view of it: its constructor and static methods),
    named at once. Looking it up through the JVM's view (``jvm(session).org.apache...``) asks
    the JVM about every part of the name in turn, and for each part that is not a class it
    searches the whole class path: about 0.5 ms of CPU a lookup."""
    return JavaClass(name, jvm(session)._gateway_client)


def session_state(session: SparkSession) -> Any:
    """The JVM session's SessionState: its registries of functions and its SQL parser."""
    return session._jsparkSession.sessionState()


def pickled_rows(frame: DataFrame) -> Any:
    """The JVM's RDD of a DataFrame's rows as the driver's Python reads them (pickled by the
    JVM), a py4j JavaRDD: what DataFrame.rdd wraps."""
    return frame._jdf.javaToPython()


def collect_partitions(frame: DataFrame, rows: Any, partitions: Sequence[int]) -> list[Row]:
    """The rows of some partitions of rows (pickled_rows of frame), collected by one Spark job.
    Unlike SparkContext.runJob, which maps each partition with a Python function first, the job
    runs no Python of its own beyond what computing the rows does."""
    session = frame.sparkSession
    python_rdd = java_class(session, "org.apache.spark.api.python.PythonRDD")
    served = python_rdd.runJob(session.sparkContext._jsc.sc(), rows, list(partitions))
    serializer = BatchedSerializer(CPickleSerializer())  # type: ignore[no-untyped-call]
    with _load_from_socket(served, serializer) as stream:
        return list(stream)


def stop_python_daemons(session: SparkSession) -> int:
    """Stops each of this JVM's factories of Python workers (SparkEnv's private map of them):
    it ends its idle workers, then its daemon, under the lock with which it hands workers out,
    and starts a daemon again for the next Python task. Returns how many factories there were.
    The field is read by name: py4j cannot look SparkEnv's methods up, since one of them names
    a class that PySpark's jars do not have."""
    spark_env = java_class(session, "java.lang.Class").forName("org.apache.spark.SparkEnv")
    field = spark_env.getDeclaredField("pythonWorkers")
    field.setAccessible(True)
    factories = field.get(session.sparkContext._jsc.sc().env()).values().iterator()
    stopped = 0
    while factories.hasNext():
        factories.next().stop()
        stopped += 1
    return stopped


def launch_jvm(conf: SparkConf) -> None:
    """Starts the driver's JVM (pyspark's py4j gateway) with conf on its command line, before
    any session is made: the settings a session is made with later reach the JVM through py4j
    alone, never on a command line that other processes can read."""
    SparkContext._ensure_initialized(conf=conf)


class ActiveStage(NamedTuple):
    """A stage running now, as Spark's status store holds it."""

    stage_id: int
    attempt_id: int
    #: The FAIR scheduler pool its jobs were submitted to.
    pool: str
    tasks: int
    #: Attempts running now, those being killed among them.
    active: int
    #: Tasks done (each counted once, however many attempts it took).
    completed: int


def _class_of(context: SparkContext, name: str) -> Any:
    gateway = context._gateway
    assert gateway is not None, "the context has a JVM"
    return JavaClass(name, gateway._gateway_client)


def fair_pool(context: SparkContext, name: str) -> None:
    """Adds a pool of that name, scheduling FAIR, under the task scheduler's root pool unless
    it has one: a pool that Spark makes itself for a name it does not know schedules FIFO, and
    only an allocation file read at start can say otherwise. Not safe to call for the same name
    from two threads at once, nor once a job was submitted to that pool."""
    root = context._jsc.sc().taskScheduler().rootPool()
    if root.getSchedulableByName(name) is None:
        fair = _class_of(context, "org.apache.spark.scheduler.SchedulingMode").FAIR()
        pool = _class_of(context, "org.apache.spark.scheduler.Pool")
        root.addSchedulable(pool(name, fair, 0, 1))  # no minimum share, weight 1


def active_stages(context: SparkContext) -> list[ActiveStage]:
    """The stages running now, read from the status store's live view."""
    stages = context._jsc.sc().statusStore().activeStages().iterator()
    found = []
    while stages.hasNext():
        stage = stages.next()
        found.append(
            ActiveStage(
                stage.stageId(),
                stage.attemptId(),
                stage.schedulingPool(),
                stage.numTasks(),
                stage.numActiveTasks(),
                stage.numCompletedIndices(),
            )
        )
    return found


def running_attempts(context: SparkContext, stage: ActiveStage) -> list[tuple[int, int]]:
    """The stage's running task attempts: (task id, launch time in epoch milliseconds)."""
    running = _class_of(context, "org.apache.spark.status.api.v1.TaskStatus").RUNNING
    by_id = _class_of(context, "org.apache.spark.status.api.v1.TaskSorting").ID
    store = context._jsc.sc().statusStore()
    tasks = store.taskList(
        stage.stage_id, stage.attempt_id, 0, stage.tasks, by_id, [running]
    ).iterator()
    found = []
    while tasks.hasNext():
        task = tasks.next()
        found.append((task.taskId(), task.launchTime().getTime()))
    return found


def kill_task_attempt(context: SparkContext, task_id: int, reason: str) -> bool:
    """Kills a running task attempt, interrupting its thread (SparkContext.killTaskAttempt, not
    in PySpark); Spark runs the task again without counting a failure. False if it had ended."""
    killed: bool = context._jsc.sc().killTaskAttempt(task_id, True, reason)
    return killed

"""The executions of this computing unit: accepted, queued, run, watched, cancelled.

Submission validates the workflow (statically, then by compiling it on Spark)
before anything is recorded, then binds the execution to its warehouse in the
registry and queues it. At most `capacity` executions run at once, each on a
thread of its own as its own Spark job group in a FAIR scheduler pool of its
own (so running executions share the task slots); the rest wait in order. An
execution still running at its run time limit is stopped and fails with
RESOURCE_LIMIT.

Every call into the JVM (compiling, sampling progress, cancelling) runs on a
thread, never on the event loop, so the unit keeps answering whatever Spark does.

The execution's current view lives here, changed only on the event loop's
thread; watchers see every change, and a sync task per execution sends the
latest view to the registry, at most once a second (a final state at once),
retrying until the final state has arrived. A final state is shown to callers only once the registry
has recorded it: whoever sees SUCCEEDED can read the results at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import logging
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from opentelemetry import trace
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyspark import SparkContext
from pyspark.accumulators import Accumulator
from pyspark.sql import SparkSession

from catalog_map.cache import CatalogMap
from catalog_map.platform import PLATFORM_OWNER
from cu_service.execution_credentials import ExecutionCredentials, IssuedToken, issued
from cu_service.progress import StageCounts, stage_counts
from cu_service.registry import RegistryClient
from cu_service.resource_limits import RunLimits
from cu_service.runner import ExecutionRun
from cu_service.settings import ComputingUnitSettings
from cu_service.spark import shuffle_partitions
from cu_service.submission import check_queries, check_request
from cu_service.telemetry import Telemetry
from cu_service.workflow.compiler import CompiledWorkflow, OperatorProblem, WorkflowCompiler
from cu_service.workflow.iceberg_source import read_table
from cu_service.workflow.limits import WorkflowLimits
from cu_service.workflow.udf import ConsoleEntry, ConsoleParam
from cu_service.writer.output import WritePolicy, WrittenOutput
from lake_client.executions import TERMINAL
from lake_tables import naming
from service_runtime.errors import FieldViolation, ServiceError, invalid_argument
from service_runtime.propagation import beyond_the_call
from service_runtime.retry import RetryPolicy
from texera.lake.internal.v1 import registry_service_pb2
from texera.lake.v1 import execution_pb2, execution_service_pb2, workflow_pb2

log = logging.getLogger("cu_service.manager")
tracer = trace.get_tracer("cu_service")
EX = execution_pb2
_ID_NAMESPACE = uuid.UUID("0d9c4b7e-3a51-4f62-9d8e-5b2a7c1e4f30")
#: Finished executions kept in memory; older ones are answered from the registry's ledger.
KEEP_FINISHED = 1000
#: An execution's token outlasts its run time limit by this much (it stops a little after).
TOKEN_GRACE_SECONDS = 120.0


def _now() -> Timestamp:
    stamp = Timestamp()
    stamp.GetCurrentTime()
    return stamp


def _copy(execution: execution_pb2.Execution) -> execution_pb2.Execution:
    copied = execution_pb2.Execution()
    copied.CopyFrom(execution)
    return copied


def fingerprint(workflow: workflow_pb2.Workflow) -> str:
    return hashlib.sha256(workflow.SerializeToString(deterministic=True)).hexdigest()


@dataclass
class Prepared:
    """What a run needs; held by the run alone, so that it goes (JVM objects included) with it."""

    session: SparkSession
    catalog: Catalog
    compiled: CompiledWorkflow
    console: Accumulator[list[ConsoleEntry]]


@dataclass
class LocalExecution:
    """The unit's view of one of its executions."""

    execution: execution_pb2.Execution
    fingerprint: str
    group: str
    cancel_reason: str | None = None
    #: Set when the execution ran out of time and is being stopped.
    time_limit_reason: str | None = None
    #: The final view, decided and waiting for the registry to record it before it is shown.
    final: execution_pb2.Execution | None = None
    #: Set with final: the registry sync sends it without waiting out its pause.
    decided: asyncio.Event = field(default_factory=asyncio.Event)
    updated: asyncio.Event = field(default_factory=asyncio.Event)
    dirty: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def owner(self) -> str:
        return self.execution.owner_user_id

    @property
    def terminal(self) -> bool:
        """Its final state is decided (shown or still being recorded)."""
        return self.final is not None or self.execution.state in TERMINAL

    def snapshot(self) -> execution_pb2.Execution:
        return _copy(self.execution)


class ExecutionManager:
    def __init__(
        self,
        spark: SparkSession,
        registry: RegistryClient,
        catalogs: CatalogMap,
        settings: ComputingUnitSettings,
    ) -> None:
        self._spark = spark
        self._registry = registry
        self._catalogs = catalogs
        self._settings = settings
        self._file_roots = settings.file_roots
        self._executions: dict[str, LocalExecution] = {}
        self._submitted = 0
        #: One FAIR scheduler pool per run slot: running executions share the task slots.
        self._pools: asyncio.Queue[str] = asyncio.Queue()
        for slot in range(settings.capacity):
            self._pools.put_nowait(f"execution-slot-{slot}")
        self._limits = RunLimits(settings)
        self._workflow_limits = WorkflowLimits.of(settings)
        self._threads = ThreadPoolExecutor(
            max_workers=settings.capacity, thread_name_prefix="execution"
        )
        self._policy = WritePolicy(
            target_file_size=settings.target_file_size_bytes,
            commit_interval_seconds=settings.commit_interval_seconds,
            commit_max_bytes=settings.commit_max_bytes,
            max_result_bytes=settings.max_result_bytes,
            retry=RetryPolicy(window_seconds=settings.commit_retry_seconds),
        )

    @property
    def spark_context(self) -> SparkContext:
        return self._spark.sparkContext

    @property
    def unit_id(self) -> str:
        return self._registry.unit_id

    def get(self, execution_id: str) -> LocalExecution | None:
        return self._executions.get(execution_id)

    def counts(self) -> tuple[int, int]:
        """(running, queued) executions; safe to call from any thread."""
        executions = list(self._executions.values())  # one step under the GIL
        states = [e.execution.state for e in executions]
        return states.count(EX.EXECUTION_STATE_RUNNING), states.count(EX.EXECUTION_STATE_QUEUED)

    def activity(self) -> tuple[int, int, int]:
        """(running, queued, ever submitted) executions; safe to call from any thread."""
        return (*self.counts(), self._submitted)

    # Submission ---------------------------------------------------------------------

    async def submit(
        self, request: execution_service_pb2.SubmitExecutionRequest, owner: str
    ) -> execution_pb2.Execution:
        check_request(request, self.unit_id, self._workflow_limits)
        digest = fingerprint(request.workflow)
        execution_id = request.execution_id or (
            str(uuid.uuid5(_ID_NAMESPACE, f"{owner}\n{request.request_id.lower()}"))
            if request.request_id
            else str(uuid.uuid4())
        )
        if (known := self._executions.get(execution_id)) is not None:
            if known.owner == owner and known.fingerprint == digest:
                return known.snapshot()
            raise ServiceError(
                grpc.StatusCode.ALREADY_EXISTS,
                f"execution id {execution_id} is already used by another submission",
            )
        binding = await self._registry.resolve_warehouse(request.warehouse_id)
        warehouse_id = binding.warehouse_id  # the platform's, when the request names none
        with tracer.start_as_current_span("catalog"):
            catalog = await self._catalogs.get_or_unavailable(warehouse_id, binding)
        tables = await self._resolve_tables(request.workflow, binding)
        with tracer.start_as_current_span("compile"):
            session, console, compiled = await asyncio.to_thread(
                self._compile, catalog, tables, request.workflow
            )
        bound = await self._registry.bind(
            registry_service_pb2.BindExecutionRequest(
                execution_id=execution_id,
                warehouse_id=warehouse_id,
                workflow_id=request.workflow.workflow_id,
                computing_unit_id=self.unit_id,
                request_id=request.request_id,
                workflow_fingerprint=digest,
            )
        )
        if not bound.created:  # a retry: answer with what the first submission started
            earlier = self._executions.get(bound.execution.execution_id)
            return earlier.snapshot() if earlier else bound.execution
        local = LocalExecution(
            execution=bound.execution,
            fingerprint=digest,
            group=f"execution-{execution_id}",
        )
        prepared = Prepared(session=session, catalog=catalog, compiled=compiled, console=console)
        self._forget_old()
        self._executions[execution_id] = local
        self._submitted += 1
        local.tasks += [
            beyond_the_call(self._run(local, prepared)),
            beyond_the_call(self._sync(local)),
        ]
        log.info(
            "execution accepted",
            extra={"execution_id": execution_id, "warehouse_id": warehouse_id},
        )
        return local.snapshot()

    async def _resolve_tables(
        self, workflow: workflow_pb2.Workflow, binding: registry_service_pb2.CatalogBinding
    ) -> dict[str, tuple[str, ...]]:
        """The tables Iceberg sources read; results of earlier executions resolved through the
        registry. In the platform warehouse of a global mode, which holds every user's tables,
        only those: a table named directly might be anybody's."""
        tables: dict[str, tuple[str, ...]] = {}
        for index, op in enumerate(workflow.operators):
            if op.WhichOneof("kind") != "iceberg_table_source":
                continue
            source = op.iceberg_table_source
            if source.WhichOneof("table") == "table_identifier":
                if binding.owner_user_id == PLATFORM_OWNER:
                    raise invalid_argument(
                        [
                            FieldViolation(
                                f"workflow.operators[{index}].iceberg_table_source.table_identifier",
                                "the platform warehouse is read through results of your own "
                                "executions only (name one in result)",
                            )
                        ]
                    )
                tables[op.operator_id] = (
                    *source.table_identifier.namespace,
                    source.table_identifier.name,
                )
                continue
            field_path = f"workflow.operators[{index}].iceberg_table_source.result"
            try:
                resolved = await self._registry.resolve_execution(source.result.execution_id)
            except ServiceError as exc:
                if exc.code != grpc.StatusCode.NOT_FOUND:
                    raise
                raise invalid_argument(
                    [FieldViolation(field_path, f"no execution {source.result.execution_id}")]
                ) from exc
            if resolved.execution.warehouse_id != binding.warehouse_id:
                raise invalid_argument(
                    [FieldViolation(field_path, "that result is in another warehouse")]
                )
            output = next(
                (
                    o
                    for o in resolved.execution.outputs
                    if o.operator_id == source.result.operator_id
                ),
                None,
            )
            if output is None:
                raise invalid_argument(
                    [FieldViolation(field_path, "that execution has no such result")]
                )
            tables[op.operator_id] = (output.namespace, output.table_name)
        return tables

    def _compile(
        self,
        catalog: Catalog,
        tables: dict[str, tuple[str, ...]],
        workflow: workflow_pb2.Workflow,
    ) -> tuple[SparkSession, Accumulator[list[ConsoleEntry]], CompiledWorkflow]:
        """A session of the execution's own, its console accumulator, and the compiled
        workflow; JVM calls, so on a thread."""
        session = self._spark.newSession()
        session.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions(self._spark)))
        console = self._spark.sparkContext.accumulator([], ConsoleParam())

        def read_iceberg(index: int, op: workflow_pb2.Operator) -> object:
            try:
                return read_table(
                    session, catalog, tables[op.operator_id], op.iceberg_table_source.snapshot_id
                )
            except NoSuchTableError as exc:
                raise OperatorProblem(
                    f"no table {'.'.join(tables[op.operator_id])} in this warehouse"
                ) from exc

        compiler = WorkflowCompiler(
            session,
            console,
            read_iceberg,  # type: ignore[arg-type]
            self._file_roots,
        )
        compiled = compiler.compile(workflow)
        check_queries(workflow, compiled, self._workflow_limits)
        return session, console, compiled

    # Running ------------------------------------------------------------------------

    def _forget_old(self) -> None:
        """Keeps the most recent finished executions; older ones are answered by the registry."""
        finished = [
            e
            for e in self._executions.values()
            if e.terminal and not any(not t.done() for t in e.tasks)
        ]
        for local in finished[: max(0, len(finished) - KEEP_FINISHED)]:
            del self._executions[local.execution.execution_id]

    async def _run(self, local: LocalExecution, prepared: Prepared) -> None:
        with tracer.start_as_current_span(
            "execution", attributes={"execution.id": local.execution.execution_id}
        ):
            with tracer.start_as_current_span("queue"):
                pool = await self._pools.get()
            try:
                if not local.terminal:  # else cancelled while it waited
                    await self._run_in_pool(local, prepared, pool)
            finally:
                self._pools.put_nowait(pool)

    async def _run_in_pool(self, local: LocalExecution, prepared: Prepared, pool: str) -> None:
        execution = local.execution
        properties = {
            naming.EXECUTION_ID: execution.execution_id,
            naming.WORKFLOW_ID: execution.workflow_id,
            naming.COMPUTING_UNIT_ID: self.unit_id,
            naming.OUTPUT_PORT: "0",
        }
        loop = asyncio.get_running_loop()
        run = ExecutionRun(
            execution_id=execution.execution_id,
            group=local.group,
            session=prepared.session,
            catalog=prepared.catalog,
            compiled=prepared.compiled,
            console=prepared.console,
            telemetry=Telemetry(
                prepared.catalog,
                execution.execution_id,
                properties,
                self._settings.telemetry_interval_seconds,
                self._policy.retry,
            ),
            policy=self._policy,
            table_properties=properties,
            reporter=_LoopReporter(self, local, loop),
            cancel_reason=lambda: local.cancel_reason,
            time_limit_reason=lambda: local.time_limit_reason,
            limits=self._limits,
            pool=pool,
            credentials=ExecutionCredentials(
                self._settings.registry_target,
                execution.execution_id,
                partial(self._issue_token, execution.execution_id, loop),
            ),
        )
        # On the run's thread within this task's context: its spans belong to the execution's.
        running = loop.run_in_executor(self._threads, contextvars.copy_context().run, run)
        try:
            await asyncio.wait_for(asyncio.shield(running), self._limits.run_seconds)
        except TimeoutError:
            local.time_limit_reason = self._limits.run_time_exceeded()
            log.warning(
                "execution over its run time limit: stopping it",
                extra={"execution_id": execution.execution_id},
            )
            local.tasks.append(beyond_the_call(self._keep_cancelling(local)))
            await running

    def _issue_token(self, execution_id: str, loop: asyncio.AbstractEventLoop) -> IssuedToken:
        """The execution's token, lasting its run time limit and a little; called from its run's
        thread."""
        asked = self._registry.issue_execution_token(
            execution_id, self._limits.run_seconds + TOKEN_GRACE_SECONDS
        )
        return issued(asyncio.run_coroutine_threadsafe(asked, loop).result())

    def _changed(self, local: LocalExecution) -> None:
        """Wakes watchers and the registry sync; loop thread only."""
        previous, local.updated = local.updated, asyncio.Event()
        previous.set()
        local.dirty.set()

    def mark_running(self, local: LocalExecution) -> None:
        if not local.terminal:
            local.execution.state = EX.EXECUTION_STATE_RUNNING
            local.execution.start_time.CopyFrom(_now())
            self._changed(local)

    def mark_progress(self, local: LocalExecution, outputs: list[WrittenOutput]) -> None:
        if local.terminal:
            return
        del local.execution.outputs[:]
        local.execution.outputs.extend(
            EX.ExecutionOutput(
                operator_id=o.operator_id,
                namespace=o.namespace,
                table_name=o.table_name,
                row_count=o.committed_rows,
                snapshot_id=o.snapshot_id,
                file_count=o.committed_files,
            )
            for o in outputs
        )
        local.execution.progress.rows_written = sum(o.rows for o in outputs)
        local.execution.progress.commits = sum(o.commits for o in outputs)
        self._changed(local)

    def mark_finished(
        self,
        local: LocalExecution,
        state: execution_pb2.ExecutionState.ValueType,
        error: execution_pb2.ExecutionError | None,
        counts: StageCounts | None = None,
    ) -> None:
        """counts: the run's last stage and task counts, if it ran (the periodic sample may
        predate its last tasks)."""
        if local.terminal:
            return
        if counts is not None:
            self._show_progress(local, counts)
        final = local.snapshot()
        final.state = state
        final.end_time.CopyFrom(_now())
        if error is not None:
            final.error.CopyFrom(error)
        if state != EX.EXECUTION_STATE_SUCCEEDED:
            del final.outputs[:]  # dropped with the partial results
        local.final = final
        local.decided.set()
        local.dirty.set()  # shown once the registry has it (see _sync)
        log.info(
            "execution ended",
            extra={
                "execution_id": local.execution.execution_id,
                "state": EX.ExecutionState.Name(state),
            },
        )

    async def sample_progress(self) -> None:
        """Spark's stage and task counts of every running execution, read on a thread."""
        context = self._spark.sparkContext
        for local in list(self._executions.values()):
            if local.execution.state == EX.EXECUTION_STATE_RUNNING:
                counts = await asyncio.to_thread(stage_counts, context, local.group)
                self._show_progress(local, counts)

    def _show_progress(self, local: LocalExecution, counts: StageCounts) -> None:
        shown = StageCounts.shown_in(local.execution.progress)
        if not local.terminal and (counts := counts.after(shown)) != shown:
            counts.copy_to(local.execution.progress)
            self._changed(local)

    async def _sync(self, local: LocalExecution) -> None:
        """Sends the latest view to the registry until it has recorded the final state, then
        shows the registry's record of it."""
        registry_ended = False
        while True:
            await local.dirty.wait()
            local.dirty.clear()
            sent = shown = local.final or local.snapshot()
            if not registry_ended:
                try:
                    # The ledger's record, as GetExecution answers once the execution ended.
                    shown = await self._registry.report(
                        sent.execution_id,
                        sent.state,
                        error=sent.error if sent.HasField("error") else None,
                        outputs=list(sent.outputs),
                        progress=sent.progress,
                    )
                except ServiceError as exc:
                    if exc.code == grpc.StatusCode.FAILED_PRECONDITION:
                        # The registry ended it (this unit's lease lapsed): its word is final,
                        # the run is stopped and its end is only shown here.
                        registry_ended = True
                        await self.cancel(local, "the registry ended the execution: " + exc.message)
                        local.dirty.set()
                        continue
                    log.warning(
                        "could not report to the registry; retrying",
                        extra={"execution_id": sent.execution_id, "code": exc.code.name},
                    )
                    local.dirty.set()
                    await asyncio.sleep(2.0)
                    continue
            if sent.state in TERMINAL:
                local.execution.CopyFrom(shown)
                self._changed(local)
                return
            # At most one report a second, changes meanwhile coalesced; but a final state goes
            # out as soon as it is decided, since callers wait for it.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(local.decided.wait(), 1.0)

    # Watching and cancelling --------------------------------------------------------

    async def watch(self, local: LocalExecution) -> AsyncIterator[execution_pb2.Execution]:
        while True:
            changed = local.updated
            snapshot = local.snapshot()
            yield snapshot
            if snapshot.state in TERMINAL:
                return
            await changed.wait()

    async def cancel(self, local: LocalExecution, reason: str) -> execution_pb2.Execution:
        if local.terminal or local.cancel_reason is not None:
            return local.snapshot()
        local.cancel_reason = reason or "cancelled by the user"
        if local.execution.state == EX.EXECUTION_STATE_QUEUED:
            self.mark_finished(
                local,
                EX.EXECUTION_STATE_CANCELLED,
                EX.ExecutionError(reason="CANCELLED_BY_USER", message=local.cancel_reason),
            )
            with contextlib.suppress(TimeoutError):  # the registry may be slow; then QUEUED
                async with asyncio.timeout(10.0):
                    await self._shown(local)
        else:
            local.tasks.append(beyond_the_call(self._keep_cancelling(local)))
        return local.snapshot()

    @staticmethod
    async def _shown(local: LocalExecution) -> None:
        """Waits until the final state is recorded and shown."""
        while local.execution.state not in TERMINAL:
            await local.updated.wait()

    async def _keep_cancelling(self, local: LocalExecution) -> None:
        """Cancels the run's Spark jobs until it ends: a job group's cancel reaches only the
        jobs running at that moment, and the run may be about to start another."""
        while not local.terminal:
            await asyncio.to_thread(self._spark.sparkContext.cancelJobGroup, local.group)
            await asyncio.sleep(0.5)

    async def cancel_all(self, reason: str) -> None:
        for local in list(self._executions.values()):
            await self.cancel(local, reason)

    async def close(self, wait_seconds: float = 10.0) -> None:
        """Stops what runs (its partial results are dropped) and lets the final states out."""
        await self.cancel_all("the computing unit is shutting down")
        tasks = [task for local in self._executions.values() for task in local.tasks]
        if tasks:
            await asyncio.wait(tasks, timeout=wait_seconds)
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._threads.shutdown(wait=False, cancel_futures=True)


@dataclass
class _LoopReporter:
    """Hands a run's reports (from its thread) to the manager on the event loop."""

    manager: ExecutionManager
    local: LocalExecution
    loop: asyncio.AbstractEventLoop

    def running(self) -> None:
        self.loop.call_soon_threadsafe(self.manager.mark_running, self.local)

    def progress(self, outputs: list[WrittenOutput]) -> None:
        snapshot = [WrittenOutput(**vars(o)) for o in outputs]
        self.loop.call_soon_threadsafe(self.manager.mark_progress, self.local, snapshot)

    def finished(
        self,
        state: execution_pb2.ExecutionState.ValueType,
        error: execution_pb2.ExecutionError | None,
    ) -> None:
        succeeded = state == EX.EXECUTION_STATE_SUCCEEDED
        counts = stage_counts(self.manager.spark_context, self.local.group, final=succeeded)
        self.loop.call_soon_threadsafe(self.manager.mark_finished, self.local, state, error, counts)

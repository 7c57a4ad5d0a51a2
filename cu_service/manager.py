"""The executions of this computing unit: accepted, queued, run, cancelled.

Submission validates the workflow (statically, then by compiling it on Spark, see
preparation) before anything is recorded, then binds the execution to its warehouse in the
registry and queues it. At most `capacity` executions run at once, each on a thread of its own
as its own Spark job group, in its submitter's FAIR scheduler pool (so submitters, then their
executions, share the task slots; see slot_fairness); the rest wait in order. An execution
still running at its run time limit is stopped and fails with RESOURCE_LIMIT.

Every call into the JVM (compiling, sampling progress, cancelling) runs on a thread, never on
the event loop, so the unit keeps answering whatever Spark does. Each execution's view
(execution_view) changes on the event loop's thread only, and a task per execution keeps the
registry's ledger up to date with it (registry_sync).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import logging
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import grpc
from opentelemetry import trace
from pyspark import SparkContext
from pyspark.sql import SparkSession

from catalog_map.backends import close_catalog
from cu_service.execution_catalog import ExecutionCatalogs
from cu_service.execution_credentials import ExecutionCredentials, IssuedToken, issued
from cu_service.execution_view import LocalExecution
from cu_service.preparation import Preparation, Prepared
from cu_service.progress import stage_counts
from cu_service.registry import RegistryClient
from cu_service.registry_sync import sync_with_registry
from cu_service.resource_limits import RunLimits
from cu_service.runner import ExecutionRun
from cu_service.slot_fairness import SlotFairness
from cu_service.source_tables import resolve_source_tables
from cu_service.spark import task_slots
from cu_service.submission import check_request
from cu_service.telemetry import Telemetry
from cu_service.workflow.file_roots import FileRoots
from cu_service.workflow.limits import WorkflowLimits
from cu_service.writer.output import WritePolicy, WrittenOutput
from lake_tables import naming
from service_runtime.errors import ServiceError
from service_runtime.propagation import beyond_the_call
from service_runtime.retry import RetryPolicy
from service_runtime.tls.mesh_client import MeshClientTls
from texera.lake.internal.v1 import registry_service_pb2
from texera.lake.v1 import execution_pb2, execution_service_pb2, workflow_pb2
from unit_launcher.unit_settings import ComputingUnitSettings

log = logging.getLogger("cu_service.manager")
tracer = trace.get_tracer("cu_service")
EX = execution_pb2
_ID_NAMESPACE = uuid.UUID("0d9c4b7e-3a51-4f62-9d8e-5b2a7c1e4f30")
#: Finished executions kept in memory; older ones are answered from the registry's ledger.
KEEP_FINISHED = 1000
#: An execution's token outlasts its run time limit by this much (it stops a little after).
TOKEN_GRACE_SECONDS = 120.0


def fingerprint(workflow: workflow_pb2.Workflow) -> str:
    return hashlib.sha256(workflow.SerializeToString(deterministic=True)).hexdigest()


class ExecutionManager:
    def __init__(
        self,
        spark: SparkSession,
        registry: RegistryClient,
        catalogs: ExecutionCatalogs,
        settings: ComputingUnitSettings,
        *,
        tls: MeshClientTls | None = None,
    ) -> None:
        # Spark tasks run beside users' code: they get the CA bundle to verify the registry,
        # never the unit's certificate key (see execution_credentials).
        self._task_tls = tls.server_verification_only() if tls is not None else None
        self._spark = spark
        self._registry = registry
        self._catalogs = catalogs
        self._settings = settings
        self._executions: dict[str, LocalExecution] = {}
        self._submitted = 0
        #: Executions running at once (FIFO: asyncio's semaphore wakes waiters in order).
        self._run_slots = asyncio.Semaphore(settings.capacity)
        self._fairness = SlotFairness(spark.sparkContext, task_slots(settings))
        self._limits = RunLimits(settings)
        self._workflow_limits = WorkflowLimits.of(settings)
        roots = FileRoots.from_setting(settings.file_source_roots)
        self._prepare = Preparation(spark, roots, self._workflow_limits)
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

    def unfinished(self) -> list[str]:
        """The ids of the queued and running executions whose end is not decided yet; safe to
        call from any thread."""
        executions = list(self._executions.values())  # one step under the GIL
        return [e.execution.execution_id for e in executions if not e.terminal]

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
        tables = await resolve_source_tables(request.workflow, binding, self._registry)
        with tracer.start_as_current_span("catalog"):
            catalog = await self._catalogs.open(execution_id, warehouse_id, tables.values())
        try:
            with tracer.start_as_current_span("compile"):
                prepared = await asyncio.to_thread(self._prepare, catalog, tables, request.workflow)
            bound = await self._bind(request, execution_id, warehouse_id, digest)
        except BaseException:
            close_catalog(catalog)
            raise
        if not bound.created:  # a retry: answer with what the first submission started
            close_catalog(catalog)
            earlier = self._executions.get(bound.execution.execution_id)
            return earlier.snapshot() if earlier else bound.execution
        local = LocalExecution(
            execution=bound.execution,
            fingerprint=digest,
            group=f"execution-{execution_id}",
        )
        self._forget_old()
        self._executions[execution_id] = local
        self._submitted += 1
        local.tasks += [
            beyond_the_call(self._run(local, prepared)),
            beyond_the_call(sync_with_registry(local, self._registry, self.cancel)),
        ]
        log.info(
            "execution accepted",
            extra={"execution_id": execution_id, "warehouse_id": warehouse_id},
        )
        return local.snapshot()

    async def _bind(
        self,
        request: execution_service_pb2.SubmitExecutionRequest,
        execution_id: str,
        warehouse_id: str,
        digest: str,
    ) -> registry_service_pb2.BindExecutionResponse:
        return await self._registry.bind(
            registry_service_pb2.BindExecutionRequest(
                execution_id=execution_id,
                warehouse_id=warehouse_id,
                workflow_id=request.workflow.workflow_id,
                computing_unit_id=self.unit_id,
                request_id=request.request_id,
                workflow_fingerprint=digest,
            )
        )

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
            try:
                with tracer.start_as_current_span("queue"):
                    await self._run_slots.acquire()
                try:
                    if not local.terminal:  # else cancelled while it waited
                        pool = await self._fairness.enter(local.owner)
                        try:
                            await self._run_in_pool(local, prepared, pool)
                        finally:
                            self._fairness.leave(local.owner)
                finally:
                    self._run_slots.release()
            finally:
                close_catalog(prepared.catalog)

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
            reporter=_LoopReporter(self.spark_context, local, loop),
            cancel_reason=lambda: local.cancel_reason,
            time_limit_reason=lambda: local.time_limit_reason,
            limits=self._limits,
            pool=pool,
            credentials=ExecutionCredentials(
                self._settings.registry,
                execution.execution_id,
                partial(self._issue_token, execution.execution_id, loop),
                tls=self._task_tls,
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

    async def sample_progress(self) -> None:
        """Spark's stage and task counts of every running execution, read on a thread."""
        context = self._spark.sparkContext
        for local in list(self._executions.values()):
            if local.execution.state == EX.EXECUTION_STATE_RUNNING:
                counts = await asyncio.to_thread(stage_counts, context, local.group)
                local.show_progress(counts)

    # Cancelling ---------------------------------------------------------------------

    async def cancel(self, local: LocalExecution, reason: str) -> execution_pb2.Execution:
        if local.terminal or local.cancel_reason is not None:
            return local.snapshot()
        local.cancel_reason = reason or "cancelled by the user"
        if local.execution.state == EX.EXECUTION_STATE_QUEUED:
            local.mark_finished(
                EX.EXECUTION_STATE_CANCELLED,
                EX.ExecutionError(reason="CANCELLED_BY_USER", message=local.cancel_reason),
            )
            with contextlib.suppress(TimeoutError):  # the registry may be slow; then QUEUED
                async with asyncio.timeout(10.0):
                    await local.shown()
        else:
            local.tasks.append(beyond_the_call(self._keep_cancelling(local)))
        return local.snapshot()

    async def cancel_ended(self, execution_ids: Sequence[str]) -> None:
        """Cancels the executions that the registry ended itself; what is shown of each is then
        the ledger's record of its end (see registry_sync)."""
        for execution_id in execution_ids:
            if (local := self._executions.get(execution_id)) is not None:
                await self.cancel(local, "the registry ended the execution")

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
        self._fairness.close()
        self._threads.shutdown(wait=False, cancel_futures=True)


@dataclass
class _LoopReporter:
    """Hands a run's reports (from its thread) to its execution's view on the event loop."""

    spark_context: SparkContext
    local: LocalExecution
    loop: asyncio.AbstractEventLoop

    def running(self) -> None:
        self.loop.call_soon_threadsafe(self.local.mark_running)

    def progress(self, outputs: list[WrittenOutput]) -> None:
        snapshot = [WrittenOutput(**vars(o)) for o in outputs]
        self.loop.call_soon_threadsafe(self.local.mark_progress, snapshot)

    def finished(
        self,
        state: execution_pb2.ExecutionState.ValueType,
        error: execution_pb2.ExecutionError | None,
    ) -> None:
        succeeded = state == EX.EXECUTION_STATE_SUCCEEDED
        counts = stage_counts(self.spark_context, self.local.group, final=succeeded)
        self.loop.call_soon_threadsafe(self.local.mark_finished, state, error, counts)

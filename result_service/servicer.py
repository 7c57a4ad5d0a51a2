"""ResultService: results, their snapshots, runtime statistics and console messages."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import grpc
import pyarrow as pa
from google.protobuf.message import Message
from pyiceberg.expressions import AlwaysTrue, And

from catalog_map.cache import CatalogMap, new_catalog_map
from catalog_map.registry import RegistryReader
from lake_tables.naming import CONSOLE_LOGS, RUNTIME_STATS, execution_table
from result_service import snapshots, telemetry
from result_service.access import Resolved, ResultAccess, storage_failures
from result_service.file_reader import served_arrow_schema
from result_service.json_rows import to_structs
from result_service.metrics import OPEN_STREAMS
from result_service.plan import PlanCache
from result_service.read_options import parse_filter
from result_service.rows import OpenedRows, RowReads, RowRequest
from result_service.settings import ResultServiceSettings
from result_service.streaming import EncodedStream
from result_service.tokens import OffsetTokens, RowTokens
from result_service.visibility import StillVisible, visible_outputs
from service_runtime.callers import require_user
from service_runtime.errors import FieldViolations, ServiceError
from service_runtime.identifiers import IDENTIFIER
from service_runtime.pagination import fingerprint, fitting, page_size
from service_runtime.tls.mesh_client import MeshClientTls
from texera.lake.v1 import execution_pb2, result_pb2, result_service_pb2, result_service_pb2_grpc

#: The messages a page's rows are sent as (result rows, statistics, console messages).
M = TypeVar("M", bound=Message)

log = logging.getLogger("result_service")
rs = result_service_pb2
_ID_RULE = "must be 1 to 64 letters, digits, '_' or '-'"


def _checked(execution_id: str, operator_id: str | None = None, **counts: int) -> FieldViolations:
    """Violations of the ids and of counts that must not be negative; more may be added."""
    violations = FieldViolations()
    violations.check(bool(IDENTIFIER.match(execution_id)), "execution_id", _ID_RULE)
    if operator_id is not None:
        violations.check(bool(IDENTIFIER.match(operator_id)), "operator_id", _ID_RULE)
    for name, value in counts.items():
        violations.check(value >= 0, name, "must not be negative")
    return violations


class ResultServicer(result_service_pb2_grpc.ResultServiceServicer):
    def __init__(self, settings: ResultServiceSettings) -> None:
        self._settings = settings
        self._executor = ThreadPoolExecutor(settings.read_threads, thread_name_prefix="result-read")
        self._plans = PlanCache(settings.plan_cache_size)
        secret = settings.page_token_key
        self._row_tokens = RowTokens(secret, "result-rows")
        self._statistic_tokens = RowTokens(secret, "runtime-statistics")
        self._latest_tokens = OffsetTokens(secret, "latest-runtime-statistics")
        self._console_tokens = RowTokens(secret, "console-messages")
        self._result_list_tokens = OffsetTokens(secret, "results")
        self._snapshot_tokens = OffsetTokens(secret, "snapshots")
        self._registry: RegistryReader | None = None
        self._catalogs: CatalogMap | None = None
        self._access: ResultAccess | None = None
        self._streams = 0

    async def start(self) -> None:
        self._registry = RegistryReader(
            self._settings.registry_target, tls=MeshClientTls.from_settings(self._settings)
        )
        self._catalogs = new_catalog_map(self._settings, self._registry)
        self._access = ResultAccess(self._registry, self._catalogs, self._executor)

    async def stop(self) -> None:
        if self._registry is not None:
            await self._registry.close()
        if self._catalogs is not None:
            self._catalogs.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    @property
    def _ready(self) -> ResultAccess:
        if self._access is None:
            raise ServiceError(grpc.StatusCode.UNAVAILABLE, "the result service is still starting")
        return self._access

    def _rows(self, tokens: RowTokens) -> RowReads:
        return RowReads(self._ready, self._plans, tokens)

    # Results ------------------------------------------------------------------------

    async def ListResults(
        self, request: rs.ListResultsRequest, context: Any
    ) -> rs.ListResultsResponse:
        require_user()
        _checked(request.execution_id).raise_if_any()
        size = page_size(request.page_size, default=50, maximum=500)
        request_fingerprint = fingerprint(request.execution_id)
        offset, _ = self._result_list_tokens.read(request.page_token, request_fingerprint)
        access = self._ready
        resolved = await access.resolve(request.execution_id)
        outputs = sorted(visible_outputs(resolved.execution), key=lambda output: output.operator_id)
        page = outputs[offset : offset + size]
        results = await asyncio.gather(*(self._describe(resolved, o, None) for o in page))
        return rs.ListResultsResponse(
            results=results,
            next_page_token=self._result_list_tokens.following(
                request_fingerprint, offset, size, len(outputs)
            ),
        )

    async def _describe(
        self,
        resolved: Resolved,
        output: Any,
        selector: result_pb2.SnapshotSelector | None,
    ) -> result_pb2.Result:
        table = await self._ready.result_table(resolved, output.operator_id)
        what = f"result of operator {output.operator_id}"
        snapshot = snapshots.choose(table, selector or result_pb2.SnapshotSelector(), what)
        return snapshots.result_message(
            resolved.execution.execution_id, output.operator_id, table, snapshot
        )

    async def GetResult(self, request: rs.GetResultRequest, context: Any) -> rs.GetResultResponse:
        require_user()
        _checked(request.execution_id, request.operator_id).raise_if_any()
        resolved = await self._ready.resolve(request.execution_id)
        output = resolved.output(request.operator_id)
        return rs.GetResultResponse(result=await self._describe(resolved, output, request.snapshot))

    async def _open_result_rows(
        self,
        request: rs.ReadResultPageRequest | rs.StreamResultRequest,
        violations: FieldViolations,
        batch_rows: int,
        bulk: bool,
    ) -> tuple[Resolved, RowReads, OpenedRows, str]:
        """Checks a page or stream request and opens its rows; also returns the fingerprint."""
        require_user()
        try:
            row_filter = parse_filter(request.filter)
        except ServiceError as exc:
            for violation in exc.violations:
                violations.add(violation.field, violation.description)
            row_filter = AlwaysTrue()
        violations.raise_if_any()
        request_fingerprint = fingerprint(
            request.execution_id, request.operator_id, list(request.columns), request.filter
        )
        access, reads = self._ready, self._rows(self._row_tokens)
        resolved = await access.resolve(request.execution_id)
        table = await access.result_table(resolved, request.operator_id)
        opened = await reads.open(
            resolved,
            table,
            RowRequest(
                fingerprint=request_fingerprint,
                what=f"result of operator {request.operator_id}",
                columns=list(request.columns),
                row_filter=row_filter,
                page_token=request.page_token,
                snapshot=request.snapshot,
                skip=request.skip,
                batch_rows=batch_rows,
                bulk=bulk,
            ),
        )
        return resolved, reads, opened, request_fingerprint

    async def ReadResultPage(
        self, request: rs.ReadResultPageRequest, context: Any
    ) -> rs.ReadResultPageResponse:
        violations = _checked(request.execution_id, request.operator_id, skip=request.skip)
        size = page_size(request.page_size, default=100, maximum=10_000)
        resolved, reads, opened, request_fingerprint = await self._open_result_rows(
            request, violations, batch_rows=max(size, 1024), bulk=False
        )
        rows, next_token = await self._page(
            resolved,
            reads,
            opened,
            request_fingerprint,
            size,
            encode=lambda table: to_structs(table, opened.options.projected),
        )
        return rs.ReadResultPageResponse(
            rows=rows,
            columns=snapshots.columns(opened.options.projected),
            snapshot_id=opened.snapshot_id,
            next_page_token=next_token,
        )

    async def _page(
        self,
        resolved: Resolved,
        reads: RowReads,
        opened: OpenedRows,
        request_fingerprint: str,
        size: int,
        *,
        encode: Callable[[pa.Table], Sequence[M]],
    ) -> tuple[Sequence[M], str]:
        """Up to size rows encoded as the response's messages, cut short where they would pass
        the page's byte bound, and the token of the page after them."""
        scan = opened.scan
        if scan is None:
            return [], ""
        page = await self._ready.blocking(resolved, lambda: scan.page(opened.start, size))
        messages, after = encode(page.rows), page.after
        kept = fitting(messages, self._settings.max_page_bytes)
        if kept < len(messages):
            messages = messages[:kept]
            after = await self._ready.blocking(
                resolved, lambda: scan.remaining(scan.seek(opened.start, kept))
            )
        next_token = reads.tokens.issue(request_fingerprint, scan.plan, after) if after else ""
        return messages, next_token

    # Streams ------------------------------------------------------------------------

    async def StreamResult(  # type: ignore[override]  # yields encoded messages (see wire)
        self, request: rs.StreamResultRequest, context: Any
    ) -> AsyncIterator[bytes]:
        violations = _checked(
            request.execution_id,
            request.operator_id,
            skip=request.skip,
            limit=request.limit,
            max_batch_rows=request.max_batch_rows,
        )
        if self._streams >= self._settings.max_streams:
            raise ServiceError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the result service is serving {self._streams} streams, its most; retry later",
                reason="TOO_MANY_STREAMS",
                retry_delay_seconds=1.0,
            )
        self._streams += 1
        OPEN_STREAMS.inc()
        try:
            batch_rows = min(request.max_batch_rows or 65_536, 1_048_576)
            resolved, reads, opened, request_fingerprint = await self._open_result_rows(
                request, violations, batch_rows=batch_rows, bulk=True
            )
            stream = EncodedStream(
                schema=served_arrow_schema(opened.options.projected),
                scan=opened.scan,
                start=opened.start,
                snapshot_id=opened.snapshot_id,
                tokens=reads.tokens,
                request_fingerprint=request_fingerprint,
                batch_rows=batch_rows,
                message_bytes=self._settings.stream_message_bytes,
                limit=request.limit,
                files_at_once=self._settings.read_ahead_files,
            )
            still_visible = StillVisible(
                resolved.execution,
                request.operator_id,
                lambda: self._execution_now(request.execution_id),
                self._settings.visibility_recheck_seconds,
            )
            with storage_failures(resolved.warehouse_id):
                async for message in self._send(stream, still_visible):
                    yield message
        finally:
            self._streams -= 1
            OPEN_STREAMS.dec()

    async def _execution_now(self, execution_id: str) -> execution_pb2.Execution:
        return (await self._ready.resolve(execution_id)).execution

    @staticmethod
    async def _send(stream: EncodedStream, still_visible: StillVisible) -> AsyncIterator[bytes]:
        """The stream's messages, each encoded on a thread of the stream's own while the one
        before it is sent; none once its execution's results may no longer be seen."""
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(1, thread_name_prefix="result-stream") as encoder:
            messages = stream.messages()
            upcoming = loop.run_in_executor(encoder, next, messages, None)
            try:
                while (message := await upcoming) is not None:
                    upcoming = loop.run_in_executor(encoder, next, messages, None)
                    await still_visible.confirm()
                    yield message
            finally:
                await asyncio.wait([upcoming])
                await loop.run_in_executor(encoder, stream.close)

    # Snapshots ----------------------------------------------------------------------

    async def ListSnapshots(
        self, request: rs.ListSnapshotsRequest, context: Any
    ) -> rs.ListSnapshotsResponse:
        require_user()
        _checked(request.execution_id, request.operator_id).raise_if_any()
        size = page_size(request.page_size, default=100, maximum=1000)
        request_fingerprint = fingerprint(request.execution_id, request.operator_id)
        offset, _ = self._snapshot_tokens.read(request.page_token, request_fingerprint)
        access = self._ready
        resolved = await access.resolve(request.execution_id)
        table = await access.result_table(resolved, request.operator_id)
        ordered = sorted(table.snapshots(), key=lambda s: (s.sequence_number or 0, s.timestamp_ms))
        return rs.ListSnapshotsResponse(
            snapshots=[snapshots.snapshot_message(s) for s in ordered[offset : offset + size]],
            next_page_token=self._snapshot_tokens.following(
                request_fingerprint, offset, size, len(ordered)
            ),
        )

    # Statistics and console messages -----------------------------------------------

    async def _open_telemetry(
        self, execution_id: str, namespace: str, reads_with: RowTokens, request: RowRequest
    ) -> tuple[Resolved, RowReads, OpenedRows] | None:
        """The rows of the execution's statistics or console table; None before it exists."""
        access = self._ready
        resolved = await access.resolve(execution_id)
        table = await access.table(resolved, (namespace, execution_table(execution_id)))
        if table is None:  # the execution has not started writing it
            return None
        reads = RowReads(access, self._plans, reads_with)
        return resolved, reads, await reads.open(resolved, table, request)

    @staticmethod
    def _operator_violations(execution_id: str, operator_ids: Sequence[str]) -> FieldViolations:
        violations = _checked(execution_id)
        for index, operator_id in enumerate(operator_ids):
            violations.check(
                bool(IDENTIFIER.match(operator_id)), f"operator_ids[{index}]", _ID_RULE
            )
        return violations

    async def ListRuntimeStatistics(
        self, request: rs.ListRuntimeStatisticsRequest, context: Any
    ) -> rs.ListRuntimeStatisticsResponse:
        require_user()
        self._operator_violations(request.execution_id, request.operator_ids).raise_if_any()
        size = page_size(request.page_size, default=100, maximum=1000)
        request_fingerprint = fingerprint(
            request.execution_id, sorted(request.operator_ids), request.latest_only
        )
        offset, pinned_snapshot = 0, 0
        if request.latest_only:
            offset, pinned_snapshot = self._latest_tokens.read(
                request.page_token, request_fingerprint
            )
        opened = await self._open_telemetry(
            request.execution_id,
            RUNTIME_STATS,
            self._statistic_tokens,
            RowRequest(
                fingerprint=request_fingerprint,
                what=f"runtime statistics of execution {request.execution_id}",
                columns=[],
                row_filter=telemetry.operator_filter(request.operator_ids),
                page_token="" if request.latest_only else request.page_token,
                snapshot=result_pb2.SnapshotSelector(snapshot_id=pinned_snapshot)
                if pinned_snapshot
                else result_pb2.SnapshotSelector(),
            ),
        )
        if opened is None:
            return rs.ListRuntimeStatisticsResponse()
        if not request.latest_only:
            statistics, next_token = await self._page(
                *opened, request_fingerprint, size, encode=telemetry.statistics
            )
            return rs.ListRuntimeStatisticsResponse(
                statistics=statistics, next_page_token=next_token
            )
        # The newest sample per operator: every sample is read, the newest kept, then paged by
        # offset within the snapshot the first page read.
        resolved, _, rows_opened = opened
        scan = rows_opened.scan
        if scan is None:
            return rs.ListRuntimeStatisticsResponse()
        everything = await self._ready.blocking(
            resolved, lambda: scan.page(rows_opened.start, scan.plan.record_count).rows
        )
        latest = telemetry.latest_per_operator(everything)
        return rs.ListRuntimeStatisticsResponse(
            statistics=telemetry.statistics(latest.slice(offset, size)),
            next_page_token=self._latest_tokens.following(
                request_fingerprint, offset, size, latest.num_rows, rows_opened.snapshot_id
            ),
        )

    async def ListConsoleMessages(
        self, request: rs.ListConsoleMessagesRequest, context: Any
    ) -> rs.ListConsoleMessagesResponse:
        require_user()
        violations = self._operator_violations(request.execution_id, request.operator_ids)
        violations.check(
            request.min_level in result_pb2.ConsoleLevel.values(),
            "min_level",
            "must be a ConsoleLevel",
        )
        violations.raise_if_any()
        size = page_size(request.page_size, default=100, maximum=1000)
        request_fingerprint = fingerprint(
            request.execution_id, sorted(request.operator_ids), request.min_level
        )
        opened = await self._open_telemetry(
            request.execution_id,
            CONSOLE_LOGS,
            self._console_tokens,
            RowRequest(
                fingerprint=request_fingerprint,
                what=f"console messages of execution {request.execution_id}",
                columns=[],
                row_filter=And(
                    telemetry.operator_filter(request.operator_ids),
                    telemetry.level_filter(request.min_level),
                ),
                page_token=request.page_token,
            ),
        )
        if opened is None:
            return rs.ListConsoleMessagesResponse()
        messages, next_token = await self._page(
            *opened, request_fingerprint, size, encode=telemetry.console_messages
        )
        return rs.ListConsoleMessagesResponse(messages=messages, next_page_token=next_token)

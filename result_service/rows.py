"""Opening a row read of a table: the snapshot (pinned by the token or chosen), the checked
projection and filter, the cached scan plan and the start position after any skip.

Shared by result pages and streams and by the listings of statistics and console
messages, which page through their tables the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyiceberg.expressions import BooleanExpression
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from catalog_map.credentials import RenewingFileIO
from result_service.access import Resolved, ResultAccess
from result_service.file_reader import FileReader
from result_service.plan import PlanCache
from result_service.read_options import ReadOptions
from result_service.scan import START, Position, Scan
from result_service.snapshots import choose, schema_at
from result_service.tokens import RowTokens
from service_runtime.errors import Resource, not_found
from texera.lake.v1 import result_pb2


@dataclass(frozen=True)
class RowRequest:
    fingerprint: str
    what: str
    columns: list[str]
    row_filter: BooleanExpression
    page_token: str = ""
    snapshot: result_pb2.SnapshotSelector = field(default_factory=result_pb2.SnapshotSelector)
    skip: int = 0
    batch_rows: int = 65_536
    #: The read goes through much of the table (a stream), not one page.
    bulk: bool = False


@dataclass(frozen=True)
class OpenedRows:
    options: ReadOptions
    #: None when the table has no snapshot yet.
    scan: Scan | None
    start: Position

    @property
    def snapshot_id(self) -> int:
        return self.scan.plan.snapshot_id if self.scan is not None else 0


class RowReads:
    def __init__(self, access: ResultAccess, plans: PlanCache, tokens: RowTokens) -> None:
        self._access = access
        self._plans = plans
        self.tokens = tokens

    async def open(self, resolved: Resolved, table: Table, request: RowRequest) -> OpenedRows:
        pinned = (
            self.tokens.read(request.page_token, request.fingerprint)
            if request.page_token
            else None
        )
        if pinned is not None:
            snapshot = table.snapshot_by_id(pinned.snapshot_id)
            if snapshot is None:
                raise not_found(
                    Resource.SNAPSHOT,
                    f"{pinned.snapshot_id} of the {request.what}",
                    "the page token reads it and it was expired; start again",
                )
        else:
            snapshot = choose(table, request.snapshot, request.what)
        options = ReadOptions.of(schema_at(table, snapshot), request.columns, request.row_filter)
        if snapshot is None:
            return OpenedRows(options=options, scan=None, start=START)

        files = RenewingFileIO.of(await self._access.catalog(resolved), table)

        def prepare() -> tuple[Scan, Position]:
            plan = self._plans.plan(table, snapshot, options.row_filter)
            if pinned is not None:
                pinned.check(plan)
            scan = Scan(
                plan,
                self._reader(table, files, options, options.projected, request),
                self._reader(table, files, options, options.filter_columns, None),
            )
            return scan, scan.seek(pinned.position if pinned else START, request.skip)

        scan, start = await self._access.blocking(resolved, prepare)
        return OpenedRows(options=options, scan=scan, start=start)

    @staticmethod
    def _reader(
        table: Table,
        files: RenewingFileIO,
        options: ReadOptions,
        projected: Schema,
        request: RowRequest | None,
    ) -> FileReader:
        """A reader of the request's rows; without a request, one that counts matches."""
        return FileReader(
            table.metadata,
            files,
            table_schema=options.schema,
            projected=projected,
            row_filter=options.row_filter,
            batch_rows=request.batch_rows if request else 65_536,
            bulk=request.bulk if request else True,
        )

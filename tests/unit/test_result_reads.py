"""Scan plans, positions, seeks, pages and read-ahead, on Iceberg tables in a local folder
(pyiceberg's SQL catalog on SQLite: the reads are the same as on S3)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.table import Table

from catalog_map.credentials import RenewingFileIO
from result_service.arrow_ipc import END_OF_STREAM, schema_message, split
from result_service.file_reader import FileReader
from result_service.plan import PlanCache, plan_scan
from result_service.prefetch import Prefetcher
from result_service.read_options import ReadOptions, parse_filter
from result_service.scan import START, Position, Scan
from result_service.tokens import OffsetTokens, Pinned, RowTokens
from service_runtime.errors import ServiceError

APPENDS = 5
ROWS_PER_APPEND = 10_000


def _rows(start: int, stop: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, stop), pa.int64()),
            "label": pa.array([f"n{i}" for i in range(start, stop)]),
            "point": pa.array(
                [{"x": i % 7, "y": str(i)} for i in range(start, stop)],
                pa.struct([("x", pa.int32()), ("y", pa.string())]),
            ),
        }
    )


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Table:
    """Five appends of 10,000 rows, written in row groups of 1,000 rows."""
    folder: Path = tmp_path_factory.mktemp("warehouse")
    catalog = SqlCatalog(
        "local", uri=f"sqlite:///{folder}/catalog.db", warehouse=f"file://{folder}"
    )
    catalog.create_namespace("results")
    created = catalog.create_table(
        "results.numbers",
        schema=_rows(0, 1).schema,
        properties={"write.parquet.row-group-limit": "1000"},
    )
    for index in range(APPENDS):
        created.append(_rows(index * ROWS_PER_APPEND, (index + 1) * ROWS_PER_APPEND))
    return catalog.load_table("results.numbers")


def _scan(table: Table, columns: list[str], text: str = "") -> Scan:
    snapshot = table.current_snapshot()
    assert snapshot is not None
    options = ReadOptions.of(table.schema(), columns, parse_filter(text))
    files = RenewingFileIO(dict(table.io.properties), None, table.location())

    def reader(projected: object) -> FileReader:
        return FileReader(
            table.metadata,
            files,
            table_schema=options.schema,
            projected=projected,  # type: ignore[arg-type]
            row_filter=options.row_filter,
            batch_rows=4_096,
        )

    plan = plan_scan(table, snapshot, options.row_filter)
    return Scan(plan, reader(options.projected), reader(options.filter_columns))


def _ids(scan: Scan, start: Position, size: int) -> list[int]:
    return scan.page(start, size).rows.column("id").to_pylist()  # type: ignore[no-any-return]


def _chain(scan: Scan, size: int) -> list[int]:
    ids: list[int] = []
    position: Position | None = START
    while position is not None:
        page = scan.page(position, size)
        ids += page.rows.column("id").to_pylist()
        position = page.after
    return ids


def test_files_are_planned_in_commit_order(table: Table) -> None:
    scan = _scan(table, [])
    assert [f.record_count for f in scan.plan.files] == [ROWS_PER_APPEND] * APPENDS
    assert all(f.all_match for f in scan.plan.files)
    # The manifest list names the newest manifest first; the plan still reads oldest first.
    assert _ids(scan, START, 3) == [0, 1, 2]


def test_a_chain_of_pages_reads_every_row_once_in_order(table: Table) -> None:
    scan = _scan(table, ["id"])
    assert _chain(scan, 3_333) == list(range(APPENDS * ROWS_PER_APPEND))


def test_a_filtered_chain_prunes_files_and_keeps_order(table: Table) -> None:
    scan = _scan(table, ["label", "id"], "id >= 25000 and id < 31000")
    assert [f.all_match for f in scan.plan.files] == [False, False]  # two files may match
    assert scan.page(START, 2).rows.column_names == ["label", "id"]
    assert _chain(scan, 777) == list(range(25_000, 31_000))


def test_a_file_proven_to_match_is_skipped_by_its_count(table: Table) -> None:
    scan = _scan(table, ["id"], "id >= 20000")
    assert [f.all_match for f in scan.plan.files] == [True, True, True]
    assert scan.seek(START, 15_000) == Position(1, 5_000)
    assert _ids(scan, scan.seek(START, 15_000), 2) == [35_000, 35_001]


def test_seeking_counts_matching_rows_where_it_must(table: Table) -> None:
    scan = _scan(table, ["id"], "point.x == 3")
    position = scan.seek(START, 2_000)
    expected = [i for i in range(APPENDS * ROWS_PER_APPEND) if i % 7 == 3]
    assert _ids(scan, position, 3) == expected[2_000:2_003]
    assert scan.seek(START, len(expected)) == Position(APPENDS, 0)
    assert scan.remaining(scan.seek(START, len(expected))) is None


def test_a_page_ends_at_the_exact_physical_row(table: Table) -> None:
    scan = _scan(table, ["id"], "point.x == 0")
    page = scan.page(START, 5)
    assert page.rows.column("id").to_pylist() == [0, 7, 14, 21, 28]
    assert page.after == Position(0, 29)  # right after row 28, not at the end of its chunk


def test_projection_follows_request_order_and_converts_nested_types(table: Table) -> None:
    rows = _scan(table, ["point", "id"]).page(Position(2, 0), 1).rows
    assert rows.to_pylist() == [{"point": {"x": 20_000 % 7, "y": "20000"}, "id": 20_000}]
    assert rows.schema.field("point").type == pa.struct([("x", pa.int32()), ("y", pa.string())])


@pytest.mark.parametrize(
    ("columns", "text", "field"),
    [
        (["id", "nope"], "", "columns[1]"),
        (["id", "id"], "", "columns[1]"),
        (["id"], "missing > 1", "filter"),
        (["id"], "id == 'abc'", "filter"),
    ],
)
def test_options_name_what_the_schema_lacks(
    table: Table, columns: list[str], text: str, field: str
) -> None:
    with pytest.raises(ServiceError) as error:
        ReadOptions.of(table.schema(), columns, parse_filter(text))
    assert [v.field for v in error.value.violations] == [field]


def test_a_filter_that_does_not_parse_says_where(table: Table) -> None:
    with pytest.raises(ServiceError) as error:
        parse_filter("id > 3 and")
    assert error.value.violations[0].field == "filter"
    assert "character" in error.value.violations[0].description
    assert isinstance(parse_filter("  "), type(AlwaysTrue()))


def test_plans_are_cached_per_snapshot_and_filter(table: Table) -> None:
    cache = PlanCache(max_entries=1)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    everything: BooleanExpression = AlwaysTrue()
    first = cache.plan(table, snapshot, everything)
    assert cache.plan(table, snapshot, everything) is first
    cache.plan(table, snapshot, parse_filter("id > 5"))  # evicts the first
    assert cache.plan(table, snapshot, everything) is not first


def test_tokens_carry_the_position_and_check_the_file(table: Table) -> None:
    scan = _scan(table, ["id"])
    tokens = RowTokens("s" * 40, "rows")
    token = tokens.issue("request", scan.plan, Position(2, 17))
    pinned = tokens.read(token, "request")
    assert pinned.position == Position(2, 17)
    assert pinned.snapshot_id == scan.plan.snapshot_id
    pinned.check(scan.plan)
    moved = Pinned(pinned.snapshot_id, Position(3, 17), pinned.file_digest)
    with pytest.raises(ServiceError):
        moved.check(scan.plan)
    with pytest.raises(ServiceError):
        tokens.read(token, "another request")


def test_offset_tokens_lead_through_a_listing_and_stop_at_its_end() -> None:
    tokens = OffsetTokens("s" * 40, "listing")
    pages, token = [], ""
    while True:
        offset, snapshot_id = tokens.read(token, "request")
        pages.append((offset, snapshot_id))
        token = tokens.following("request", offset, 4, 10, snapshot_id or 7)
        if not token:
            break
    assert pages == [(0, 0), (4, 7), (8, 7)]
    assert tokens.following("request", 0, 5, 5) == ""


def _counting(n: int, log: list[int], delay: float = 0.0) -> Iterator[int]:
    for i in range(n):
        time.sleep(delay)
        log.append(i)
        yield i


def test_read_ahead_keeps_order_and_bounds_what_it_holds() -> None:
    produced: list[list[int]] = [[] for _ in range(4)]
    prefetcher = Prefetcher(
        [partial(_counting, 100, produced[k]) for k in range(4)], ahead=2, depth=2
    )
    items = prefetcher.items()
    assert [next(items) for _ in range(3)] == [0, 1, 2]
    time.sleep(0.3)
    # The consumer took 3 of the first producer's items: at most 2 more wait in its queue
    # (and one in its hand); the second producer got as far as its own queue allows.
    assert len(produced[0]) <= 3 + 2 + 1
    assert len(produced[1]) <= 2 + 1
    assert produced[2] == produced[3] == []
    rest = list(items)
    assert rest == list(range(3, 100)) + list(range(100)) * 3
    prefetcher.close()


def test_closing_stops_the_producers() -> None:
    produced: list[int] = []
    prefetcher = Prefetcher([lambda: _counting(10_000, produced, delay=0.001)], ahead=1)
    items = prefetcher.items()
    next(items)
    prefetcher.close()
    settled = len(produced)
    time.sleep(0.3)
    assert len(produced) == settled < 100
    assert not [t for t in threading.enumerate() if t.name == "result-read-ahead"]


def test_a_producer_failure_reaches_the_consumer() -> None:
    def failing() -> Iterator[int]:
        yield 1
        raise OSError("storage went away")

    prefetcher = Prefetcher([failing], ahead=1)
    items = prefetcher.items()
    assert next(items) == 1
    with pytest.raises(OSError, match="storage went away"):
        next(items)
    prefetcher.close()


def test_stream_messages_are_cut_by_rows_and_bytes() -> None:
    rows = pa.record_batch([pa.array(["x" * 1_000] * 1_000)], names=["text"])
    by_bytes = list(split(rows, max_rows=65_536, max_bytes=100_000))
    assert sum(piece.num_rows for piece in by_bytes) == 1_000
    assert all(len(piece.serialize()) <= 110_000 for piece in by_bytes)
    assert [piece.num_rows for piece in split(rows, max_rows=300, max_bytes=10**9)] == [
        300,
        300,
        300,
        100,
    ]
    batches = b"".join(piece.serialize().to_pybytes() for piece in by_bytes)
    stream = schema_message(rows.schema) + batches + END_OF_STREAM
    assert pa.ipc.open_stream(stream).read_all().column("text").to_pylist() == ["x" * 1_000] * 1_000

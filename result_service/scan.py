"""Rows of a scan plan, in plan order, from a position: seeking, pages and streams.

A position is (file ordinal in the plan, physical row in that file). Seeking
forward by n rows passes over whole files by their record counts wherever the
filter is known to hold for every row of a file, and otherwise counts the
matching rows reading only the filter's columns.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import pyarrow as pa

from result_service.file_reader import Chunk, FileReader
from result_service.plan import ScanPlan
from result_service.prefetch import Prefetcher

T = TypeVar("T")


def _closing(generator: Generator[T, None, None]) -> contextlib.closing[Generator[T, None, None]]:
    """Closes a generator early (and the file it has open) when the reader stops before its end."""
    return contextlib.closing(generator)


@dataclass(frozen=True)
class Position:
    file: int
    row: int


START = Position(0, 0)


@dataclass(frozen=True)
class Page:
    rows: pa.Table
    #: Where the next page starts; None when every row was read.
    after: Position | None


class Scan:
    def __init__(self, plan: ScanPlan, reader: FileReader, counter: FileReader) -> None:
        """reader reads the projected columns; counter only those the filter needs."""
        self.plan = plan
        self._reader = reader
        self._counter = counter

    @property
    def arrow_schema(self) -> pa.Schema:
        return self._reader.arrow_schema

    def normalize(self, position: Position) -> Position:
        """The same position, moved past files it has read to their end."""
        files = self.plan.files
        while position.file < len(files) and position.row >= files[position.file].record_count:
            position = Position(position.file + 1, 0)
        return position

    def remaining(self, position: Position) -> Position | None:
        """position, or None when no row is left after it."""
        normalized = self.normalize(position)
        return normalized if normalized.file < len(self.plan.files) else None

    def seek(self, start: Position, skip: int) -> Position:
        """The position `skip` matching rows after start; blocking."""
        position = self.normalize(start)
        while skip > 0 and position.file < len(self.plan.files):
            planned = self.plan.files[position.file]
            if planned.all_match:
                left = planned.record_count - position.row
                if skip < left:
                    return Position(position.file, position.row + skip)
                skip -= left
            else:
                with _closing(self._counter.chunks(planned.data_file, position.row)) as chunks:
                    for chunk in chunks:
                        if skip <= chunk.rows.num_rows:
                            return self.normalize(
                                Position(position.file, chunk.position_after(skip))
                            )
                        skip -= chunk.rows.num_rows
            position = Position(position.file + 1, 0)
        return self.normalize(position)

    def _file_chunks(self, index: int, start_row: int) -> Generator[tuple[int, Chunk], None, None]:
        with _closing(self._reader.chunks(self.plan.files[index].data_file, start_row)) as chunks:
            for chunk in chunks:
                yield index, chunk

    def chunks(self, start: Position) -> Generator[tuple[int, Chunk], None, None]:
        """(file ordinal, chunk) from start on, one file after the other; blocking."""
        start = self.normalize(start)
        for index in range(start.file, len(self.plan.files)):
            yield from self._file_chunks(index, start.row if index == start.file else 0)

    def read_ahead(self, start: Position, files_at_once: int) -> Prefetcher[tuple[int, Chunk]]:
        """Like chunks, with up to files_at_once files read at the same time, each on its own
        thread and at most two chunks ahead of the consumer."""
        start = self.normalize(start)
        producers = (
            partial(self._file_chunks, index, start.row if index == start.file else 0)
            for index in range(start.file, len(self.plan.files))
        )
        return Prefetcher(producers, ahead=files_at_once)

    def page(self, start: Position, size: int) -> Page:
        """Up to size rows from start on; blocking."""
        taken: list[pa.RecordBatch] = []
        after = Position(len(self.plan.files), 0)
        wanted = size
        with _closing(self.chunks(start)) as chunks:
            for index, chunk in chunks:
                count = min(wanted, chunk.rows.num_rows)
                if count:
                    taken.append(chunk.rows.slice(0, count))
                wanted -= count
                if wanted == 0:
                    after = Position(index, chunk.position_after(count))
                    break
        rows = pa.Table.from_batches(taken, self._reader.arrow_schema)
        return Page(rows=rows, after=self.remaining(after))

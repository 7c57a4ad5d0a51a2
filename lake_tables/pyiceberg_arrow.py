"""The one adapter to pyiceberg's private API: the Arrow helpers the computing unit's writer and
the readers of data files (lake_tables.file_columns, lake_tables.scan_tasks) need, a
transaction's staged updates (MetadataOnceTransaction), the strict metrics evaluation of a scan
plan (all_rows_match) and the REST client's HTTP session (AdaptedRestCatalog); the SQL
catalog's part is lake_tables.pyiceberg_sql. Checked against PYICEBERG_VERSION (a unit test
fails when the installed version moves, so these are looked at again).

SmallWritesFileIO is pyiceberg's Arrow FileIO with pyarrow's delayed open on S3, so a small
file is one request instead of three; whose output files know their length once written, so
pyiceberg's length of a data file or manifest it has just written costs no HEAD request; and
(as StorageFileIO) S3 servers verified against the CA bundle of S3_CA_BUNDLE. Catalogs get it
through pyiceberg's `py-io-impl` property (FILE_IO_PROPERTIES).

MetadataOnceTransaction is pyiceberg's Transaction, whose table_metadata (the table's metadata
with the staged updates applied) is worked out once for each set of updates: pyiceberg works it
out again, with a deep copy of the whole metadata, at every access, some ten times for one
append, which was a tenth of a unit's Python time for a small workflow.

project() is pyiceberg's projection of a record batch onto an Iceberg schema (columns matched
by field id, renamed, cast to the Iceberg types, field ids attached), with one fix: pyiceberg
rebuilds a list or map whose values are structs from its offsets alone, so a null one comes out
empty, when writing and when reading (apache/iceberg-python#3833). project() puts the input's
nulls back at every depth.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyarrow.fs import FileSystem
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.expressions import BooleanExpression
from pyiceberg.expressions.visitors import _StrictMetricsEvaluator
from pyiceberg.io import PY_IO_IMPL, FileIO, OutputStream
from pyiceberg.io.pyarrow import (
    ONE_MEGABYTE,
    PyArrowFile,
    PyArrowFileIO,
    _combine_positional_deletes,
    _get_column_projection_values,
    _get_file_format,
    _get_parquet_writer_kwargs,
    _pyarrow_schema_ensure_small_types,
    _read_all_delete_files,
    _to_requested_schema,
)
from pyiceberg.manifest import DataFile, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import TableUpdate
from pyiceberg.types import IcebergType, ListType, MapType, StructType
from requests import Session
from requests.adapters import HTTPAdapter
from typing_extensions import override

from lake_tables.io_properties import S3_CA_BUNDLE

#: The pyiceberg release these helpers were checked against.
PYICEBERG_VERSION = "0.12.0"


class StorageFileIO(PyArrowFileIO):
    """PyArrowFileIO whose S3 file systems verify the server against S3_CA_BUNDLE when given
    (pyiceberg passes no CA to pyarrow)."""

    def _initialize_s3_fs(self, netloc: str | None) -> FileSystem:
        made = super()._initialize_s3_fs(netloc)
        ca_bundle = self.properties.get(S3_CA_BUNDLE)
        if not ca_bundle:
            return made
        rebuild, (options,) = made.__reduce__()
        rebuilt: FileSystem = rebuild({**options, "tls_ca_file_path": ca_bundle})
        return rebuilt


class SmallWritesFileIO(StorageFileIO):
    """PyArrowFileIO whose S3 file systems open files for writing lazily (pyarrow's
    allow_delayed_open). pyarrow otherwise starts a multipart upload when a file is opened,
    then uploads the part and completes the upload: three requests for a manifest, a metadata
    file or a small data file, where a file written whole before it is closed needs one
    PutObject. A failure to write is then seen at close at the latest, which every writer here
    waits for."""

    def _initialize_s3_fs(self, netloc: str | None) -> FileSystem:
        made = super()._initialize_s3_fs(netloc)
        rebuild, (options,) = made.__reduce__()
        rebuilt: FileSystem = rebuild({**options, "allow_delayed_open": True})
        return rebuilt

    @override
    def new_output(self, location: str) -> PyArrowFile:
        made = super().new_output(location)
        return SizedOutputFile(location, made._path, made._filesystem, made._buffer_size)


class SizedOutputFile(PyArrowFile):
    """PyArrowFile that remembers how many bytes were written through it: pyiceberg asks for
    the length of each data file and manifest it has just written (its file_size_in_bytes,
    manifest_length), which PyArrowFile answers with a HEAD request to the storage."""

    _written: int | None = None

    @override
    def create(self, overwrite: bool = False) -> OutputStream:
        self._written = None
        stream = super().create(overwrite)
        assert isinstance(stream, pa.NativeFile)  # pyarrow's, as PyArrowFile makes it
        return _CountedStream(stream, self)

    @override
    def __len__(self) -> int:
        return super().__len__() if self._written is None else self._written


class _CountedStream:
    """An output stream that, once closed, tells its file how long it is (the stream's position
    then: written from the start, never sought)."""

    def __init__(self, stream: pa.NativeFile, file: SizedOutputFile) -> None:
        self._stream = stream
        self._file = file

    def write(self, data: bytes) -> int:
        return int(self._stream.write(data))

    def tell(self) -> int:
        return int(self._stream.tell())

    def flush(self) -> None:
        self._stream.flush()

    @property
    def closed(self) -> bool:
        return bool(self._stream.closed)

    def close(self) -> None:
        if not self.closed:
            length = self.tell()
            self._stream.close()
            self._file._written = length

    def __enter__(self) -> _CountedStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class MetadataOnceTransaction(Transaction):
    """Transaction, its table_metadata remembered for as long as the table's metadata and the
    staged updates (an immutable tuple, replaced on every change) stay the same objects.
    Sharing one result is safe: pyiceberg's metadata models are frozen."""

    _remembered: tuple[TableMetadata, tuple[TableUpdate, ...], TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        base, updates = self._table.metadata, self._updates
        remembered = self._remembered
        if remembered is None or remembered[0] is not base or remembered[1] is not updates:
            remembered = (base, updates, super().table_metadata)
            self._remembered = remembered
        return remembered[2]


#: The catalog properties that make pyiceberg use SmallWritesFileIO for the tables it loads.
FILE_IO_PROPERTIES = {PY_IO_IMPL: f"{SmallWritesFileIO.__module__}.{SmallWritesFileIO.__name__}"}
#: The catalog properties that make pyiceberg use StorageFileIO (reads and deletes).
STORAGE_IO_PROPERTIES = {PY_IO_IMPL: f"{StorageFileIO.__module__}.{StorageFileIO.__name__}"}

column_projection_values = _get_column_projection_values
parquet_writer_options = _get_parquet_writer_kwargs
ensure_small_types = _pyarrow_schema_ensure_small_types
#: Row indices in [start, end) of a data file that none of its positional deletes names,
#: counted from start.
positions_kept = _combine_positional_deletes


def all_rows_match(schema: Schema, row_filter: BooleanExpression) -> Callable[[DataFile], bool]:
    """Whether every row of a data file matches row_filter, by its column metrics alone (a file
    without metrics for the filter's columns: False)."""
    return _StrictMetricsEvaluator(schema, row_filter, case_sensitive=True).eval


class AdaptedRestCatalog(RestCatalog):
    """RestCatalog whose every HTTP session, its config fetch's too, sends through an adapter
    made by adapter()."""

    def __init__(self, adapter: Callable[[], HTTPAdapter], name: str, **properties: Any) -> None:
        self._adapter = adapter
        super().__init__(name, **properties)

    @override
    def _create_session(self) -> Session:
        session = super()._create_session()
        adapter = self._adapter()
        for prefix in ("http://", "https://"):
            session.mount(prefix, adapter)
        return session


def positional_deletes(io: FileIO, task: FileScanTask) -> list[pa.ChunkedArray]:
    """The deleted row positions of task's data file, from its delete files (positional
    deletes and deletion vectors)."""
    return _read_all_delete_files(io, [task]).get(task.file.file_path, [])


def data_file_format(kind: FileFormat) -> ds.FileFormat:
    """Arrow's format for a data file, buffered as pyiceberg's scans read one."""
    options: dict[str, Any] = {"pre_buffer": True, "buffer_size": 8 * ONE_MEGABYTE}
    return _get_file_format(kind, **options)


def project(
    requested: Schema, file_schema: Schema, batch: pa.RecordBatch, **options: Any
) -> pa.RecordBatch:
    """batch (whose columns are file_schema's) as requested's columns; options are those of
    pyiceberg's _to_requested_schema."""
    projected = _to_requested_schema(requested, file_schema, batch, **options)
    names = set(batch.schema.names)
    columns = []
    for index, field in enumerate(requested.fields):
        column = projected.column(index)
        source = _file_name(file_schema, field.field_id)
        if source in names:
            column = _with_nulls_of(field.field_type, column, batch.column(source), file_schema)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=projected.schema)


def _file_name(file_schema: Schema, field_id: int) -> str | None:
    try:
        return file_schema.find_field(field_id).name
    except ValueError:  # not in the file: projected as nulls or a default
        return None


def _has_list_or_map(kind: IcebergType) -> bool:
    if isinstance(kind, ListType | MapType):
        return True
    if isinstance(kind, StructType):
        return any(_has_list_or_map(field.field_type) for field in kind.fields)
    return False


def _with_nulls_of(
    kind: IcebergType, projected: pa.Array, source: pa.Array, file_schema: Schema
) -> pa.Array:
    """projected, with the nulls of source (the same values before projection) in its lists
    and maps, at every depth."""
    if not _has_list_or_map(kind):
        return projected  # structs and primitives keep their nulls
    if isinstance(kind, StructType):
        children = []
        for index, field in enumerate(kind.fields):
            child = projected.field(index)
            name = _file_name(file_schema, field.field_id)
            if name is not None and source.type.get_field_index(name) >= 0:
                child = _with_nulls_of(field.field_type, child, source.field(name), file_schema)
            children.append(child)
        return pa.StructArray.from_arrays(
            children, fields=list(projected.type), mask=source.is_null()
        )
    offsets, projected_children = _cut(projected)
    source_offsets, source_children = _cut(source)
    if not offsets.cast(pa.int64()).equals(source_offsets.cast(pa.int64())):
        raise ValueError("the projection of a list or map moved its values")
    if isinstance(kind, ListType):
        [values], [source_values] = projected_children, source_children
        values = _with_nulls_of(kind.element_type, values, source_values, file_schema)
        return type(projected).from_arrays(
            offsets, values, type=projected.type, mask=source.is_null()
        )
    assert isinstance(kind, MapType)
    [keys, items], [source_keys, source_items] = projected_children, source_children
    keys = _with_nulls_of(kind.key_type, keys, source_keys, file_schema)
    items = _with_nulls_of(kind.value_type, items, source_items, file_schema)
    return pa.MapArray.from_arrays(offsets, keys, items, type=projected.type, mask=source.is_null())


def _cut(array: pa.Array) -> tuple[pa.Array, list[pa.Array]]:
    """The offsets of a list or map array, new and from 0, and its children cut to what they
    reach: Arrow builds no array with a mask from a slice's offsets."""
    offsets = array.offsets
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    children = [array.keys, array.items] if isinstance(array, pa.MapArray) else [array.values]
    return pc.subtract(offsets, offsets[0]), [child.slice(start, end - start) for child in children]

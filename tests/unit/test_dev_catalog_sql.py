"""The development catalog's SqlCatalog, on SQLite and local files: what it changes of
pyiceberg's, which fails here once pyiceberg moves what it relies on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.io.pyarrow import PyArrowFile
from sqlalchemy import create_engine

from embedded_stack.dev_catalog.catalogs import REMEMBERED_METADATA_FILES
from lake_tables.pyiceberg_sql import RememberingSqlCatalog
from tests.unit.file_questions import locations_asked

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64())})


@pytest.fixture
def catalog(tmp_path: Path) -> RememberingSqlCatalog:
    made = RememberingSqlCatalog(
        "w1",
        create_engine(f"sqlite:///{tmp_path}/catalog.db"),
        REMEMBERED_METADATA_FILES,
        warehouse=f"file://{tmp_path}",
    )
    made.create_tables()
    made.create_namespace("results")
    return made


def test_metadata_files_are_written_without_asking_whether_they_exist(
    catalog: RememberingSqlCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = locations_asked(monkeypatch, "exists")
    table = catalog.create_table(("results", "t"), schema=ROWS.schema)
    table.append(ROWS)
    assert [name for name in asked if name.endswith(".metadata.json")] == []
    assert len(catalog.load_table(("results", "t")).metadata.metadata_log) == 1


def test_whether_a_table_exists_is_asked_of_the_database(
    catalog: RememberingSqlCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog.create_table(("results", "t"), schema=ROWS.schema)

    def unreadable(self: PyArrowFile) -> None:
        raise AssertionError(f"{self.location} was read")

    monkeypatch.setattr(PyArrowFile, "open", unreadable)
    assert catalog.table_exists(("results", "t"))
    assert not catalog.table_exists(("results", "other"))
    assert not catalog.table_exists(("elsewhere", "t"))


def test_the_metadata_files_it_wrote_are_loaded_from_memory(
    catalog: RememberingSqlCatalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading and committing read no metadata file the catalog wrote; the tables are the
    same as read from storage, where another catalog on the same database reads them."""
    table = catalog.create_table(("results", "t"), schema=ROWS.schema)
    read: list[str] = []
    open_file = PyArrowFile.open

    def recording(self: PyArrowFile, seekable: bool = True) -> Any:
        read.append(self.location)
        return open_file(self, seekable)

    monkeypatch.setattr(PyArrowFile, "open", recording)
    table.append(ROWS)
    loaded = catalog.load_table(("results", "t"))
    assert [name for name in read if name.endswith(".metadata.json")] == []
    other = RememberingSqlCatalog(
        "w1", catalog.engine, REMEMBERED_METADATA_FILES, warehouse=f"file://{tmp_path}"
    )
    from_storage = other.load_table(("results", "t"))
    assert [name for name in read if name.endswith(".metadata.json")] == [loaded.metadata_location]
    assert from_storage.metadata == loaded.metadata
    assert loaded.scan().to_arrow().num_rows == 3

"""What the mesh takes from pyiceberg's private API for catalogs and scan plans (see
lake_tables.pyiceberg_arrow and lake_tables.pyiceberg_sql), pinned: the strict metrics
evaluation, the REST client's HTTP session, and the SQL catalog's hooks the development catalog
overrides."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import MetastoreCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions.parser import parse
from requests import PreparedRequest, Response
from requests.adapters import HTTPAdapter
from typing_extensions import override

from lake_tables.pyiceberg_arrow import AdaptedRestCatalog, all_rows_match


def test_all_rows_match_by_a_files_metrics(tmp_path: Path) -> None:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("n")
    rows = pa.table({"id": pa.array(range(10), pa.int64())})
    table = catalog.create_table(("n", "t"), rows.schema)
    table.append(rows)
    [task] = table.scan().plan_files()
    schema = table.metadata.schema()
    assert all_rows_match(schema, parse("id >= 0"))(task.file)
    assert not all_rows_match(schema, parse("id > 5"))(task.file)


class _ConfigAnswering(HTTPAdapter):
    """Answers every request with an empty config, and remembers it."""

    def __init__(self, seen: list[str]) -> None:
        super().__init__()
        self._seen = seen

    @override
    def send(self, request: PreparedRequest, *args: Any, **kwargs: Any) -> Response:
        self._seen.append(f"{request.method} {request.url}")
        response = Response()
        response.status_code = 200
        response._content = json.dumps({"defaults": {}, "overrides": {}}).encode()
        response.headers["Content-Type"] = "application/json"
        response.request = request
        return response


def test_a_rest_catalogs_every_request_goes_through_its_adapter() -> None:
    seen: list[str] = []
    catalog = AdaptedRestCatalog(
        lambda: _ConfigAnswering(seen), "w", uri="http://catalog.invalid", warehouse="w"
    )
    assert seen == ["GET http://catalog.invalid/v1/config?warehouse=w"]
    assert catalog.properties["uri"] == "http://catalog.invalid"


def test_the_sql_catalogs_hooks_are_where_the_development_catalog_expects_them() -> None:
    write = inspect.getattr_static(MetastoreCatalog, "_write_metadata")
    assert isinstance(write, staticmethod)
    assert list(inspect.signature(MetastoreCatalog._write_metadata).parameters) == [
        "metadata",
        "io",
        "metadata_path",
    ]
    assert list(inspect.signature(SqlCatalog._convert_orm_to_iceberg).parameters) == [
        "self",
        "orm_table",
    ]

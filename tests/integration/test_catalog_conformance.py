"""Every catalog request of a journey through the real services, and every answer, checked
against the published specs (deploy/specs/) with openapi-core.

The test stack's development catalog records its traffic (TEXERA_LAKE_DEV_CATALOG_RECORD_FILE,
see tests/conftest.py); the journey's part of the record is validated line by line: a
warehouse created, an execution written, its results read, the warehouse archived,
restored, archived again and deleted with purge."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from openapi_core import OpenAPI
from openapi_core.testing import MockRequest, MockResponse
from werkzeug.datastructures import ImmutableMultiDict

from embedded_stack.dev_catalog.recording import REDACTED
from embedded_stack.stack import Stack
from service_runtime.execution_states import state_name
from tests.conftest import catalog_traffic
from tests.integration.executions import new_user, workflow
from tests.integration.mesh import user
from tests.integration.results import arrow_table, results_like
from texera.lake.v1 import warehouse_pb2
from texera.lake.v1 import warehouse_service_pb2 as ws

pytestmark = pytest.mark.integration

SPECS = Path(__file__).resolve().parents[2] / "deploy" / "specs"
ROWS = 1_000


def _specs() -> dict[str, OpenAPI]:
    """The spec of each recorded API, by path prefix."""
    return {
        "/management/": OpenAPI.from_file_path(
            str(SPECS / "lakekeeper-management-open-api.v0.13.3.yaml")
        ),
        "/catalog/": OpenAPI.from_file_path(str(SPECS / "iceberg-rest-catalog-open-api.yaml")),
    }


def _body(recorded: Any) -> bytes:
    return b"" if recorded is None else json.dumps(recorded).encode()


def _violations(specs: dict[str, OpenAPI], entry: dict[str, Any]) -> list[str]:
    """What the spec says is wrong with one recorded request or its answer."""
    [spec] = [spec for prefix, spec in specs.items() if entry["path"].startswith(prefix)]
    sent, answered = entry["request"], entry["response"]
    request = MockRequest(
        "http://localhost",
        entry["method"],
        entry["path"],
        args=ImmutableMultiDict(entry["query"]),
        headers={"Authorization": f"Bearer {REDACTED}"} if sent["bearer"] else {},
        data=_body(sent["body"]),
        content_type=sent["content_type"] or "application/json",
    )
    response = MockResponse(
        _body(answered["body"]),
        status_code=answered["status"],
        content_type=answered["content_type"] or "",
    )
    found = []
    checks: list[tuple[str, Callable[[], None]]] = [
        ("request", lambda: spec.validate_request(request)),
        ("response", lambda: spec.validate_response(request, response)),
    ]
    for part, check in checks:
        try:
            check()
        except Exception as exc:  # openapi-core's errors: anything it refuses is a violation
            details = getattr(exc, "schema_errors", None) or [exc.__cause__ or exc]
            found.append(
                f"{entry['method']} {entry['path']} {answered['status']} {part}: "
                + "; ".join(str(d).splitlines()[0] for d in details)
            )
    return found


@pytest.mark.filterwarnings("ignore:Unsupported scheme type")
def test_a_journeys_catalog_traffic_follows_the_specs(stack: Stack) -> None:
    record = catalog_traffic(stack.state_dir)
    start = record.stat().st_size if record.exists() else 0

    unit, warehouse_id, _ = new_user(stack, "conformance")
    operators = [{"operator_id": "numbers", "range_source": {"end": ROWS}, "materialize": True}]
    execution = unit.finish(unit.submit(warehouse_id, workflow(operators)).execution_id)
    assert state_name(execution) == "SUCCEEDED", execution.error
    results = results_like(stack, unit)
    assert arrow_table(results.stream(execution.execution_id, "numbers")).num_rows == ROWS
    results.snapshots(execution.execution_id, "numbers")

    owner = user(stack, unit.user_id)
    archive = ws.ArchiveWarehouseRequest(warehouse_id=warehouse_id)
    owner.call(owner.warehouses.ArchiveWarehouse, archive)
    owner.call(
        owner.warehouses.RestoreWarehouse, ws.RestoreWarehouseRequest(warehouse_id=warehouse_id)
    )
    owner.call(owner.warehouses.ArchiveWarehouse, archive)
    deleted = owner.call(
        owner.warehouses.DeleteWarehouse,
        ws.DeleteWarehouseRequest(warehouse_id=warehouse_id, purge=True),
    )
    assert deleted.warehouse.state == warehouse_pb2.WAREHOUSE_STATE_DELETED

    with record.open(encoding="utf-8") as lines:
        lines.seek(start)
        entries = [json.loads(line) for line in lines]
    calls = {f"{e['method']} {e['path'].split('/')[1]}" for e in entries}
    assert {"POST management", "DELETE management", "GET catalog", "POST catalog"} <= calls
    specs = _specs()
    violations = [v for entry in entries for v in _violations(specs, entry)]
    assert violations == [], f"{len(violations)} of {len(entries)} calls break the specs"

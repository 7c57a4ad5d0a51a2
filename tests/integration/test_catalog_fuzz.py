"""Schemathesis against the development catalog alone: requests generated from the
Lakekeeper management spec and the Iceberg REST spec (deploy/specs/), with a valid token,
must never answer 5xx.

Bounded for the suite; `make fuzz-catalog` runs many more examples per operation."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.core.result import Ok
from schemathesis.core.transport import Response
from schemathesis.schemas import APIOperation

from embedded_stack.dev_catalog.rest import SUPPORTED_ENDPOINTS
from embedded_stack.stack import Stack
from tests.integration.catalog_client import create_warehouse, rest_catalog

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPECS = Path(__file__).resolve().parents[2] / "deploy" / "specs"
#: Examples per operation; the catalog's own operations get EXAMPLES, the rest (views, scan
#: planning, projects, roles: all answered 404 or 405) a few.
EXAMPLES = int(os.environ.get("CATALOG_FUZZ_EXAMPLES", "6"))
NAMESPACE, TABLE = "fuzz", "target"
Operation = APIOperation[Any, Any, Any, Any]
Case = schemathesis.Case[Operation]
SERVED = {"/v1/config", *(endpoint.split(" ", 1)[1] for endpoint in SUPPORTED_ENDPOINTS)}


def _served(path: str) -> bool:
    """Whether the development catalog implements a spec path."""
    return path in SERVED or path.startswith("/management/v1/warehouse")


def _operations(spec: str) -> Iterator[Operation]:
    for result in schemathesis.openapi.from_path(SPECS / spec).get_all_operations():
        assert isinstance(result, Ok), result
        yield result.ok()


@pytest.fixture(scope="module")
def catalog(stack: Stack) -> tuple[str, dict[str, str], str]:
    """A development catalog of its own, its admin's headers, and a warehouse with a table."""
    url = stack.start_catalog("fuzzed-catalog", {})
    name = f"fuzz-{uuid.uuid4().hex[:8]}"
    created = create_warehouse(stack, stack.provision_bucket("fuzz"), name)
    assert created.status_code == 201, created.text
    iceberg = rest_catalog(stack, name)
    iceberg.create_namespace(NAMESPACE)
    iceberg.create_table(f"{NAMESPACE}.{TABLE}", schema=pa.schema([pa.field("id", pa.int64())]))
    headers = {"Authorization": f"Bearer {stack.catalog_token(url)}"}
    return url, headers, created.json()["warehouse-id"]


def _fuzz(operation: Operation, call: Callable[..., Response], examples: int) -> list[str]:
    """Generated requests to one operation; the ones answered 5xx."""
    failures: list[str] = []

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def run(case: Case) -> None:
        response = call(case)
        if response.status_code >= 500:
            failures.append(
                f"{case.method} {case.formatted_path} {case.query} -> "
                f"{response.status_code} {response.text[:200]}"
            )

    run()
    return failures


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("spec", "base"),
    [
        ("lakekeeper-management-open-api.v0.13.3.yaml", ""),
        ("iceberg-rest-catalog-open-api.yaml", "/catalog"),
    ],
)
def test_no_generated_request_gets_a_5xx(
    catalog: tuple[str, dict[str, str], str], spec: str, base: str
) -> None:
    url, headers, warehouse_id = catalog

    def call(case: Case) -> Response:
        # Aim the catalog's operations at a real warehouse, namespace and table (dropping
        # them is left to generated names), so that bodies reach the handlers.
        targets = {"prefix": warehouse_id}
        if case.method.upper() != "DELETE":
            targets |= {"namespace": NAMESPACE, "table": TABLE}
        for name, value in targets.items():
            if name in (case.path_parameters or {}):
                case.path_parameters[name] = value
        return case.call(base_url=url + base, headers=headers, timeout=60)

    failures: list[str] = []
    for operation in _operations(spec):
        examples = EXAMPLES if _served(operation.path) else 2
        failures += _fuzz(operation, call, examples)
    assert failures == []

"""Fixtures shared by the unit and integration tests."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack
from service_runtime.ports import LISTEN_PORTS_ENV, listen_ports
from tests.xdist_scheduling import group_of, make_scheduler

ROOT = Path(__file__).resolve().parent.parent


def documentation() -> str:
    """The README and every page under docs/, as one text."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return "\n".join(page.read_text() for page in pages)


#: Settings of the test stack that differ from the embedded defaults.
TEST_STACK_ENV = {
    # The catalog as Lakekeeper with Keycloak has it: every token of the registry's reaches
    # every warehouse (the catalog's operator), so that only the mesh confines units.
    "TEXERA_LAKE_DEV_CATALOG_SCOPED_TOKENS": "false",
    "TEXERA_LAKE_DEV_CATALOG_FAULT_INJECTION": "true",
    # Listings of more than two namespaces or tables page, so that clients must follow tokens.
    "TEXERA_LAKE_DEV_CATALOG_PAGE_SIZE": "2",
    # A loopback port nothing listens on, so that tests can see an unreachable endpoint.
    "TEXERA_LAKE_WAREHOUSE_ALLOWED_STORAGE_ENDPOINTS": "http://127.0.0.1:9",
    "TEXERA_LAKE_DEV_CATALOG_ALLOWED_STORAGE_ENDPOINTS": "http://127.0.0.1:9",
    # Leases lapse within seconds, so that tests can lose a computing unit quickly.
    "TEXERA_LAKE_WAREHOUSE_HEARTBEAT_INTERVAL_SECONDS": "1",
    "TEXERA_LAKE_WAREHOUSE_LEASE_SECONDS": "6",
    # Failed executions are cleaned up within a second.
    "TEXERA_LAKE_WAREHOUSE_CLEANUP_INTERVAL_SECONDS": "1",
    # Ended executions' usage is read within a second.
    "TEXERA_LAKE_WAREHOUSE_USAGE_INTERVAL_SECONDS": "1",
    # Units' JVMs compile with C1 only: the tests' jobs are short, and many units start.
    "TEXERA_LAKE_CU_SPARK_DRIVER_JAVA_OPTIONS": "-XX:TieredStopAtLevel=1",
    # Nor do they warm up (test_warm_up does): many start, and they share the tests' cores.
    "TEXERA_LAKE_CU_WARM_UP_JOBS": "0",
    # No warm pool of units (test_unit_pool has one): units start when asked for.
    "TEXERA_LAKE_WAREHOUSE_UNIT_POOL_SIZE": "0",
    # A catalog that keeps failing fails its executions within seconds, not minutes.
    "TEXERA_LAKE_CU_COMMIT_RETRY_SECONDS": "5",
}


RECORD_FILE = "TEXERA_LAKE_DEV_CATALOG_RECORD_FILE"


def catalog_traffic(state_dir: Path) -> Path:
    """Where the test stack's catalog records its traffic (see test_catalog_conformance)."""
    return state_dir / "catalog-traffic.jsonl"


@contextlib.contextmanager
def _stack_refused_unless_integration(item: pytest.Item) -> Iterator[None]:
    """A test without the integration marker may not start the stack, even through a fixture:
    the fast lane (`make check`) starts no process."""
    if item.get_closest_marker("integration") is not None:
        yield
        return
    started = Stack.start

    def refused(self: Stack) -> None:
        raise pytest.UsageError(f"{item.nodeid} starts the stack: mark it integration")

    Stack.start = refused  # type: ignore[method-assign]
    try:
        yield
    finally:
        Stack.start = started  # type: ignore[method-assign]


#: Test files (or groups of them) that take longest, longest first. They run first, so that no
#: worker is left with a long one at the end.
LONGEST_FILES = (
    "test_long_executions.py",
    "short_lived_stack",
    "test_units.py",
    "test_catalog_modes.py",
    "test_computing_unit.py",
    "test_resource_limits.py",
    "test_retention.py",
    "test_unit_leases_through_outages.py",
    "test_registry_resilience.py",
    "test_cleanup.py",
    "test_processes.py",
    "test_tls_stack.py",
    "test_gateway.py",
    "test_warehouse_sharing.py",
    "test_workflow_reach.py",
    "test_readme_journey.py",
    "test_spark_cluster.py",
    "test_usage.py",
    "test_registry_warehouses.py",
    "test_workflow_fuzz.py",
)


def pytest_configure(config: pytest.Config) -> None:
    """Each pytest-xdist worker, and every process it starts, picks ports from a share of its
    own: stacks started side by side never pick the same port."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if worker is None or count is None or LISTEN_PORTS_ENV in os.environ:
        return
    ports = listen_ports()
    share = len(ports) // int(count)
    first = ports.start + int(worker.removeprefix("gw")) * share
    os.environ[LISTEN_PORTS_ENV] = f"{first}-{first + share - 1}"


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Files sharing a stack run in one worker (see tests/xdist_scheduling.py)."""
    return make_scheduler(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest groups first (see LONGEST_FILES); the order within a file stays as written."""
    rank = {name: position for position, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(group_of(item.path.name), len(rank)))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _stack_refused_unless_integration(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _stack_refused_unless_integration(item):
        return (yield)


@pytest.fixture(scope="session")
def jwt_secret() -> str:
    return secrets.token_urlsafe(40)


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The whole embedded mesh on free loopback ports, shared by the integration tests."""
    state_dir = tmp_path_factory.mktemp("stack")
    settings = StackSettings(state_dir=str(state_dir), log_level="DEBUG")
    env = {**TEST_STACK_ENV, RECORD_FILE: str(catalog_traffic(state_dir))}
    with Stack(settings, ephemeral_ports=True, service_env=env) as running:
        yield running


@pytest.fixture(scope="session")
def short_lived_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack whose catalog vends credentials that live three seconds, and whose computing
    unit commits after every wave of tasks."""
    settings = StackSettings(state_dir=str(tmp_path_factory.mktemp("short-lived")))
    env = {
        **TEST_STACK_ENV,
        "TEXERA_LAKE_DEV_CATALOG_CREDENTIAL_LIFETIME_SECONDS": "3",
        "TEXERA_LAKE_CU_COMMIT_INTERVAL_SECONDS": "0",
    }
    with Stack(settings, ephemeral_ports=True, service_env=env) as running:
        yield running
